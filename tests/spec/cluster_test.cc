// Cluster files: the DESIGN.md example, rank numbering, the link model (same node, NIC minimum,
// link overrides), the bundled examples, and every bad-input path with its code and message.
#include "spec/cluster.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "spec/units.h"
#include "spec_test_util.h"

namespace hexiseq {
namespace {

const DeviceCatalog& Catalog() {
  static const DeviceCatalog catalog;
  return catalog;
}

Result<Cluster> Parse(const std::string& text) { return ParseCluster(text, "c.yaml", Catalog()); }

// Asserts that `text` fails with kInvalidArgument and a message containing each of `parts`.
void ExpectError(const std::string& text, const std::vector<std::string>& parts) {
  auto result = Parse(text);
  ASSERT_FALSE(result) << "parsed unexpectedly:\n" << text;
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  for (const std::string& part : parts) {
    EXPECT_NE(result.error().message.find(part), std::string::npos)
        << "message: " << result.error().message << "\nexpected to contain: " << part;
  }
}

constexpr const char* kDesignExample = R"(name: mixed-h100-a100
nodes:                          # node kinds; ranks are numbered in this order, node by node
  - gpu: H100-SXM               # a device-catalog name ...
    count: 2                    # nodes of this kind
    gpus_per_node: 8
    intra_node: 450 GB/s        # optional: per-GPU, per-direction bandwidth inside the node
    nic: 25 GB/s                # optional: per-GPU, per-direction bandwidth to other nodes
  - gpu:                        # ... or an inline device
      name: MyAccel
      bf16_tflops: 200
      memory: 48 GiB
    count: 1
    gpus_per_node: 4
    intra_node: 32 GB/s
inter_node: 25 GB/s             # default for `nic` when a node kind does not give one
)";

TEST(ClusterTest, ParsesTheDesignExample) {
  auto cluster = Parse(kDesignExample);
  ASSERT_TRUE(cluster) << cluster.error().message;
  EXPECT_EQ(cluster->name, "mixed-h100-a100");
  ASSERT_EQ(cluster->kinds.size(), 2u);
  EXPECT_EQ(cluster->num_ranks(), 20);
  EXPECT_EQ(cluster->nodes.size(), 3u);
  const NodeKind& h100 = cluster->kinds[0];
  EXPECT_EQ(h100.device.name, "H100-SXM");
  EXPECT_DOUBLE_EQ(h100.intra_node_bytes_per_second, 450e9);
  EXPECT_DOUBLE_EQ(h100.nic_bytes_per_second, 25e9);
  const NodeKind& mine = cluster->kinds[1];
  EXPECT_EQ(mine.device.name, "MyAccel");
  EXPECT_DOUBLE_EQ(mine.device.peak_flops, 200e12);
  EXPECT_DOUBLE_EQ(mine.device.memory_bytes, 48 * kGiB);
  EXPECT_DOUBLE_EQ(mine.intra_node_bytes_per_second, 32e9);
  EXPECT_DOUBLE_EQ(mine.nic_bytes_per_second, 25e9);  // from inter_node
  EXPECT_EQ(cluster->device(19).name, "MyAccel");
  EXPECT_EQ(cluster->device(0).name, "H100-SXM");
}

TEST(ClusterTest, RanksAreNumberedNodeByNodeInListOrder) {
  auto cluster = Parse(
      "nodes:\n"
      "  - {gpu: A100-SXM-80G, count: 2, gpus_per_node: 3}\n"
      "  - {gpu: L40S, count: 1, gpus_per_node: 2}\n"
      "  - {gpu: H100-SXM, count: 2, gpus_per_node: 1}\n");
  ASSERT_TRUE(cluster) << cluster.error().message;
  EXPECT_EQ(cluster->name, "c");  // the file stem by default
  ASSERT_EQ(cluster->num_ranks(), 10);
  // rank: node, kind, local_rank (written out by hand).
  const std::vector<RankInfo> expected = {{0, 0, 0, 0}, {1, 0, 0, 1}, {2, 0, 0, 2}, {3, 1, 0, 0},
                                          {4, 1, 0, 1}, {5, 1, 0, 2}, {6, 2, 1, 0}, {7, 2, 1, 1},
                                          {8, 3, 2, 0}, {9, 4, 2, 0}};
  EXPECT_EQ(cluster->ranks, expected);
  const std::vector<NodeInfo> nodes = {
      {0, 0, 0, 3}, {1, 0, 3, 3}, {2, 1, 6, 2}, {3, 2, 8, 1}, {4, 2, 9, 1}};
  EXPECT_EQ(cluster->nodes, nodes);
  EXPECT_TRUE(cluster->SameNode(0, 2));
  EXPECT_FALSE(cluster->SameNode(2, 3));
  EXPECT_FALSE(cluster->SameNode(8, 9));
}

TEST(ClusterTest, BandwidthSameNodeNicMinimumAndOverrides) {
  // Catalog NICs: H100-SXM 50 GB/s, A100-SXM-80G 25 GB/s, L40S 6.25 GB/s.
  auto cluster = Parse(
      "nodes:\n"
      "  - {gpu: H100-SXM, count: 2, gpus_per_node: 2, intra_node: 450 GB/s}\n"
      "  - {gpu: A100-SXM-80G, count: 1, gpus_per_node: 2}\n"
      "  - {gpu: L40S, count: 1, gpus_per_node: 2}\n"
      "links:\n"
      "  - {between: [H100-SXM, L40S], bandwidth: 2 GB/s}\n"
      "  - {between: [l40s, h100-sxm], bandwidth: 3 GB/s}\n");  // later wins; case-insensitive
  ASSERT_TRUE(cluster) << cluster.error().message;
  // Ranks: 0-1 node 0 (H100), 2-3 node 1 (H100), 4-5 node 2 (A100), 6-7 node 3 (L40S).
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(0, 1), 450e9);  // same node: the kind's intra_node
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(4, 5), 300e9);  // catalog intra_node for A100
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(6, 7), 32e9);   // L40S over PCIe
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(0, 2), 50e9);   // two H100 nodes: both NICs 50
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(1, 4), 25e9);   // H100 - A100: the smaller NIC
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(4, 1), 25e9);
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(4, 6), 6.25e9);  // A100 - L40S: 50 Gb/s
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(0, 6), 3e9);     // override, last entry wins
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(7, 3), 3e9);     // both directions
  EXPECT_GT(cluster->Bandwidth(3, 3), 0);
}

