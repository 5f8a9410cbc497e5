// The hexiseq command end to end: exit codes (0 ok, 1 bad input or infeasible, 2 bad usage) and
// messages that name the field, the value, the rule and a hint. stdout carries results only.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_test_util.h"

namespace {

const char* kGoodCluster =
    "name: two-kinds\n"
    "nodes:\n"
    "  - gpu: H100-SXM\n    count: 1\n    gpus_per_node: 4\n"
    "  - gpu: A100-SXM-80G\n    count: 1\n    gpus_per_node: 4\n"
    "inter_node: 25 GB/s\n";

std::string PlanArgs(const std::string& cluster, const std::string& extra = "") {
  return "plan --cluster " + cluster + " --model llama3-8b --seq 64K " + extra;
}

TEST(Cli, CompareOnExampleClusterPrintsEveryStrategy) {
  CmdResult r = Hexiseq("compare --cluster " + Example("examples/clusters/h100-a100-16.yaml") +
                        " --model llama3-8b --seq 256K");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"ring", "ulysses", "usp", "hetero-ring", "subset", "hexiseq", "of ideal"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
}

TEST(Cli, CompareJsonHasTheDocumentedFields) {
  CmdResult r = Hexiseq("compare --cluster " + Write("c.yaml", kGoodCluster) +
                        " --model llama3-8b --seq 128K --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["ideal_tokens_per_second"].get<double>(), 0);
  ASSERT_GE(j["strategies"].size(), 6u);  // + "exact" on clusters of at most 3 ranks
  for (const auto& s : j["strategies"])
    for (const char* k : {"strategy", "config", "feasible", "reason", "iteration_seconds",
                          "tokens_per_second", "fraction_of_ideal", "max_memory_fraction"})
      EXPECT_TRUE(s.contains(k)) << k;
}

TEST(Cli, PlanValidateExplainRoundTrip) {
  const std::string cluster = Write("c.yaml", kGoodCluster);
  const std::string plan = TempDir() + "/plan.json";
  CmdResult r = Hexiseq(PlanArgs(cluster, "--format json -o " + plan));
  ASSERT_EQ(r.code, 0) << r.err;
  r = Hexiseq("validate --plan " + plan + " --cluster " + cluster + " --model llama3-8b");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("valid"), std::string::npos);
  r = Hexiseq("explain --plan " + plan + " --cluster " + cluster + " --model llama3-8b");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("bottleneck: rank"), std::string::npos) << r.out;
}

