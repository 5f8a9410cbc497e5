// --time-limit bounds the whole command: plan and compare on a cluster whose full planning takes
// 1.0 s (plan) and 2.9 s (compare) on a quiet 2-core machine (8192 GPUs of four types; at 2048
// GPUs the whole plan now fits in the limit) return within the limit plus a few seconds (process
// start with libtorch loaded takes about 1.2 s there), with a valid plan, and say on stderr (and in
// JSON) that the searches were cut short. A limit reached before any plan was scored is a clear
// error.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace {

// Process start, input loading and the one step running when the deadline passes: generous,
// since this machine may be loaded; the unlimited runs take 5x and 14x the limit.
constexpr double kSlackSeconds = 5.0;
constexpr double kLimitSeconds = 0.2;

std::string LargeCluster() {
  std::string yaml = "name: mixed-8192\nnodes:\n";
  for (const char* gpu : {"H100-SXM", "A100-SXM-80G", "A800", "L40S"})
    yaml += std::string("  - gpu: ") + gpu + "\n    count: 256\n    gpus_per_node: 8\n";
  return Write("mixed-8192.yaml", yaml + "inter_node: 25 GB/s\n");
}

struct Timed {
  CmdResult result;
  double seconds = 0;
};

Timed RunTimed(const std::string& args) {
  const auto start = std::chrono::steady_clock::now();
  CmdResult result = Hexiseq(args, 120);
  return {result, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

const std::string kWorkload = " --model llama3-8b --seq 1M --time-limit 0.2";

TEST(TimeLimit, PlanReturnsTheBestPlanSoFarWithinTheLimit) {
  const std::string cluster = LargeCluster();
  const std::string plan = TempDir() + "/limited.json";
  const Timed run = RunTimed("plan --cluster " + cluster + kWorkload + " --format json -o " + plan);
  ASSERT_EQ(run.result.code, 0) << run.result.err;
  EXPECT_LT(run.seconds, kLimitSeconds + kSlackSeconds);
  EXPECT_NE(run.result.err.find("--time-limit 0.2 s reached"), std::string::npos) << run.result.err;
  EXPECT_NE(run.result.err.find("the plan is the best found by then"), std::string::npos);
  const nlohmann::json json = nlohmann::json::parse(Slurp(plan));
  EXPECT_EQ(json["provenance"]["time_limit_reached"], true);
  const CmdResult valid =
      Hexiseq("validate --plan " + plan + " --cluster " + cluster + " --model llama3-8b");
  EXPECT_EQ(valid.code, 0) << valid.err;  // valid and fits memory
}

TEST(TimeLimit, CompareKeepsWhatWasScoredAndSaysWhatWasNot) {
  const Timed run = RunTimed("compare --cluster " + LargeCluster() + kWorkload + " --format json");
  ASSERT_EQ(run.result.code, 0) << run.result.err;
  EXPECT_LT(run.seconds, kLimitSeconds + kSlackSeconds);
  EXPECT_NE(run.result.err.find("--time-limit 0.2 s reached"), std::string::npos) << run.result.err;
  const nlohmann::json json = nlohmann::json::parse(run.result.out);
  EXPECT_EQ(json["time_limit_reached"], true);
  int scored = 0, not_scored = 0;
  for (const nlohmann::json& row : json["strategies"]) {
    const std::string reason = row["reason"];
    if (reason.find("not scored: the time limit of 0.2 s") != std::string::npos) {
      ++not_scored;
      EXPECT_EQ(row["iteration_seconds"], nullptr);
    } else if (row["feasible"] == true) {
      ++scored;
    }
  }
  EXPECT_GE(scored, 1);
  EXPECT_GE(not_scored, 1);
}

TEST(TimeLimit, WithoutALimitNothingSaysItWasReached) {
  const std::string cluster = Example("examples/clusters/custom-4.yaml");
  const CmdResult run = Hexiseq("compare --cluster " + cluster +
                                " --model llama3-8b --seq 64K --format json --time-limit 0");
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["time_limit_reached"], false);
  EXPECT_EQ(run.err.find("--time-limit"), std::string::npos) << run.err;
}

TEST(TimeLimit, NothingScoredBeforeTheLimitIsAClearError) {
  const CmdResult run = Hexiseq("plan --cluster " + Example("examples/clusters/custom-4.yaml") +
                                " --model llama3-8b --seq 64K --time-limit 1e-9 --format json");
  ExpectBadInput(run, {"strategy hexiseq: no plan was found within the time limit", "not scored",
                       "raise --time-limit"});
}

}  // namespace