// The cost model's lookup tables give Cluster::Bandwidth and Cluster::Latency for every pair,
// overrides, the same node and a rank to itself included.
TEST(ClusterTest, LinkTableMatchesTheClusterForEveryPair) {
  auto cluster = Parse(
      "nodes:\n"
      "  - {gpu: H100-SXM, count: 2, gpus_per_node: 2, intra_node: 450 GB/s, latency: 3 us}\n"
      "  - {gpu: A100-SXM-80G, count: 1, gpus_per_node: 2}\n"
      "  - {gpu: L40S, count: 2, gpus_per_node: 1}\n"
      "inter_node_latency: 9 us\n"
      "links:\n"
      "  - {between: [H100-SXM, L40S], bandwidth: 2 GB/s}\n"
      "  - {between: [L40S, L40S], bandwidth: 1 GB/s}\n"
      "  - {between: [l40s, h100-sxm], bandwidth: 3 GB/s}\n");
  ASSERT_TRUE(cluster) << cluster.error().message;
  const LinkTable table(*cluster);
  for (int a = 0; a < cluster->num_ranks(); ++a)
    for (int b = 0; b < cluster->num_ranks(); ++b) {
      EXPECT_EQ(table.Bandwidth(a, b), cluster->Bandwidth(a, b)) << a << " -> " << b;
      EXPECT_EQ(table.Latency(a, b), cluster->Latency(a, b)) << a << " -> " << b;
    }
  EXPECT_EQ(table.Bandwidth(6, 7), 1e9);  // the L40S pair override
  EXPECT_EQ(table.Bandwidth(0, 6), 3e9);  // the later H100 - L40S override

  // Beyond the pair table's kinds the overrides are looked up per call.
  std::string many = "nodes:\n";
  constexpr int kKinds = 70;
  for (int kind = 0; kind < kKinds; ++kind)
    many += "  - {name: k" + std::to_string(kind) + ", gpu: " + (kind % 2 ? "L40S" : "H100-SXM") +
            ", count: 1, gpus_per_node: 1}\n";
  many += "links:\n  - {between: [k3, k68], bandwidth: 1 GB/s}\n";
  auto wide = Parse(many);
  ASSERT_TRUE(wide) << wide.error().message;
  ASSERT_EQ(static_cast<int>(wide->kinds.size()), kKinds);
  const LinkTable wide_table(*wide);
  for (int a = 0; a < wide->num_ranks(); ++a)
    for (int b = 0; b < wide->num_ranks(); ++b)
      ASSERT_EQ(wide_table.Bandwidth(a, b), wide->Bandwidth(a, b)) << a << " -> " << b;
  EXPECT_EQ(wide_table.Bandwidth(68, 3), 1e9);
}