TEST(Cli, ExplainJsonPredictsThePlanOnTheGivenCluster) {
  const std::string cluster = Write("c.yaml", kGoodCluster);
  const std::string plan = TempDir() + "/plan.json";
  ASSERT_EQ(Hexiseq(PlanArgs(cluster, "--format json -o " + plan)).code, 0);
  const auto planned = nlohmann::json::parse(std::ifstream(plan));
  CmdResult r = Hexiseq("explain --plan " + plan + " --cluster " + cluster +
                        " --model llama3-8b --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto same = nlohmann::json::parse(r.out);
  EXPECT_EQ(same["replicas"], planned["replicas"]);
  EXPECT_DOUBLE_EQ(same["predicted"]["iteration_seconds"].get<double>(),
                   planned["predicted"]["iteration_seconds"].get<double>());
  // The same ranks on slower devices (device and node names dropped, so that they read by rank):
  // the prediction is the cost model's on the new cluster, slower.
  auto by_rank = planned;
  for (auto& replica : by_rank["replicas"])
    for (auto& group : replica["groups"])
      for (auto& member : group["members"]) {
        member.erase("device");
        member.erase("node");
      }
  const std::string renamed = Write("by-rank.json", by_rank.dump());
  const std::string slower =
      Write("slower.yaml",
            "name: a100s\nnodes:\n  - gpu: A100-SXM-80G\n    count: 2\n    gpus_per_node: 4\n"
            "inter_node: 25 GB/s\n");
  r = Hexiseq("explain --plan " + renamed + " --cluster " + slower +
              " --model llama3-8b --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GT(nlohmann::json::parse(r.out)["predicted"]["iteration_seconds"].get<double>(),
            planned["predicted"]["iteration_seconds"].get<double>());
}

TEST(Cli, BadUsageExitsTwo) {
  CmdResult r = Hexiseq("plan --cluster x.yaml --model llama3-8b");  // --seq missing
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--seq"), std::string::npos) << r.err;
  EXPECT_EQ(Hexiseq("frobnicate").code, 2);
  EXPECT_EQ(Hexiseq(PlanArgs("x.yaml", "--strategy fastest")).code, 2);
}

TEST(Cli, MissingFile) {
  ExpectBadInput(Hexiseq(PlanArgs(TempDir() + "/nope.yaml")), {"nope.yaml", "cannot"});
}

TEST(Cli, YamlSyntaxErrorHasLineAndColumn) {
  const CmdResult r = Hexiseq(PlanArgs(Write("bad.yaml", "name: x\nnodes:\n  - gpu: [H100\n")));
  ExpectBadInput(r, {"bad.yaml", "line"});
}

TEST(Cli, EmptyAndNonYamlFiles) {
  ExpectBadInput(Hexiseq(PlanArgs(Write("empty.yaml", ""))), {"empty"});
  ExpectBadInput(Hexiseq(PlanArgs(Write("text.yaml", "just some words\n"))), {"text.yaml"});
}

TEST(Cli, UnknownGpuOffersClosestNames) {
  const CmdResult r = Hexiseq(
      PlanArgs(Write("gpu.yaml", "nodes:\n  - gpu: H10\n    count: 1\n    gpus_per_node: 8\n")));
  ExpectBadInput(r, {"H10", "H100-SXM"});
}

TEST(Cli, NonPositiveQuantitiesAndUnits) {
  ExpectBadInput(Hexiseq(PlanArgs(Write(
                     "z.yaml", "nodes:\n  - gpu: H100-SXM\n    count: 0\n    gpus_per_node: 8\n"))),
                 {"nodes[0].count", "0"});
  ExpectBadInput(Hexiseq(PlanArgs(Write("u.yaml",
                                        "nodes:\n  - gpu: H100-SXM\n    count: 1\n"
                                        "    gpus_per_node: 8\n    intra_node: fast\n"))),
                 {"intra_node", "fast", "GB/s"});
  ExpectBadInput(Hexiseq(PlanArgs(Write("n.yaml",
                                        "nodes:\n  - gpu: H100-SXM\n    count: 1\n"
                                        "    gpus_per_node: 8\n    nic: -5 GB/s\n"))),
                 {"nic", "-5"});
  ExpectBadInput(Hexiseq(PlanArgs(Write("m.yaml",
                                        "nodes:\n  - gpu: {name: X, bf16_tflops: 100, memory: 0}\n"
                                        "    count: 1\n    gpus_per_node: 8\n"))),
                 {"memory"});
  ExpectBadInput(Hexiseq(PlanArgs(Write("nonodes.yaml", "name: x\n"))), {"nodes"});
}

TEST(Cli, UnknownModelAndBadHeads) {
  const std::string cluster = Write("c.yaml", kGoodCluster);
  ExpectBadInput(Hexiseq("plan --cluster " + cluster + " --model llama9 --seq 64K"),
                 {"llama9", "llama3-8b"});
  const std::string model = Write("m.yaml",
                                  "layers: 2\nhidden: 48\nheads: 6\nkv_heads: 4\n"
                                  "ffn_hidden: 128\nvocab: 256\n");
  ExpectBadInput(Hexiseq("plan --cluster " + cluster + " --model " + model + " --seq 64K"),
                 {"heads = 6", "kv_heads = 4", "divisible"});
}

TEST(Cli, BadSequenceLengths) {
  const std::string cluster = Write("c.yaml", kGoodCluster);
  ExpectBadInput(Hexiseq("plan --cluster " + cluster + " --model llama3-8b --seq banana"),
                 {"--seq", "banana", "256K"});
  ExpectBadInput(Hexiseq("plan --cluster " + cluster + " --model llama3-8b --seq 0"),
                 {"--seq", "0"});
}

TEST(Cli, WorkloadThatFitsNowhereIsInfeasible) {
  const std::string cluster =
      Write("six.yaml", "nodes:\n  - gpu: H100-SXM\n    count: 1\n    gpus_per_node: 6\n");
  const CmdResult r = Hexiseq("plan --cluster " + cluster + " --model llama3-70b --seq 16M");
  ExpectBadInput(r, {"infeasible", "rank", "needs", "has", "hint"});
}

// The hint never suggests a setting already in force (ZeRO-3 is the default).
TEST(Cli, InfeasibilityHintOmitsSettingsInForce) {
  const std::string cluster = Write("three-kinds.yaml",
                                    "nodes:\n"
                                    "  - {gpu: H100-SXM, count: 1, gpus_per_node: 2}\n"
                                    "  - {gpu: A100-40G, count: 1, gpus_per_node: 2}\n"
                                    "  - {gpu: L40S, count: 1, gpus_per_node: 2}\n"
                                    "inter_node: 25 GB/s\n");
  const std::string args = " --cluster " + cluster + " --model llama3-70b --seq 128K";
  const CmdResult zero3 = Hexiseq("plan" + args);
  ExpectBadInput(zero3, {"infeasible", "hint", "try more devices"});
  EXPECT_EQ(zero3.err.find("--zero"), std::string::npos) << zero3.err;  // auto by default
  EXPECT_EQ(zero3.err.find("--recompute"), std::string::npos) << zero3.err;
  const CmdResult fixed3 = Hexiseq("plan" + args + " --zero 3 --recompute none");
  ExpectBadInput(fixed3, {"infeasible", "hint"});
  EXPECT_EQ(fixed3.err.find("--zero 3"), std::string::npos) << fixed3.err;
  const CmdResult zero1 = Hexiseq("plan" + args + " --zero 1");
  ExpectBadInput(zero1, {"infeasible", "hint", "--zero 3"});
}

TEST(Cli, CorruptedPlansFailWithTheRightMessage) {
  const std::string cluster = Write("c.yaml", kGoodCluster);
  const std::string path = TempDir() + "/good.json";
  ASSERT_EQ(Hexiseq(PlanArgs(cluster, "--strategy ulysses --format json -o " + path)).code, 0);
  const auto good = nlohmann::json::parse(Slurp(path));
  auto check = [&](const char* name, auto mutate, std::initializer_list<const char*> needles) {
    nlohmann::json j = good;
    mutate(j);
    const std::string p = Write(std::string(name) + ".json", j.dump());
    const CmdResult r =
        Hexiseq("validate --plan " + p + " --cluster " + cluster + " --model llama3-8b");
    SCOPED_TRACE(name);
    ExpectBadInput(r, needles);
  };
  check("overlap",
        [](auto& j) {
          j["replicas"][0]["groups"][0]["members"][0]["tokens"][0][1] =
              j["replicas"][0]["groups"][0]["members"][0]["tokens"][0][1].template get<int64_t>() +
              5;
        },
        {"are held by both"});
  check("missing-tokens",
        [](auto& j) {
          j["replicas"][0]["groups"][0]["tokens"][0][0] = 1;
          j["replicas"][0]["groups"][0]["members"][0]["tokens"][0][0] = 1;
        },
        {"tokens [0, 1) are missing"});
  check("missing-head",
        [](auto& j) { j["replicas"][0]["groups"][0]["members"][0]["heads"].erase(0); },
        {"head 0 is missing"});
  check("rank-range",
        [](auto& j) {
          j["replicas"][0]["groups"][0]["members"][0]["rank"] = 99;
          j["replicas"][0]["groups"][0]["ranks"][0] = 99;
        },
        {"rank = 99: out of range"});
  check("rank-repeated",
        [](auto& j) {
          j["replicas"][0]["groups"][0]["members"][1]["rank"] = 0;
          j["replicas"][0]["groups"][0]["ranks"][1] = 0;
        },
        {"rank 0 appears twice"});
  check("format", [](auto& j) { j["format"] = "hexiseq.plan/0"; },
        {"format", "hexiseq.plan/0", "hexiseq.plan/2", "hexiseq.plan/1"});
}

}  // namespace

