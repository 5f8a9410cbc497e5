// What validate, explain, plan and compare say about data-parallel replicas, the batch split,
// left-out ranks and the training configuration: a hand-made plan/2 file with two replicas and a
// left-out rank on 4 H100 + 4 A100, and compare's JSON fields for every strategy.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>
#include <string>

#include "cli/cli_test_util.h"
#include "plan/plan.h"
#include "sched/baselines.h"
#include "spec/cluster.h"

namespace hexiseq {
namespace {

const char* kCluster =
    "name: two-kinds\n"
    "nodes:\n"
    "  - gpu: H100-SXM\n    count: 1\n    gpus_per_node: 4\n"
    "  - gpu: A100-SXM-80G\n    count: 1\n    gpus_per_node: 4\n"
    "inter_node: 25 GB/s\n";
constexpr int64_t kSeq = 32768;

// One all-to-all group over `ranks` holding every token, members' tokens and heads split evenly.
void AddUlyssesGroup(Plan& plan, const Cluster& cluster, const std::vector<int>& ranks,
                     int replica) {
  const Ranges all = {{0, kSeq}};
  const std::vector<double> even(ranks.size(), 1.0);
  AddGroup(plan, cluster, ranks, all, SplitTokens(all, even),
           SplitHeads(plan.num_heads, plan.num_kv_heads, even));
  plan.groups.back().replica = replica;
}

// Replica 0: ranks 0-3 (H100), 2 sequences; replica 1: ranks 4-6 (A100), 1 sequence; rank 7 out.
std::string WriteTwoReplicaPlan(const std::string& cluster_path) {
  auto cluster = LoadCluster(cluster_path, DeviceCatalog());
  EXPECT_TRUE(cluster.has_value());
  auto model = LoadModel("llama3-8b");
  EXPECT_TRUE(model.has_value());
  Workload workload;
  workload.seq_len = kSeq;
  workload.batch = 3;
  const CostModel cost(*cluster, *model, workload);
  Plan plan = EmptyPlan(cost, "hand-made");
  plan.config = "two replicas";
  AddUlyssesGroup(plan, *cluster, {0, 1, 2, 3}, 0);
  AddUlyssesGroup(plan, *cluster, {4, 5, 6}, 1);
  plan.replica_sequences = {2, 1};
  plan.left_out = {7};
  EXPECT_TRUE(Validate(plan, *cluster, *model).has_value());
  const std::string path = TempDir() + "/two-replicas.json";
  EXPECT_TRUE(SavePlan(plan, path).has_value());
  return path;
}

std::string Inputs(const std::string& cluster) {
  return " --cluster " + cluster + " --model llama3-8b";
}

// The number after `prefix` in `text` (-1 when absent).
double NumberAfter(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + prefix.size()));
}

TEST(CliReplicas, ValidateSaysReplicasLeftOutAndTraining) {
  const std::string cluster = Write("c.yaml", kCluster);
  const std::string plan = WriteTwoReplicaPlan(cluster);
  CmdResult r = Hexiseq("validate --plan " + plan + Inputs(cluster));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("replicas: dp 2 (2+1); left out: rank 7; zero 3, full"), std::string::npos)
      << r.out;
}