TEST(ClusterTest, LinksCanNameANodeKindAndTheSameKind) {
  auto cluster = Parse(
      "nodes:\n"
      "  - {name: rack-a, gpu: H100-SXM, count: 2, gpus_per_node: 1}\n"
      "  - {name: rack-b, gpu: H100-SXM, count: 1, gpus_per_node: 1}\n"
      "links:\n"
      "  - {between: [rack-a, rack-a], bandwidth: 40 GB/s}\n"
      "  - {between: [rack-a, rack-b], bandwidth: 100 Gb/s}\n");
  ASSERT_TRUE(cluster) << cluster.error().message;
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(0, 1), 40e9);
  EXPECT_DOUBLE_EQ(cluster->Bandwidth(1, 2), 12.5e9);
  EXPECT_EQ(cluster->links.size(), 2u);
  // A gpu name matches every kind with that gpu.
  auto by_gpu = Parse(
      "nodes:\n"
      "  - {name: rack-a, gpu: H100-SXM, count: 1, gpus_per_node: 1}\n"
      "  - {name: rack-b, gpu: H100-SXM, count: 1, gpus_per_node: 1}\n"
      "  - {gpu: A100-40G, count: 1, gpus_per_node: 1}\n"
      "links:\n"
      "  - {between: [H100-SXM, A100-40G], bandwidth: 7 GB/s}\n");
  ASSERT_TRUE(by_gpu) << by_gpu.error().message;
  EXPECT_DOUBLE_EQ(by_gpu->Bandwidth(0, 2), 7e9);
  EXPECT_DOUBLE_EQ(by_gpu->Bandwidth(1, 2), 7e9);
  EXPECT_DOUBLE_EQ(by_gpu->Bandwidth(0, 1), 50e9);
}

TEST(ClusterTest, NicDefaultsKindThenInterNodeThenCatalog) {
  auto cluster = Parse(
      "nodes:\n"
      "  - {gpu: H100-SXM, count: 1, gpus_per_node: 1, nic: 10 GB/s}\n"
      "  - {gpu: H100-SXM, count: 1, gpus_per_node: 1}\n"
      "inter_node: 20 GB/s\n");
  ASSERT_TRUE(cluster) << cluster.error().message;
  EXPECT_DOUBLE_EQ(cluster->kinds[0].nic_bytes_per_second, 10e9);
  EXPECT_DOUBLE_EQ(cluster->kinds[1].nic_bytes_per_second, 20e9);
  EXPECT_DOUBLE_EQ(cluster->kinds[1].device.nic_bytes_per_second, 20e9);
  auto catalog_default = Parse("nodes: [{gpu: A800, count: 1, gpus_per_node: 8}]\n");
  ASSERT_TRUE(catalog_default);
  EXPECT_DOUBLE_EQ(catalog_default->kinds[0].nic_bytes_per_second, 25e9);
  EXPECT_DOUBLE_EQ(catalog_default->kinds[0].intra_node_bytes_per_second, 200e9);
}

TEST(ClusterTest, LatencyDefaultsAndOverrides) {
  auto cluster = Parse(
      "nodes:\n"
      "  - {gpu: H100-SXM, count: 2, gpus_per_node: 2}\n"
      "  - {gpu: L4, count: 1, gpus_per_node: 2, latency: 10 us}\n");
  ASSERT_TRUE(cluster) << cluster.error().message;
  EXPECT_DOUBLE_EQ(cluster->Latency(0, 1), 3e-6);
  EXPECT_DOUBLE_EQ(cluster->Latency(0, 2), 5e-6);
  EXPECT_DOUBLE_EQ(cluster->Latency(4, 5), 10e-6);
  EXPECT_DOUBLE_EQ(cluster->Latency(1, 1), 0);
  auto slow = Parse(
      "nodes: [{gpu: H100-SXM, count: 2, gpus_per_node: 1}]\n"
      "inter_node_latency: 0.02 ms\n");
  ASSERT_TRUE(slow) << slow.error().message;
  EXPECT_DOUBLE_EQ(slow->Latency(0, 1), 20e-6);
}

