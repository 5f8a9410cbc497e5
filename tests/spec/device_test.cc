// Device catalog: the exact required names, figures against the datasheet values in
// REFERENCES.md (per-direction links = half the bidirectional figure; NIC bits / 8), lookup,
// "did you mean", and --device-table files.
#include "spec/device.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "spec/units.h"
#include "spec_test_util.h"

namespace hexiseq {
namespace {

TEST(DeviceTest, CatalogHasExactlyTheRequiredNamesInOrder) {
  const std::vector<std::string> expected = {
      "H100-SXM", "H100-PCIe", "H200", "H800", "H20",  "B200",    "A100-SXM-80G", "A100-40G",
      "A800",     "L40S",      "L4",   "A10",  "V100", "RTX4090", "MI300X"};
  std::vector<std::string> names;
  for (const DeviceSpec& row : BuiltinDevices()) names.push_back(row.name);
  EXPECT_EQ(names, expected);
  EXPECT_EQ(DeviceCatalog().rows(), BuiltinDevices());
}

TEST(DeviceTest, FiguresMatchTheDatasheetTable) {
  const DeviceCatalog catalog;
  struct Expected {
    const char* name;
    double tflops, memory_gib, hbm_tbps, intra_bidirectional_gbps, nic_gbit;
  };
  // Straight from the REFERENCES.md device table (one NIC figure chosen where it gives a range).
  for (const Expected& e :
       {Expected{"H100-SXM", 989, 80, 3.35, 900, 400},
        Expected{"H100-PCIe", 756, 80, 2.0, 128, 200}, Expected{"H200", 989, 141, 4.8, 900, 400},
        Expected{"H800", 989, 80, 3.35, 400, 400}, Expected{"H20", 148, 96, 4.0, 900, 400},
        Expected{"B200", 2250, 180, 8.0, 1800, 400},
        Expected{"A100-SXM-80G", 312, 80, 2.04, 600, 200},
        Expected{"A100-40G", 312, 40, 1.56, 600, 200}, Expected{"A800", 312, 80, 2.04, 400, 200},
        Expected{"L40S", 362, 48, 0.864, 64, 50}, Expected{"L4", 121, 24, 0.30, 64, 25},
        Expected{"A10", 125, 24, 0.60, 64, 12.5}, Expected{"V100", 125, 32, 0.90, 300, 50},
        Expected{"RTX4090", 165, 24, 1.0, 64, 25}, Expected{"MI300X", 1307, 192, 5.3, 896, 400}}) {
    auto row = catalog.Find(e.name, "test");
    ASSERT_TRUE(row) << row.error().message;
    EXPECT_DOUBLE_EQ(row->peak_flops, e.tflops * 1e12) << e.name;
    EXPECT_DOUBLE_EQ(row->memory_bytes, e.memory_gib * kGiB) << e.name;
    EXPECT_DOUBLE_EQ(row->hbm_bytes_per_second, e.hbm_tbps * 1e12) << e.name;
    EXPECT_DOUBLE_EQ(row->intra_node_bytes_per_second, e.intra_bidirectional_gbps / 2 * 1e9)
        << e.name;
    EXPECT_DOUBLE_EQ(row->nic_bytes_per_second, e.nic_gbit / 8 * 1e9) << e.name;
  }
  // The paper's testbed figures: 450 and 300 GB/s NVLink per direction, 400 Gb/s = 50 GB/s.
  EXPECT_DOUBLE_EQ(catalog.Find("H100-SXM", "")->intra_node_bytes_per_second, 450e9);
  EXPECT_DOUBLE_EQ(catalog.Find("A100-SXM-80G", "")->intra_node_bytes_per_second, 300e9);
  EXPECT_DOUBLE_EQ(catalog.Find("H100-SXM", "")->nic_bytes_per_second, 50e9);
}

TEST(DeviceTest, EveryRowIsCompleteAndCitesASource) {
  for (const DeviceSpec& row : BuiltinDevices()) {
    SCOPED_TRACE(row.name);
    EXPECT_GT(row.peak_flops, 0);
    EXPECT_GT(row.memory_bytes, 0);
    EXPECT_GT(row.hbm_bytes_per_second, 0);
    EXPECT_GT(row.intra_node_bytes_per_second, 0);
    EXPECT_GT(row.nic_bytes_per_second, 0);
    EXPECT_GT(row.gemm_efficiency, 0);
    EXPECT_LE(row.gemm_efficiency, 1);
    EXPECT_GT(row.attention_efficiency, 0);
    EXPECT_LE(row.attention_efficiency, 1);
    EXPECT_DOUBLE_EQ(row.GemmFlops(), row.peak_flops * row.gemm_efficiency);
    EXPECT_DOUBLE_EQ(row.AttentionFlops(), row.peak_flops * row.attention_efficiency);
    // A datasheet (or whitepaper) for the figures, and a paper, benchmark or stated assumption
    // for the efficiencies.
    EXPECT_TRUE(row.source.find("datasheet") != std::string::npos ||
                row.source.find("whitepaper") != std::string::npos ||
                row.source.find("specifications") != std::string::npos)
        << row.source;
    EXPECT_TRUE(row.source.find("arXiv") != std::string::npos ||
                row.source.find("assumed") != std::string::npos)
        << row.source;
  }
}

TEST(DeviceTest, DeliveredFlopsFollowThePublishedEfficiencies) {
  const DeviceCatalog catalog;
  // FlashAttention-3 on H100 vs FlashAttention-2 on A100; large GEMMs 70-80% vs 80-90%.
  auto h100 = *catalog.Find("H100-SXM", "");
  auto a100 = *catalog.Find("A100-SXM-80G", "");
  EXPECT_GE(h100.attention_efficiency, 0.60);
  EXPECT_LE(h100.attention_efficiency, 0.75);
  EXPECT_GE(h100.gemm_efficiency, 0.70);
  EXPECT_LE(h100.gemm_efficiency, 0.80);
  EXPECT_GE(a100.attention_efficiency, 0.50);
  EXPECT_LE(a100.attention_efficiency, 0.73);
  EXPECT_GE(a100.gemm_efficiency, 0.80);
  EXPECT_LE(a100.gemm_efficiency, 0.90);
  EXPECT_NE(h100.source.find("2407.08608"), std::string::npos);
  EXPECT_NE(a100.source.find("2307.08691"), std::string::npos);
}

TEST(DeviceTest, FindIsCaseInsensitive) {
  const DeviceCatalog catalog;
  for (const char* name : {"h100-sxm", "H100-SXM", "a100-sxm-80g", "mi300x", "Rtx4090"}) {
    auto row = catalog.Find(name, "");
    ASSERT_TRUE(row) << name;
  }
  EXPECT_EQ(catalog.Find("h100-pcie", "")->name, "H100-PCIe");
}

TEST(DeviceTest, UnknownNameListsTheThreeClosest) {
  const DeviceCatalog catalog;
  auto result = catalog.Find("H10", "cluster.yaml: nodes[1].gpu");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  const std::string& message = result.error().message;
  EXPECT_EQ(message.rfind("cluster.yaml: nodes[1].gpu: unknown GPU 'H10' (rule: ", 0), 0)
      << message;
  EXPECT_NE(message.find("did you mean H100-SXM, H100-PCIe or H20?"), std::string::npos) << message;
  EXPECT_NE(message.find("docs/devices.md"), std::string::npos);

  auto a100 = catalog.Find("A100", "");
  ASSERT_FALSE(a100);
  EXPECT_NE(a100.error().message.find("did you mean A100-40G, A100-SXM-80G or"), std::string::npos)
      << a100.error().message;
  auto typo = catalog.Find("L40", "");
  ASSERT_FALSE(typo);
  EXPECT_NE(typo.error().message.find("did you mean L40S"), std::string::npos);
}

TEST(DeviceTest, EditDistance) {
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("H100", "h100"), 0);
  EXPECT_EQ(EditDistance("", "abc"), 3);
  EXPECT_EQ(EditDistance("abc", ""), 3);
  EXPECT_EQ(EditDistance("H20", "H200"), 1);
}

TEST(DeviceTest, MergeFileReplacesGivenFieldsAndAddsRows) {
  spec_test::TempDir dir;
  const std::string path = dir.Write("table.yaml",
                                     "- name: h100-sxm\n"
                                     "  gemm_efficiency: 0.7\n"
                                     "  nic: 200 Gb/s\n"
                                     "- name: MyAccel\n"
                                     "  bf16_tflops: 200\n"
                                     "  memory: 48 GiB\n"
                                     "  source: our own measurements\n");
  DeviceCatalog catalog;
  auto merged = catalog.MergeFile(path);
  ASSERT_TRUE(merged) << merged.error().message;
  auto h100 = catalog.Find("H100-SXM", "");
  ASSERT_TRUE(h100);
  EXPECT_EQ(h100->name, "H100-SXM");
  EXPECT_DOUBLE_EQ(h100->gemm_efficiency, 0.7);
  EXPECT_DOUBLE_EQ(h100->nic_bytes_per_second, 25e9);
  EXPECT_DOUBLE_EQ(h100->peak_flops, 989e12);  // untouched
  EXPECT_NE(h100->source.find("overridden by device table"), std::string::npos);
  auto mine = catalog.Find("myaccel", "");
  ASSERT_TRUE(mine);
  EXPECT_DOUBLE_EQ(mine->peak_flops, 200e12);
  EXPECT_DOUBLE_EQ(mine->memory_bytes, 48 * kGiB);
  EXPECT_EQ(mine->source, "our own measurements");
  EXPECT_GT(mine->gemm_efficiency, 0);  // documented defaults
  EXPECT_GT(mine->nic_bytes_per_second, 0);
  EXPECT_EQ(catalog.rows().size(), BuiltinDevices().size() + 1);
}

TEST(DeviceTest, MergeFileAcceptsADevicesMappingAndJson) {
  spec_test::TempDir dir;
  DeviceCatalog catalog;
  ASSERT_TRUE(
      catalog.MergeFile(dir.Write("t.yaml", "devices:\n  - {name: L4, bf16_tflops: 100}\n")));
  EXPECT_DOUBLE_EQ(catalog.Find("L4", "")->peak_flops, 100e12);
  ASSERT_TRUE(catalog.MergeFile(
      dir.Write("t.json", R"({"devices": [{"name": "L4", "attention_efficiency": 0.3}]})")));
  EXPECT_DOUBLE_EQ(catalog.Find("L4", "")->attention_efficiency, 0.3);
  EXPECT_DOUBLE_EQ(catalog.Find("L4", "")->peak_flops, 100e12);
}

TEST(DeviceTest, MergeFileErrors) {
  spec_test::TempDir dir;
  struct Case {
    const char* text;
    const char* expected;
  };
  for (const Case& c : {
           Case{"- {name: New, bf16_tflops: 100}\n",
                "t.yaml: [0].memory: missing (rule: a new device gives name, bf16_tflops and "
                "memory"},
           Case{"- {name: H100-SXM, gemm_efficiency: 1.5}\n",
                "t.yaml: [0].gemm_efficiency = 1.5: must be <= 1 (rule: the achievable fraction "
                "of peak, a number in (0, 1]"},
           Case{"- {name: H100-SXM, bf16_tflops: -3}\n",
                "t.yaml: [0].bf16_tflops = -3: must be > 0"},
           Case{"- {name: H100-SXM, bf16_tflops: lots}\n",
                "t.yaml: [0].bf16_tflops = \"lots\": not a number"},
           Case{
               "- {name: H100-SXM, tflops: 3}\n",
               "t.yaml: [0].tflops: unknown key \"tflops\" (rule: valid keys of a device are name, "
               "bf16_tflops,"},
           Case{"- {bf16_tflops: 3, memory: 8}\n", "t.yaml: [0].name: missing"},
           Case{"- {name: X, bf16_tflops: 3, memory: 8, nic: slow}\n",
                "t.yaml: [0].nic = \"slow\": not a bandwidth"},
           Case{"devices: 3\n", "t.yaml: devices: missing or not a list"},
           Case{"hello\n", "t.yaml: not a YAML mapping or list"},
           Case{"", "t.yaml: empty file"},
           Case{"- [1, 2\n", "t.yaml:2:1: YAML syntax error"},
       }) {
    DeviceCatalog catalog;
    auto result = catalog.MergeFile(dir.Write("t.yaml", c.text));
    ASSERT_FALSE(result) << c.text;
    EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
    const std::string message = result.error().message;
    const std::string prefix = dir.Path("");
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_EQ(catalog.rows(), BuiltinDevices()) << "a failed merge changes nothing";
  }
  DeviceCatalog catalog;
  auto missing = catalog.MergeFile(dir.Path("nope.yaml"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kIo);
  EXPECT_NE(missing.error().message.find("nope.yaml: cannot read the device table: No such file"),
            std::string::npos)
      << missing.error().message;
}

// docs/devices.md quotes the catalog; its table must agree with the code row by row.
TEST(DeviceTest, DocsTableMatchesTheCatalog) {
  std::ifstream in(spec_test::SourceDir() + "/docs/devices.md");
  ASSERT_TRUE(in) << "docs/devices.md is missing";
  std::map<std::string, std::vector<double>> documented;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream stream(line.substr(1));
    std::string cell;
    while (std::getline(stream, cell, '|')) cells.push_back(cell);
    if (cells.size() < 8) continue;
    std::vector<double> numbers;
    for (size_t column = 1; column < 8; ++column) {
      try {
        numbers.push_back(std::stod(cells[column]));
      } catch (const std::exception&) {
        numbers.clear();
        break;
      }
    }
    if (numbers.size() == 7) {
      std::string name = cells[0];
      name.erase(0, name.find_first_not_of(' '));
      name.erase(name.find_last_not_of(' ') + 1);
      documented[name] = numbers;
    }
  }
  EXPECT_EQ(documented.size(), BuiltinDevices().size());
  for (const DeviceSpec& row : BuiltinDevices()) {
    SCOPED_TRACE(row.name);
    ASSERT_TRUE(documented.count(row.name));
    const std::vector<double>& doc = documented[row.name];
    EXPECT_NEAR(doc[0], row.peak_flops / 1e12, 1e-9);
    EXPECT_NEAR(doc[1], row.memory_bytes / kGiB, 1e-9);
    EXPECT_NEAR(doc[2], row.hbm_bytes_per_second / 1e12, 1e-9);
    EXPECT_NEAR(doc[3], row.intra_node_bytes_per_second / 1e9, 1e-9);
    EXPECT_NEAR(doc[4], row.nic_bytes_per_second / 1e9, 1e-9);
    EXPECT_NEAR(doc[5], row.gemm_efficiency, 1e-9);
    EXPECT_NEAR(doc[6], row.attention_efficiency, 1e-9);
  }
}

}  // namespace
}  // namespace hexiseq