TEST(CliReplicas, ExplainSaysEachReplicaItsSplitItsBusyTimeAndWhoIsLeftOut) {
  const std::string cluster = Write("c.yaml", kCluster);
  const std::string plan = WriteTwoReplicaPlan(cluster);
  CmdResult r = Hexiseq("explain --plan " + plan + Inputs(cluster));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* line :
       {"training: 2 data-parallel replicas, batch 3 split 2 + 1; ZeRO 3 sharded over 7 ranks; "
        "recompute full",
        "  replica 0: ranks 0-3 (4 x H100-SXM on node 0), 1 group, 2 sequences, busy ",
        "  replica 1: ranks 4-6 (3 x A100-SXM-80G on node 1), 1 group, 1 sequence, busy ",
        "left out: rank 7 (1 x A100-SXM-80G on node 1): no model state, no gradient sync",
        "configurations weighed: not recorded in a plan file"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  // The slowest replica's busy time plus the exposed sync and the optimizer step is the predicted
  // iteration (3 digits each).
  const double busy =
      std::max(NumberAfter(r.out, "2 sequences, busy "), NumberAfter(r.out, "1 sequence, busy "));
  const double iteration = NumberAfter(r.out, "predicted: ");
  const double sync = NumberAfter(r.out, "exposed gradient sync ");
  const double optimizer = NumberAfter(r.out, "optimizer step ");
  EXPECT_GT(busy, 0);
  EXPECT_GT(optimizer, 0);
  EXPECT_NEAR(busy + sync + optimizer, iteration, 0.002) << r.out;
  // Groups and ranks carry their replica; the left-out rank has its own row.
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\n1 +1 +4,5,6 +A100-SXM-80G"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\n7 +A100-SXM-80G +- +left out"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\n4 +A100-SXM-80G +1 +1 "))) << r.out;
}

TEST(CliReplicas, PlanPrintsTheTrainingConfiguration) {
  const std::string cluster = Write("c.yaml", kCluster);
  CmdResult r = Hexiseq("plan" + Inputs(cluster) + " --seq 32K --batch 2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("training: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  replica 0: ranks "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("left out: "), std::string::npos) << r.out;
  // Either the configurations weighed (chosen, what leaving out gained, runner-up) or a note that
  // there were none; never silence.
  const bool weighed = r.out.find("\nchosen: ") != std::string::npos &&
                       r.out.find("\nrunner-up: ") != std::string::npos;
  const bool none = r.out.find("configurations weighed: none") != std::string::npos;
  EXPECT_TRUE(weighed != none) << r.out;
}

TEST(CliReplicas, CompareShowsEveryStrategysReplicasLeftOutAndTraining) {
  const std::string cluster = Write("c.yaml", kCluster);
  const std::string args =
      "compare" + Inputs(cluster) + " --seq 32K --batch 4 --zero 1 --recompute selective";
  CmdResult table = Hexiseq(args);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_TRUE(
      std::regex_search(table.out, std::regex("strategy +config +replicas +left out +training")))
      << table.out;
  CmdResult r = Hexiseq(args + " --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_GE(j["strategies"].size(), 6u);
  for (const auto& s : j["strategies"]) {
    SCOPED_TRACE(s["strategy"].get<std::string>());
    for (const char* key : {"replicas", "replica_sequences", "left_out", "zero_stage", "recompute"})
      ASSERT_TRUE(s.contains(key)) << key;
    if (s["iteration_seconds"].is_null()) {
      EXPECT_TRUE(s["replicas"].is_null());
      continue;
    }
    const auto sequences = s["replica_sequences"].get<std::vector<int>>();
    EXPECT_EQ(static_cast<int>(sequences.size()), s["replicas"].get<int>());
    EXPECT_EQ(std::accumulate(sequences.begin(), sequences.end(), 0), 4) << "sums to the batch";
    EXPECT_TRUE(std::all_of(sequences.begin(), sequences.end(), [](int n) { return n >= 1; }));
    const auto left_out = s["left_out"].get<std::vector<int>>();
    EXPECT_TRUE(std::is_sorted(left_out.begin(), left_out.end()));
    EXPECT_LT(left_out.size(), 8u);
    EXPECT_EQ(s["zero_stage"].get<int>(), 1) << "a fixed --zero is respected";
    EXPECT_EQ(s["recompute"].get<std::string>(), "selective");
    // The table row says the same.
    const std::string row_start = "\n" + s["strategy"].get<std::string>() + " ";
    const size_t row = table.out.find(row_start);
    ASSERT_NE(row, std::string::npos);
    const std::string line = table.out.substr(row + 1, table.out.find('\n', row + 1) - row - 1);
    EXPECT_NE(line.find("dp " + std::to_string(sequences.size())), std::string::npos) << line;
    EXPECT_NE(line.find("zero 1, selective"), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace hexiseq