TEST(ClusterTest, EfficiencyOverridesAndTotalFlops) {
  auto cluster = Parse(
      "nodes:\n"
      "  - {gpu: H100-SXM, count: 2, gpus_per_node: 8, gemm_efficiency: 0.5,\n"
      "     attention_efficiency: 0.4}\n"
      "  - {gpu: A100-SXM-80G, count: 2, gpus_per_node: 8}\n");
  ASSERT_TRUE(cluster) << cluster.error().message;
  EXPECT_DOUBLE_EQ(cluster->device(0).gemm_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(cluster->device(0).attention_efficiency, 0.4);
  EXPECT_DOUBLE_EQ(cluster->device(16).gemm_efficiency, 0.85);
  // Closed form: 16 x 989 TFLOPS x 0.5 + 16 x 312 TFLOPS x 0.85.
  EXPECT_NEAR(cluster->TotalGemmFlops(), 16 * 989e12 * 0.5 + 16 * 312e12 * 0.85, 1e3);
  EXPECT_NEAR(cluster->TotalAttentionFlops(), 16 * 989e12 * 0.4 + 16 * 312e12 * 0.65, 1e3);
}

TEST(ClusterTest, RateCurveIsReadAndInterpolated) {
  auto cluster = Parse(
      "nodes:\n"
      "  - {gpu: L4, count: 1, gpus_per_node: 2,\n"
      "     rate_curve: {tokens: [256, 1024], gemm: [0.5, 1], attention: [0.8, 1.2]}}\n"
      "  - {gpu: L4, count: 1, gpus_per_node: 2}\n");
  ASSERT_TRUE(cluster) << cluster.error().message;
  ASSERT_EQ(cluster->kinds.size(), 2u) << "a kind with a curve is not merged with one without";
  const DeviceSpec& curved = cluster->device(0);
  const DeviceSpec& plain = cluster->device(2);
  // Held before the first point and past the last; linear in log(tokens) between: 512 tokens is
  // half way from 256 to 1024.
  EXPECT_DOUBLE_EQ(curved.GemmFlopsAt(100), 0.5 * curved.GemmFlops());
  EXPECT_DOUBLE_EQ(curved.GemmFlopsAt(512), 0.75 * curved.GemmFlops());
  EXPECT_DOUBLE_EQ(curved.GemmFlopsAt(1 << 20), curved.GemmFlops());
  EXPECT_DOUBLE_EQ(curved.AttentionFlopsAt(512), 1.0 * curved.AttentionFlops());
  EXPECT_DOUBLE_EQ(curved.AttentionFlopsAt(2048), 1.2 * curved.AttentionFlops());
  EXPECT_NEAR(curved.GemmFlopsAt(256 * std::pow(4.0, 0.25)), 0.625 * curved.GemmFlops(), 1e-3);
  EXPECT_DOUBLE_EQ(plain.GemmFlopsAt(1), plain.GemmFlops());
  EXPECT_DOUBLE_EQ(plain.AttentionFlopsAt(1e9), plain.AttentionFlops());
  EXPECT_DOUBLE_EQ(RateCurve::Largest(curved.rate_curve.attention), 1.2);
  EXPECT_DOUBLE_EQ(RateCurve::Largest(plain.rate_curve.gemm), 1.0);
}

TEST(ClusterTest, BadRateCurves) {
  const std::string kind = "nodes:\n  - {gpu: L4, count: 1, gpus_per_node: 2, rate_curve: ";
  ExpectError(kind + "{tokens: [256, 512], gemm: [1, 1]}}\n",
              {"c.yaml: nodes[0].rate_curve.attention: missing (rule: a list of one number per "
               "point of rate_curve.tokens (2); hint: write rate_curve: {tokens: [256, 512, "
               "1024]"});
  ExpectError(
      kind + "{tokens: [256, 512], gemm: [1], attention: [1, 1]}}\n",
      {"c.yaml: nodes[0].rate_curve.gemm: has 1 number (rule: a list of one number per point"});
  ExpectError(kind + "{tokens: [512, 256], gemm: [1, 1], attention: [1, 1]}}\n",
              {"c.yaml: nodes[0].rate_curve.tokens[1] = 256: not above the point before (rule: "
               "shard sizes in tokens per rank, increasing"});
  ExpectError(kind + "{tokens: [256, 512], gemm: [1, 5], attention: [1, 1]}}\n",
              {"c.yaml: nodes[0].rate_curve.gemm[1] = 5: too large (rule: the rate at each point "
               "as a multiple of the kind's rate, in (0, 4]"});
  ExpectError(kind + "{tokens: [256, 512], gemm: [1, 0], attention: [1, 1]}}\n",
              {"c.yaml: nodes[0].rate_curve.gemm[1] = 0: must be > 0"});
  ExpectError(kind + "{tokens: 256, gemm: [1], attention: [1]}}\n",
              {"c.yaml: nodes[0].rate_curve.tokens: not a list"});
  ExpectError(kind + "{tokens: [], gemm: [], attention: []}}\n",
              {"c.yaml: nodes[0].rate_curve.tokens: has 0 numbers (rule: a list of 1 to 64 shard "
               "sizes"});
  ExpectError(kind + "{tokens: [0.5], gemm: [1], attention: [1]}}\n",
              {"c.yaml: nodes[0].rate_curve.tokens[0] = 0.5: outside [1, 2^31]"});
  ExpectError(kind + "{tokens: [256], gemm: [1], attention: [1], flops: [1]}}\n",
              {"c.yaml: nodes[0].rate_curve.flops: unknown key \"flops\""});
}

TEST(ClusterTest, JsonIsAccepted) {
  auto cluster = Parse(R"({"name": "j", "nodes": [{"gpu": "H200", "count": 1,
                          "gpus_per_node": 8, "intra_node": "450 GB/s"}], "inter_node": 50})");
  ASSERT_TRUE(cluster) << cluster.error().message;
  EXPECT_EQ(cluster->num_ranks(), 8);
  EXPECT_DOUBLE_EQ(cluster->kinds[0].nic_bytes_per_second, 50e9);
}

