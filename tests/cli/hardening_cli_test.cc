// Hostile input end to end: absurd numbers, special files, failed writes, plan values that must
// be blamed on the plan file (never on a flag), and a comparison where nothing fits. Every case
// is exit 1 (bad input, infeasible, failed write) or 2 (bad usage) with a clear message.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace {

const char* kSmallCluster =
    "nodes:\n"
    "  - gpu: H100-SXM\n    count: 1\n    gpus_per_node: 2\n"
    "  - gpu: A100-SXM-80G\n    count: 1\n    gpus_per_node: 2\n"
    "inter_node: 25 GB/s\n";

std::string SmallCluster() { return Write("small.yaml", kSmallCluster); }

std::string PlanCommand(const std::string& extra) {
  return "plan --cluster " + SmallCluster() + " --model llama3-8b --seq 16K " + extra;
}

void ExpectUsageError(const CmdResult& r, std::initializer_list<const char*> needles) {
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_LT(r.err.size(), 400u) << r.err;
  for (const char* n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << n << " in " << r.err;
}

TEST(CliHardening, AbsurdFlagValuesAreUsageErrors) {
  ExpectUsageError(Hexiseq(PlanCommand("--time-limit nan")), {"--time-limit", "nan", "finite"});
  ExpectUsageError(Hexiseq(PlanCommand("--time-limit inf")), {"--time-limit"});
  ExpectUsageError(Hexiseq(PlanCommand("--batch 0")), {"--batch", "1 to 1048576"});
  ExpectUsageError(Hexiseq(PlanCommand("--memory-reserve nan")), {"--memory-reserve"});
  const std::string plan = TempDir() + "/nics.json";
  ASSERT_EQ(Hexiseq(PlanCommand("--format json -o " + plan)).code, 0);
  ExpectUsageError(Hexiseq("simulate --plan " + plan + " --cluster " + SmallCluster() +
                           " --model llama3-8b --nics-per-node 1000000000"),
                   {"--nics-per-node", "0 to 1024"});
  ExpectBadInput(Hexiseq("plan --cluster " + SmallCluster() + " --model llama3-8b --seq 3G"),
                 {"--seq", "3G", "at most 2147483648 tokens", "docs/limits.md"});
}

TEST(CliHardening, ImplausibleBandwidthsAndLatenciesNameFileAndField) {
  for (const char* value : {"1e-300 GB/s", "1e30 GB/s", "1e-320 B/s", "0.5 B/s"}) {
    const std::string cluster =
        Write("bw.yaml", std::string(kSmallCluster) +
                             "links:\n  - {between: [H100-SXM, A100-SXM-80G], "
                             "bandwidth: " +
                             value + "}\n");
    SCOPED_TRACE(value);
    ExpectBadInput(
        Hexiseq("compare --cluster " + cluster + " --model llama3-8b --seq 16K"),
        {"bw.yaml: links[0].bandwidth", "outside the plausible range", "docs/limits.md"});
  }
  const std::string slow =
      Write("lat.yaml", std::string(kSmallCluster) + "inter_node_latency: 5 s\n");
  ExpectBadInput(Hexiseq("compare --cluster " + slow + " --model llama3-8b --seq 16K"),
                 {"lat.yaml: inter_node_latency", "must be <= 1 s"});
}

TEST(CliHardening, PlanFileValuesAreBlamedOnTheFileNotAFlag) {
  const std::string good = TempDir() + "/good.json";
  ASSERT_EQ(Hexiseq(PlanCommand("--format json -o " + good)).code, 0);
  const nlohmann::json plan = nlohmann::json::parse(Slurp(good));
  for (const auto& [key, value] : {std::pair{"seq_len", nlohmann::json(1e30)},
                                   {"batch", nlohmann::json(0)},
                                   {"recompute", nlohmann::json("sometimes")},
                                   {"zero_stage", nlohmann::json(7)}}) {
    nlohmann::json bad = plan;
    bad[key] = value;
    const std::string path = Write("bad_" + std::string(key) + ".json", bad.dump());
    const CmdResult r =
        Hexiseq("validate --plan " + path + " --cluster " + SmallCluster() + " --model llama3-8b");
    SCOPED_TRACE(key);
    const std::string where = "hexiseq: " + path + ": " + key + " = ";
    ExpectBadInput(r, {where.c_str()});
    EXPECT_EQ(r.err.find("hexiseq: --"), std::string::npos) << r.err;
  }
}

TEST(CliHardening, SpecialFilesAreRefusedWithoutBlocking) {
  const std::string fifo = TempDir() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Under `timeout`: a regression that opens the FIFO for reading would block forever.
  const std::string cluster = SmallCluster();
  ExpectBadInput(
      Hexiseq("validate --plan " + fifo + " --cluster " + cluster + " --model llama3-8b", 20),
      {"is a FIFO"});
  ExpectBadInput(Hexiseq("plan --cluster " + fifo + " --model llama3-8b --seq 1K", 20),
                 {"is a FIFO"});
  ExpectBadInput(Hexiseq("plan --cluster /dev/zero --model llama3-8b --seq 1K"),
                 {"/dev/zero", "is a character device"});
  ExpectBadInput(Hexiseq("plan --cluster " + cluster + " --model /dev/zero --seq 1K"),
                 {"is a character device"});
  ExpectBadInput(Hexiseq("plan --cluster " + TempDir() + " --model llama3-8b --seq 1K"),
                 {"is a directory"});
}

TEST(CliHardening, FailedWritesOfResultsExitOne) {
  for (const char* command : {"plan", "compare"}) {
    const std::string err = TempDir() + "/full_err";
    const std::string line = std::string(HEXISEQ_BIN_PATH) + " " + command + " --cluster " +
                             SmallCluster() + " --model llama3-8b --seq 16K --format json " +
                             ">/dev/full 2>" + err;
    const int status = std::system(line.c_str());
    SCOPED_TRACE(command);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
    EXPECT_NE(Slurp(err).find("cannot write the results to stdout"), std::string::npos)
        << Slurp(err);
  }
  ExpectBadInput(Hexiseq(PlanCommand("-o " + TempDir() + "/no/such/dir/plan.json")),
                 {"cannot open for writing"});
}

TEST(CliHardening, CompareExitsOneWhenNothingFits) {
  const CmdResult r =
      Hexiseq("compare --cluster " + SmallCluster() + " --model llama3-70b --seq 4M");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("hetero-ring"), std::string::npos) << "the comparison is still printed";
  EXPECT_NE(r.err.find("infeasible: no strategy fits"), std::string::npos) << r.err;
}

}  // namespace