namespace {

TEST(CliSimulate, TableJsonAndPerfettoTrace) {
  const std::string cluster = Write("c.yaml", kGoodCluster);
  const std::string plan = TempDir() + "/sim_plan.json";
  ASSERT_EQ(Hexiseq(PlanArgs(cluster, "--format json -o " + plan)).code, 0);
  const std::string trace = TempDir() + "/trace.json";
  CmdResult r = Hexiseq("simulate --plan " + plan + " --cluster " + cluster +
                        " --model llama3-8b --format json --trace " + trace);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["iteration_seconds"].get<double>(), 0);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0);
  EXPECT_EQ(j["ranks"].size(), 8u);
  // Chrome trace-event JSON: complete events with pid (node), tid (rank), ts and dur in us.
  const auto t = nlohmann::json::parse(Slurp(trace));
  const auto& events = t.is_array() ? t : t["traceEvents"];
  ASSERT_FALSE(events.empty());
  int complete = 0;
  for (const auto& e : events) {
    if (e.value("ph", "") != "X") continue;
    ++complete;
    EXPECT_TRUE(e.contains("pid") && e.contains("tid") && e.contains("ts") && e.contains("dur") &&
                e.contains("name"));
    EXPECT_GE(e["dur"].get<double>(), 0);
  }
  EXPECT_GT(complete, 0);
  // The same input gives byte-identical output.
  CmdResult again = Hexiseq("simulate --plan " + plan + " --cluster " + cluster +
                            " --model llama3-8b --format json");
  EXPECT_EQ(again.out, r.out);
}