TEST(ClusterTest, BundledExamplesLoad) {
  const std::string dir = spec_test::SourceDir() + "/examples/clusters/";
  struct Example {
    const char* file;
    int ranks;
    int device_types;
  };
  for (const Example& e : {Example{"h100-a100-16.yaml", 32, 2}, Example{"mixed-32.yaml", 32, 3},
                           Example{"mixed-64.yaml", 64, 4}, Example{"custom-4.yaml", 4, 2}}) {
    auto cluster = LoadCluster(dir + e.file, Catalog());
    ASSERT_TRUE(cluster) << cluster.error().message;
    EXPECT_EQ(cluster->num_ranks(), e.ranks) << e.file;
    std::set<std::string> types;
    for (int rank = 0; rank < cluster->num_ranks(); ++rank) {
      types.insert(cluster->device(rank).name);
    }
    EXPECT_EQ(static_cast<int>(types.size()), e.device_types) << e.file;
  }
  auto paper = *LoadCluster(dir + "h100-a100-16.yaml", Catalog());
  EXPECT_DOUBLE_EQ(paper.Bandwidth(0, 7), 450e9);
  EXPECT_DOUBLE_EQ(paper.Bandwidth(16, 23), 300e9);
  EXPECT_DOUBLE_EQ(paper.Bandwidth(0, 8), 25e9);
  EXPECT_DOUBLE_EQ(paper.Bandwidth(8, 16), 25e9);
  auto custom = *LoadCluster(dir + "custom-4.yaml", Catalog());
  EXPECT_DOUBLE_EQ(custom.Bandwidth(0, 2), 5e9);
  EXPECT_DOUBLE_EQ(custom.Latency(2, 3), 5e-6);
  EXPECT_DOUBLE_EQ(custom.Latency(0, 3), 8e-6);
  EXPECT_DOUBLE_EQ(custom.device(0).gemm_efficiency, 0.70);
  EXPECT_DOUBLE_EQ(custom.device(2).peak_flops, 200e12);
  EXPECT_DOUBLE_EQ(custom.device(2).hbm_bytes_per_second, 1.2e12);
}

TEST(ClusterTest, MakeClusterUsesCatalogLinks) {
  const DeviceSpec h100 = *Catalog().Find("H100-SXM", "");
  const DeviceSpec a100 = *Catalog().Find("A100-SXM-80G", "");
  Cluster cluster = MakeCluster({h100, a100}, {2, 1}, 4, 25e9);
  EXPECT_EQ(cluster.num_ranks(), 12);
  EXPECT_EQ(cluster.nodes.size(), 3u);
  EXPECT_EQ(cluster.device(11).name, "A100-SXM-80G");
  EXPECT_DOUBLE_EQ(cluster.Bandwidth(0, 3), 450e9);
  EXPECT_DOUBLE_EQ(cluster.Bandwidth(8, 9), 300e9);
  EXPECT_DOUBLE_EQ(cluster.Bandwidth(0, 4), 25e9);
  EXPECT_DOUBLE_EQ(cluster.Latency(0, 1), 3e-6);
  EXPECT_EQ(cluster.ranks[5], (RankInfo{5, 1, 0, 1}));
  // Same as writing the file by hand.
  auto parsed = Parse("name: " + cluster.name +
                      "\n"
                      "nodes:\n"
                      "  - {gpu: H100-SXM, count: 2, gpus_per_node: 4}\n"
                      "  - {gpu: A100-SXM-80G, count: 1, gpus_per_node: 4}\n"
                      "inter_node: 25 GB/s\n");
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(*parsed, cluster);
}

// ---- Bad input: each path asserts the code and the message (field, value, rule, hint). ----

TEST(ClusterTest, MissingFileIsAnIoError) {
  spec_test::TempDir dir;
  auto result = LoadCluster(dir.Path("absent.yaml"), Catalog());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kIo);
  EXPECT_NE(result.error().message.find("absent.yaml: cannot read the cluster file: No such file "
                                        "or directory (rule: the cluster file must exist and be "
                                        "readable; hint: check the path"),
            std::string::npos)
      << result.error().message;
  auto folder = LoadCluster(dir.Path(""), Catalog());
  ASSERT_FALSE(folder);
  EXPECT_EQ(folder.error().code, ErrorCode::kIo);
  EXPECT_NE(folder.error().message.find("is a directory"), std::string::npos);
}

TEST(ClusterTest, YamlSyntaxErrorGivesLineAndColumn) {
  spec_test::TempDir dir;
  const std::string path = dir.Write("broken.yaml",
                                     "name: x\n"
                                     "nodes:\n"
                                     "  - gpu: H100-SXM\n"
                                     "    count: [2, 3\n"
                                     "    gpus_per_node: 8\n");
  auto result = LoadCluster(path, Catalog());
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(result.error().message.find("broken.yaml:5:18: YAML syntax error: "), std::string::npos)
      << result.error().message;
  EXPECT_NE(result.error().message.find("hint: check indentation"), std::string::npos);
  ExpectError("nodes:\n  - gpu: H100\n   count: 2\n", {"c.yaml:3:", "YAML syntax error"});
  ExpectError("a: b: c\n", {"c.yaml:1:5: YAML syntax error: illegal map value"});
}

TEST(ClusterTest, EmptyFile) {
  for (const char* text : {"", "\n\n", "# only a comment\n", "---\n"}) {
    ExpectError(text, {"c.yaml: empty file (rule: a cluster file is a YAML mapping",
                       "hint: start from examples/clusters/h100-a100-16.yaml (nodes: a list "
                       "of {gpu, count, gpus_per_node}; optional name, inter_node, links)"});
  }
}

TEST(ClusterTest, NotYaml) {
  ExpectError("just some words\n", {"c.yaml: not a YAML mapping: the file holds the plain text "
                                    "\"just some words\" (rule: a cluster file is a YAML mapping"});
  ExpectError("- a\n- b\n", {"c.yaml: not a YAML mapping: the file holds a list"});
  ExpectError(std::string("\x7f"
                          "ELF\x02\x01\x01\0\0\0",
                          10),
              {"c.yaml: not a text file: binary byte 0x7f at offset 0"});
  ExpectError(std::string("name: x\0y\n", 10), {"c.yaml: not a text file: binary byte 0x00"});
}

TEST(ClusterTest, UnknownGpuOffersClosestNames) {
  ExpectError("nodes:\n  - {gpu: H10, count: 1, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].gpu: unknown GPU 'H10' (rule: a device-catalog name",
               "hint: did you mean H100-SXM, H100-PCIe or H20?"});
  ExpectError(
      "nodes:\n  - {gpu: A100-SXM-80G, count: 1, gpus_per_node: 8}\n"
      "  - {gpu: a100-80g, count: 1, gpus_per_node: 8}\n",
      {"c.yaml: nodes[1].gpu: unknown GPU 'a100-80g'", "did you mean A100-SXM-80G, "});
}

TEST(ClusterTest, ZeroOrNegativeCountsAndSizes) {
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 0, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].count = 0: must be >= 1 (rule: count is the number of nodes of "
               "this kind, a whole number >= 1; hint: write count: 2, or remove the node kind)"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: -2, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].count = -2: must be >= 1"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 0}\n",
              {"c.yaml: nodes[0].gpus_per_node = 0: must be >= 1", "hint: write gpus_per_node: 8"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 1000000000, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].count = 1000000000: must be <= 1048576"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 99999999999999999999999, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].count = 99999999999999999999999: out of range"});
  ExpectError(
      "nodes:\n  - {gpu: H100-SXM, count: 1024, gpus_per_node: 1024}\n"
      "  - {gpu: H100-SXM, count: 1, gpus_per_node: 1}\n",
      {"c.yaml: nodes[1]: the cluster has 1048577 GPUs so far", "at most 1048576"});
}

TEST(ClusterTest, TypeMismatches) {
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: abc, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].count = \"abc\": not a whole number (rule: count is"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 2.5, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].count = 2.5: not a whole number"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: [1, 2], gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].count = a list: expected a single value"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: , gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].count: has no value"});
  ExpectError("nodes:\n  - {gpu: [H100-SXM], count: 1, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].gpu = a list: expected a single value"});
  ExpectError("nodes:\n  - H100-SXM\n", {"c.yaml: nodes[0] = \"H100-SXM\": not a mapping"});
  ExpectError("nodes: 3\n", {"c.yaml: nodes: not a list"});
  ExpectError("nodes: []\n", {"c.yaml: nodes: empty list"});
  ExpectError("name: [a]\nnodes: [{gpu: L4, count: 1, gpus_per_node: 1}]\n",
              {"c.yaml: name = a list: expected a single value"});
}