TEST(CliSimulate, BadPlanAndMismatchedClusterAreBadInput) {
  const std::string cluster = Write("c.yaml", kGoodCluster);
  ExpectBadInput(Hexiseq("simulate --plan " + Write("junk.json", "{]") + " --cluster " + cluster +
                         " --model llama3-8b"),
                 {"junk.json", "not valid JSON"});
  const std::string plan = TempDir() + "/sim_plan2.json";
  ASSERT_EQ(Hexiseq(PlanArgs(cluster, "--format json -o " + plan)).code, 0);
  const std::string six =
      Write("six.yaml", "nodes:\n  - gpu: H100-SXM\n    count: 1\n    gpus_per_node: 6\n");
  ExpectBadInput(Hexiseq("simulate --plan " + plan + " --cluster " + six + " --model llama3-8b"),
                 {"num_ranks = 8", "6 ranks"});
}

}  // namespace

namespace {

// A plan with two single-GPU replicas (3 and 1 sequences) and a left-out GPU: the table lists
// the replicas and the left-out rank, JSON carries them, the trace names each rank's replica.
TEST(CliSimulate, ReplicasAndLeftOutRanks) {
  const std::string cluster = Write("three.yaml",
                                    "nodes:\n"
                                    "  - gpu: H100-SXM\n    count: 1\n    gpus_per_node: 1\n"
                                    "  - gpu: A100-SXM-80G\n    count: 1\n    gpus_per_node: 1\n"
                                    "  - gpu: L40S\n    count: 1\n    gpus_per_node: 1\n"
                                    "inter_node: 25 GB/s\n");
  nlohmann::json heads = nlohmann::json::array();
  for (int head = 0; head < 32; ++head) heads.push_back(head);
  auto replica = [&](int rank, int sequences) {
    nlohmann::json member = {{"rank", rank}, {"tokens", {{0, 8192}}}, {"heads", heads}};
    return nlohmann::json{
        {"sequences", sequences},
        {"groups", {{{"ranks", {rank}}, {"tokens", {{0, 8192}}}, {"members", {member}}}}}};
  };
  const nlohmann::json plan_json = {{"format", "hexiseq.plan/2"},
                                    {"strategy", "replicas"},
                                    {"model", "gpt-3b"},
                                    {"seq_len", 8192},
                                    {"batch", 4},
                                    {"recompute", "full"},
                                    {"zero_stage", 1},
                                    {"num_heads", 32},
                                    {"num_kv_heads", 32},
                                    {"num_ranks", 3},
                                    {"replicas", {replica(0, 3), replica(1, 1)}},
                                    {"left_out", {2}}};
  const std::string plan = Write("replicas.json", plan_json.dump());
  const std::string trace = TempDir() + "/replicas_trace.json";
  CmdResult table = Hexiseq("simulate --plan " + plan + " --cluster " + cluster +
                            " --model gpt-3b --trace " + trace);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("2 replicas"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("left out (idle, no model state, no gradient sync): ranks 2"),
            std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("L40S          left out"), std::string::npos) << table.out;
  const std::string traced = Slurp(trace);
  EXPECT_NE(traced.find("rank 1 compute (A100-SXM-80G), replica 1"), std::string::npos);
  EXPECT_NE(traced.find("rank 2 compute (L40S), left out"), std::string::npos);
  CmdResult json = Hexiseq("simulate --plan " + plan + " --cluster " + cluster +
                           " --model gpt-3b --format json");
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_EQ(j["replicas"].size(), 2u);
  EXPECT_EQ(j["replicas"][0]["sequences"], 3);
  EXPECT_EQ(j["replicas"][1]["ranks"], nlohmann::json::array({1}));
  EXPECT_EQ(j["left_out"], nlohmann::json::array({2}));
  EXPECT_EQ(j["ranks"][2]["replica"], "left out");
  EXPECT_EQ(j["ranks"][2]["busy_seconds"], 0.0);
}

}  // namespace