TEST(ClusterTest, ZeroOrNegativeMemoryBandwidthAndTflops) {
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 8, nic: -5 GB/s}\n",
              {"c.yaml: nodes[0].nic = \"-5 GB/s\": must be > 0 (rule: a number with unit GB/s, "
               "Gb/s or TB/s; hint: write 450 GB/s)"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 8, intra_node: 0}\n",
              {"c.yaml: nodes[0].intra_node = \"0\": must be > 0"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 2, gpus_per_node: 8}\ninter_node: 0 Gb/s\n",
              {"c.yaml: inter_node = \"0 Gb/s\": must be > 0"});
  ExpectError(
      "nodes:\n  - gpu: {name: X, bf16_tflops: 100, memory: 0 GiB}\n"
      "    count: 1\n    gpus_per_node: 1\n",
      {"c.yaml: nodes[0].gpu.memory = \"0 GiB\": must be > 0 (rule: a number with unit "
       "GiB, GB or TiB; hint: write 80 GiB)"});
  ExpectError(
      "nodes:\n  - gpu: {name: X, bf16_tflops: -1, memory: 8 GiB}\n"
      "    count: 1\n    gpus_per_node: 1\n",
      {"c.yaml: nodes[0].gpu.bf16_tflops = -1: must be > 0 (rule: dense BF16 tensor "
       "TFLOPS"});
  ExpectError("nodes:\n  - gpu: {name: X, memory: 8 GiB}\n    count: 1\n    gpus_per_node: 1\n",
              {"c.yaml: nodes[0].gpu.bf16_tflops: missing (rule: dense BF16"});
  ExpectError("nodes:\n  - gpu: {name: X, bf16_tflops: 100}\n    count: 1\n    gpus_per_node: 1\n",
              {"c.yaml: nodes[0].gpu.memory: missing (rule: a new device gives name, bf16_tflops "
               "and memory"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 8, gemm_efficiency: 1.2}\n",
              {"c.yaml: nodes[0].gemm_efficiency = 1.2: must be <= 1 (rule: the achievable "
               "fraction of peak, a number in (0, 1]"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 8, attention_efficiency: 0}\n",
              {"c.yaml: nodes[0].attention_efficiency = 0: must be > 0"});
}

TEST(ClusterTest, UnreadableUnit) {
  ExpectError(
      "nodes:\n  - gpu: H100-SXM\n    count: 1\n    gpus_per_node: 8\n"
      "    intra_node: fast\n",
      {"c.yaml: nodes[0].intra_node = \"fast\": not a bandwidth (rule: a number with unit "
       "GB/s, Gb/s or TB/s; hint: write 450 GB/s)"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 8, nic: 25 GB/hour}\n",
              {"c.yaml: nodes[0].nic = \"25 GB/hour\": not a bandwidth (unknown unit"});
  ExpectError("nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 8, latency: 3}\n",
              {"c.yaml: nodes[0].latency = \"3\": needs a unit (rule: a duration with unit s, "
               "ms, us or ns; hint: write 3 us)"});
}

TEST(ClusterTest, MissingFields) {
  ExpectError("name: lonely\n", {"c.yaml: nodes: missing (rule: a cluster needs a non-empty "
                                 "`nodes:` list of node kinds",
                                 "hint: start from examples/clusters/h100-a100-16.yaml"});
  ExpectError("nodes:\n  - {count: 1, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].gpu: missing (rule: a device-catalog name"});
  ExpectError("nodes:\n  - {gpu: L4, gpus_per_node: 8}\n",
              {"c.yaml: nodes[0].count: missing (rule: count is the number of nodes"});
  ExpectError("nodes:\n  - {gpu: L4, count: 2}\n", {"c.yaml: nodes[0].gpus_per_node: missing"});
}

TEST(ClusterTest, UnknownKeysListValidKeys) {
  ExpectError("nodse:\n  - {gpu: L4, count: 1, gpus_per_node: 1}\n",
              {"c.yaml: nodse: unknown key \"nodse\" (rule: valid keys of a cluster file are "
               "name, description, nodes, inter_node, inter_node_latency and links; hint: did "
               "you mean `nodes`?)"});
  ExpectError("nodes:\n  - {gpu: L4, count: 1, gpus_per_nod: 1}\n",
              {"c.yaml: nodes[0].gpus_per_nod: unknown key", "did you mean `gpus_per_node`?"});
  ExpectError("nodes:\n  - {gpu: L4, count: 1, gpus_per_node: 1, count: 2}\n",
              {"c.yaml: nodes[0].count: key given twice"});
  // A long key (YAML allows 1024 characters) is quoted and cut in the field path.
  const std::string long_key(1000, 'k');
  auto result = Parse("nodes:\n  - {gpu: L4, count: 1, " + long_key + ": 1}\n");
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("c.yaml: nodes[0].\"kkk"), std::string::npos)
      << result.error().message;
  EXPECT_LT(result.error().message.size(), 1024u);
}

TEST(ClusterTest, BadLinks) {
  const std::string nodes =
      "nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 1}\n"
      "  - {gpu: L4, count: 1, gpus_per_node: 1}\n";
  ExpectError(nodes + "links:\n  - {between: [H100-SXM, B100], bandwidth: 5 GB/s}\n",
              {"c.yaml: links[0].between[1] = \"B100\": no node kind has this name or gpu (rule: "
               "between names two node kinds, each by its `name:` or its gpu name; hint: node "
               "kinds here are H100-SXM and L4"});
  ExpectError(nodes + "links:\n  - {between: [H100-SXM], bandwidth: 5 GB/s}\n",
              {"c.yaml: links[0].between: not a list of two names"});
  ExpectError(nodes + "links:\n  - {between: [H100-SXM, L4]}\n",
              {"c.yaml: links[0].bandwidth: missing (rule: a number with unit GB/s"});
  ExpectError(nodes + "links:\n  - {between: [H100-SXM, L4], bandwidth: 0}\n",
              {"c.yaml: links[0].bandwidth = \"0\": must be > 0"});
  ExpectError(nodes + "links: {between: [H100-SXM, L4]}\n", {"c.yaml: links: not a list"});
}

TEST(ClusterTest, DeepNestingDoesNotCrash) {
  const std::string deep = "nodes: " + std::string(20000, '[') + std::string(20000, ']') + "\n";
  auto result = Parse(deep);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
}

// Random byte-level mutations of a valid file must give a cluster or an error, never a crash.
TEST(ClusterTest, MutatedInputsNeverCrash) {
  const std::string base = std::string(kDesignExample) +
                           "links:\n  - {between: [H100-SXM, MyAccel], bandwidth: 12 GB/s}\n";
  const std::string alphabet = ":-[]{}#,'\"&*!|>\n 0123456789abcGBs/.\t";
  std::mt19937 rng(20240613);
  int errors = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int edit = 0; edit < edits; ++edit) {
      const size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0:
          text.erase(at, 1 + rng() % 3);
          break;
        case 1:
          text.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          text[at] = alphabet[rng() % alphabet.size()];
          break;
      }
      if (text.empty()) text.push_back('x');  // not `= "x"`: g++ 12 warns falsely (-Wrestrict)
    }
    auto result = Parse(text);
    if (!result) {
      ++errors;
      EXPECT_FALSE(result.error().message.empty());
      EXPECT_NE(result.error().message.find("c.yaml"), std::string::npos) << result.error().message;
    } else {
      EXPECT_GE(result->num_ranks(), 1);
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(ClusterTest, IdenticalNeighbourKindsAreMergedKeepingRankOrder) {
  std::string text = "nodes:\n";
  for (int entry = 0; entry < 3; ++entry)
    text += "  - {gpu: H100-SXM, count: 1, gpus_per_node: 2}\n";
  text += "  - {gpu: A100-SXM-80G, count: 1, gpus_per_node: 2}\n";
  text += "  - {gpu: H100-SXM, count: 2, gpus_per_node: 2}\n";  // not adjacent to the others
  auto cluster = Parse(text + "inter_node: 25 GB/s\n");
  ASSERT_TRUE(cluster) << cluster.error().message;
  ASSERT_EQ(cluster->kinds.size(), 3u);
  EXPECT_EQ(cluster->kinds[0].count, 3);
  EXPECT_EQ(cluster->kinds[2].count, 2);
  ASSERT_EQ(cluster->num_ranks(), 12);
  EXPECT_EQ(cluster->device(5).name, "H100-SXM");
  EXPECT_EQ(cluster->device(6).name, "A100-SXM-80G");
  EXPECT_EQ(cluster->ranks[5].node, 2);
  // A kind that `links:` names keeps its own entry (its links differ from its neighbour's).
  auto linked = Parse(
      "nodes:\n  - {name: a, gpu: H100-SXM, count: 1, gpus_per_node: 2}\n"
      "  - {name: b, gpu: H100-SXM, count: 1, gpus_per_node: 2}\n"
      "links:\n  - {between: [a, b], bandwidth: 5 GB/s}\n");
  ASSERT_TRUE(linked) << linked.error().message;
  EXPECT_EQ(linked->kinds.size(), 2u);
  EXPECT_EQ(linked->Bandwidth(0, 2), 5e9);
}

}  // namespace
}  // namespace hexiseq
