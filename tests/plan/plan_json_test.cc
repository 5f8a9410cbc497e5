// The plan reader against hostile input: wrong types in every field, integers beyond their
// bounds, unknown and repeated keys, deep nesting, special files. Every case must be an error
// value naming the file and the field; nothing may throw or crash.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan.h"
#include "spec/limits.h"

namespace hexiseq {
namespace {

using nlohmann::json;

// Two groups over 3 ranks (one idle), S = 8, H = 2, G = 1, with a prediction and provenance:
// every key the writer emits.
constexpr const char* kGoodPlan = R"({
  "format": "hexiseq.plan/2", "strategy": "test", "config": "cp=2", "model": "tiny",
  "seq_len": 8, "batch": 1, "recompute": "full", "zero_stage": 3,
  "num_heads": 2, "num_kv_heads": 1, "num_ranks": 3,
  "replicas": [{"sequences": 1, "groups": [
    {"ranks": [0, 1], "tokens": [[0, 8]],
     "members": [{"rank": 0, "device": "H100-SXM", "node": 0, "tokens": [[0, 5]], "heads": [0]},
                 {"rank": 1, "device": "H100-SXM", "node": 0, "tokens": [[5, 8]], "heads": [1]}]},
    {"ranks": [2], "tokens": [],
     "members": [{"rank": 2, "device": "", "node": 1, "tokens": [], "heads": []}]}]}],
  "predicted": {"iteration_seconds": 1.5, "tokens_per_second": 8.0,
                "ranks": [{"rank": 0, "memory_bytes": 1e9, "memory_capacity_bytes": 2e9,
                           "compute_seconds": 0.5, "exposed_comm_seconds": 0.25,
                           "total_comm_seconds": 0.3}]},
  "provenance": {"planner": "hexiseq test", "input_hash": "abc"}})";

Plan GoodPlan() {
  auto plan = ParsePlanJson(kGoodPlan, "good.json");
  EXPECT_TRUE(plan) << plan.error().message;
  return plan ? *plan : Plan{};
}

json GoodJson() { return json::parse(PlanToJson(GoodPlan())); }

std::string ErrorOf(const std::string& text) {
  auto plan = ParsePlanJson(text, "p.json");
  if (plan) return "";
  EXPECT_EQ(plan.error().code, ErrorCode::kInvalidArgument) << plan.error().message;
  return plan.error().message;
}

std::string ErrorOf(const std::function<void(json&)>& mutate) {
  json j = GoodJson();
  mutate(j);
  return ErrorOf(j.dump());
}

void ExpectError(const std::string& message, std::initializer_list<std::string> needles) {
  ASSERT_FALSE(message.empty()) << "accepted";
  for (const std::string& needle : needles)
    EXPECT_NE(message.find(needle), std::string::npos) << "want '" << needle << "' in: " << message;
}

TEST(PlanJson, GoodPlanRoundTrips) {
  EXPECT_EQ(GoodPlan().groups.size(), 2u);
  EXPECT_EQ(json::parse(PlanToJson(GoodPlan())), json::parse(kGoodPlan)) << "the writer's keys";
  auto back = ParsePlanJson(PlanToJson(GoodPlan()), "p.json");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, GoodPlan());
}

TEST(PlanJson, Version1FilesLoadAsOneReplica) {
  json v1 = json::parse(kGoodPlan);
  v1["format"] = "hexiseq.plan/1";
  v1["groups"] = v1["replicas"][0]["groups"];
  v1.erase("replicas");
  auto plan = ParsePlanJson(v1.dump(), "v1.json");
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(*plan, GoodPlan());
  EXPECT_EQ(NumReplicas(*plan), 1);
  EXPECT_EQ(plan->format, kPlanFormat);
  // The /1 keys are its own: no replicas there, no top-level groups in /2.
  v1["replicas"] = json::array();
  ExpectError(ErrorOf(v1.dump()), {"replicas: unknown key", "hexiseq.plan/1"});
  ExpectError(ErrorOf([](json& j) { j["groups"] = json::array(); }), {"groups: unknown key"});
}

TEST(PlanJson, ReplicasAndLeftOutRoundTrip) {
  json two = json::parse(kGoodPlan);
  two["batch"] = 5;
  two["num_ranks"] = 4;
  two["replicas"][0]["sequences"] = 3;
  two["replicas"].push_back(
      {{"sequences", 2},
       {"groups",
        {{{"ranks", {2}},
          {"tokens", {{0, 8}}},
          {"members",
           {{{"rank", 2}, {"device", ""}, {"tokens", {{0, 8}}}, {"heads", {0, 1}}}}}}}}});
  two["replicas"][0]["groups"].erase(1);  // rank 2 moves to replica 1
  two["left_out"] = {3};
  auto plan = ParsePlanJson(two.dump(), "two.json");
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(NumReplicas(*plan), 2);
  EXPECT_EQ(plan->replica_sequences, (std::vector<int>{3, 2}));
  EXPECT_EQ(plan->left_out, (std::vector<int>{3}));
  ASSERT_EQ(plan->groups.size(), 2u);
  EXPECT_EQ(plan->groups[1].replica, 1);
  EXPECT_TRUE(ValidateStructure(*plan)) << ValidateStructure(*plan).error().message;
  auto back = ParsePlanJson(PlanToJson(*plan), "back.json");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, *plan);
  EXPECT_EQ(json::parse(PlanToJson(*plan)), two) << "the writer's keys";
  EXPECT_NE(PlanHash(*plan), PlanHash(GoodPlan()));
  two["replicas"][1]["sequences"] = 0;
  ExpectError(ErrorOf(two.dump()), {"replicas[1].sequences = 0: out of range"});
  two["replicas"][1]["sequences"] = 2;
  two["replicas"][1]["seqs"] = 2;
  ExpectError(ErrorOf(two.dump()), {"replicas[1].seqs: unknown key", "`sequences`"});
  ExpectError(ErrorOf([](json& j) { j["replicas"] = json::array(); }),
              {"replicas = a list of 0 items: must be a non-empty list"});
  ExpectError(ErrorOf([](json& j) { j["left_out"] = {-1}; }), {"left_out[0] = -1: out of range"});
}

TEST(PlanJson, WrongTypesInPredictionAndProvenanceAreErrors) {
  ExpectError(ErrorOf([](json& j) { j["predicted"]["ranks"][0]["memory_bytes"] = "big"; }),
              {"p.json: predicted.ranks[0].memory_bytes = \"big\": must be a number"});
  ExpectError(ErrorOf([](json& j) { j["predicted"]["ranks"][0]["rank"] = "0"; }),
              {"p.json: predicted.ranks[0].rank = \"0\": must be an integer"});
  ExpectError(
      ErrorOf([](json& j) { j["predicted"]["ranks"][0]["compute_seconds"] = json::array(); }),
      {"predicted.ranks[0].compute_seconds = a list of 0 items: must be a number"});
  ExpectError(ErrorOf([](json& j) { j["predicted"]["ranks"][0] = 7; }),
              {"predicted.ranks[0] = 7: must be an object"});
  ExpectError(ErrorOf([](json& j) { j["predicted"]["ranks"] = "none"; }),
              {"predicted.ranks = \"none\": must be a list"});
  ExpectError(ErrorOf([](json& j) { j["predicted"] = 3; }), {"predicted = 3: must be an object"});
  ExpectError(ErrorOf([](json& j) { j["predicted"]["iteration_seconds"] = -1; }),
              {"predicted.iteration_seconds = -1: must be finite and >= 0"});
  ExpectError(ErrorOf([](json& j) { j["provenance"]["planner"] = 5; }),
              {"p.json: provenance.planner = 5: must be a string"});
  ExpectError(ErrorOf([](json& j) { j["provenance"]["input_hash"] = json::object(); }),
              {"provenance.input_hash = an object of 0 keys: must be a string"});
  ExpectError(ErrorOf([](json& j) { j["provenance"] = "x"; }),
              {"provenance = \"x\": must be an object"});
  ExpectError(ErrorOf([](json& j) { j["planner"] = true; }), {"planner = true: must be a string"});
}

TEST(PlanJson, EveryFieldWithEveryWrongTypeIsAnErrorNotACrash) {
  // Replace each value of the good plan, one at a time, with each hostile value. The reader
  // must return (an error, or a plan when the value happens to be legal); gtest fails the test
  // on any exception.
  const json hostile[] = {json("x"),
                          json(-1),
                          json(1e30),
                          json(9223372036854775807LL),
                          json(18446744073709551615ULL),
                          json(1.5),
                          json::array(),
                          json::object(),
                          json(nullptr),
                          json(true)};
  const json good = GoodJson();
  int cases = 0, rejected = 0;
  std::function<void(const json::json_pointer&, const json&)> visit =
      [&](const json::json_pointer& pointer, const json& value) {
        for (const json& bad : hostile) {
          json mutated = good;
          mutated[pointer] = bad;
          ++cases;
          auto plan = ParsePlanJson(mutated.dump(), "p.json");
          if (!plan) {
            ++rejected;
            EXPECT_NE(plan.error().message.find("p.json: "), std::string::npos);
            EXPECT_LT(plan.error().message.size(), 600u) << plan.error().message;
          }
        }
        if (value.is_object())
          for (const auto& [key, child] : value.items()) visit(pointer / key, child);
        if (value.is_array())
          for (size_t index = 0; index < value.size(); ++index)
            visit(pointer / index, value[index]);
      };
  for (const auto& [key, child] : good.items()) visit(json::json_pointer("/" + key), child);
  EXPECT_GT(cases, 500);
  EXPECT_GT(rejected, cases * 8 / 10) << rejected << " of " << cases;
}

TEST(PlanJson, IntegersAreRangeCheckedNeverTruncated) {
  const int64_t two_32 = int64_t{1} << 32;
  ExpectError(
      ErrorOf([&](json& j) { j["replicas"][0]["groups"][0]["members"][1]["rank"] = two_32 + 1; }),
      {"replicas[0].groups[0].members[1].rank = 4294967297: out of range [0, 1048575]"});
  ExpectError(
      ErrorOf([&](json& j) { j["replicas"][0]["groups"][0]["ranks"][0] = 9223372036854775808ULL; }),
      {"replicas[0].groups[0].ranks[0] = 9223372036854775808: out of range"});
  ExpectError(ErrorOf([](json& j) { j["replicas"][0]["groups"][0]["members"][0]["rank"] = 1e30; }),
              {"replicas[0].groups[0].members[0].rank = 1e+30: out of range"});
  ExpectError(ErrorOf([](json& j) { j["replicas"][0]["groups"][0]["members"][0]["rank"] = 0.5; }),
              {"replicas[0].groups[0].members[0].rank = 0.5: must be an integer"});
  ExpectError(ErrorOf([&](json& j) { j["num_heads"] = two_32 + 32; }),
              {"num_heads = 4294967328: out of range [1, 4096]"});
  ExpectError(ErrorOf([&](json& j) { j["num_ranks"] = two_32 + 3; }),
              {"num_ranks = 4294967299: out of range [1, 1048576]"});
  ExpectError(
      ErrorOf([&](json& j) { j["replicas"][0]["groups"][0]["members"][0]["heads"][0] = two_32; }),
      {"replicas[0].groups[0].members[0].heads[0] = 4294967296: out of range [0, 4095]"});
  ExpectError(ErrorOf([](json& j) { j["seq_len"] = 1e30; }), {"seq_len = 1e+30: out of range"});
  ExpectError(ErrorOf([](json& j) { j["num_heads"] = 2000000000; }),
              {"num_heads = 2000000000: out of range [1, 4096]"});
  ExpectError(ErrorOf([](json& j) { j["batch"] = 0; }), {"batch = 0: out of range"});
  ExpectError(ErrorOf([](json& j) { j["zero_stage"] = 4; }),
              {"zero_stage = 4: out of range [0, 3]"});
  ExpectError(
      ErrorOf([](json& j) {
        j["replicas"][0]["groups"][0]["tokens"][0] =
            json::array({std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()});
      }),
      {"replicas[0].groups[0].tokens[0][0] = -9223372036854775808: out of range [0, 2147483648]"});
  ExpectError(ErrorOf([](json& j) { j["replicas"][0]["groups"][0]["members"][0]["node"] = -1; }),
              {"replicas[0].groups[0].members[0].node = -1: out of range"});
}

TEST(PlanJson, RecomputeIsCheckedByTheReaderNotBlamedOnAFlag) {
  const std::string message = ErrorOf([](json& j) { j["recompute"] = "sometimes"; });
  ExpectError(message, {"p.json: recompute = \"sometimes\": not a recompute policy"});
  EXPECT_EQ(message.find("--recompute"), std::string::npos) << message;
}

TEST(PlanJson, UnknownKeysAreRejectedWithTheClosestKey) {
  ExpectError(ErrorOf([](json& j) { j["seq_length"] = 8; }),
              {"p.json: seq_length: unknown key \"seq_length\"", "did you mean `seq_len`?"});
  ExpectError(ErrorOf([](json& j) { j["replicas"][0]["groups"][0]["member"] = json::array(); }),
              {"replicas[0].groups[0].member: unknown key", "did you mean `members`?"});
  ExpectError(
      ErrorOf([](json& j) { j["replicas"][0]["groups"][0]["members"][0]["head"] = json::array(); }),
      {"replicas[0].groups[0].members[0].head: unknown key", "`heads`"});
  ExpectError(ErrorOf([](json& j) { j["predicted"]["ranks"][0]["memory"] = 1; }),
              {"predicted.ranks[0].memory: unknown key"});
  ExpectError(ErrorOf([](json& j) { j["provenance"]["version"] = "1"; }),
              {"provenance.version: unknown key"});
}

TEST(PlanJson, DuplicateKeysAreRejectedWithTheirPath) {
  std::string text = PlanToJson(GoodPlan(), -1);
  std::string top = text;
  top.replace(top.find("\"seq_len\":8"), 11, "\"seq_len\":8,\"seq_len\":16");
  ExpectError(ErrorOf(top), {"p.json: seq_len: key given twice"});
  std::string member = text;
  const size_t at = member.find("\"rank\":1");
  ASSERT_NE(at, std::string::npos);
  member.replace(at, 8, "\"rank\":1,\"rank\":2");
  ExpectError(ErrorOf(member), {"p.json: replicas[0].groups[0].members[1].rank: key given twice"});
}

// Found by the plan fuzzer: a path built from long keys made a message of many kilobytes.
TEST(PlanJson, DtypeIsWrittenWhenNotBf16AndChecked) {
  Plan plan = GoodPlan();
  EXPECT_EQ(plan.dtype, "bf16");  // absent: bf16
  EXPECT_EQ(PlanToJson(plan).find("dtype"), std::string::npos);
  plan.dtype = "fp32";
  auto reread = ParsePlanJson(PlanToJson(plan), "fp32.json");
  ASSERT_TRUE(reread) << reread.error().message;
  EXPECT_EQ(reread->dtype, "fp32");
  ExpectError(ErrorOf([](json& j) { j["dtype"] = "fp16"; }),
              {"p.json: dtype = \"fp16\": not a precision (rule: bf16 or fp32"});
  ExpectError(ErrorOf([](json& j) { j["dtype"] = 4; }), {"p.json: dtype = 4: must be a string"});
}

TEST(PlanJson, LongKeysAndTokensMakeShortMessages) {
  constexpr size_t kMaxMessageBytes = 1024;
  const std::string long_key(5000, 'k');
  const std::string unknown = ErrorOf([&](json& j) { j[long_key] = 1; });
  ExpectError(unknown, {"p.json: \"kkkk", "...: unknown key"});
  EXPECT_LT(unknown.size(), kMaxMessageBytes);

  // A key given twice, 60 levels down, each level under a 5000-character key.
  std::string nested;
  for (int level = 0; level < 60; ++level) nested += "{\"" + long_key + "\":";
  nested += "{\"a\":1,\"a\":2}" + std::string(60, '}');
  const std::string duplicate = ErrorOf(nested);
  ExpectError(duplicate, {"p.json: ...", ".a: key given twice"});
  EXPECT_LT(duplicate.size(), kMaxMessageBytes);

  // The parser's own message quotes the token it stopped in.
  const std::string bad_token = ErrorOf("{\"" + std::string(100000, 'x') + "\x01\"}");
  ExpectError(bad_token, {"p.json: not valid JSON"});
  EXPECT_LT(bad_token.size(), kMaxMessageBytes);
}

TEST(PlanJson, DeepNestingIsAShortErrorNotAStackOverflow) {
  for (int depth : {65, 50000, 200000}) {
    json j = GoodJson();
    std::string text = j.dump();
    const std::string nested = std::string(depth, '[') + std::string(depth, ']');
    text.replace(text.find("\"tiny\""), 6, nested);
    const std::string message = ErrorOf(text);
    ExpectError(message, {"p.json: nested deeper than 64"});
    EXPECT_LT(message.size(), 300u) << "depth " << depth;
  }
  // A deep value that stays within the limit is a short type error.
  json j = GoodJson();
  json deep = json::array();
  for (int level = 0; level < 40; ++level) deep = json::array({deep});
  j["model"] = deep;
  const std::string message = ErrorOf(j.dump());
  ExpectError(message, {"model = a list of 1 items: must be a string"});
}

TEST(PlanJson, NonFinitePredictionsAreRejected) {
  std::string text = PlanToJson(GoodPlan(), -1);
  text.replace(text.find("\"iteration_seconds\":1.5"), 23, "\"iteration_seconds\":1e999");
  ExpectError(ErrorOf(text), {"p.json: not valid JSON", "number overflow parsing '1e999'"});
}

TEST(PlanJson, NodeIsCheckedAgainstTheClusterAndOptional) {
  Plan plan = GoodPlan();
  for (PlanGroup& group : plan.groups)
    for (PlanMember& member : group.members) member.node = -1;
  const json written = json::parse(PlanToJson(plan));
  EXPECT_FALSE(written["replicas"][0]["groups"][0]["members"][0].contains("node"));
  auto back = ParsePlanJson(written.dump(), "p.json");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->groups[0].members[0].node, -1);

  // Three one-GPU nodes: rank r is on node r.
  auto device = DeviceCatalog().Find("H100-SXM", "gpu");
  ASSERT_TRUE(device);
  const Cluster cluster = MakeCluster({*device}, {3}, 1, 0);
  ModelSpec model;
  model.name = "tiny";
  model.heads = 2;
  model.kv_heads = 1;
  EXPECT_TRUE(Validate(*back, cluster, model)) << "a plan without nodes is valid";
  auto wrong = Validate(GoodPlan(), cluster, model);  // says rank 1 is on node 0
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find(
                "groups[0].members[1].node = 0 but rank 1 is on node 1 in this cluster"),
            std::string::npos)
      << wrong.error().message;
  Plan right = GoodPlan();
  right.groups[0].members[1].node = 1;
  right.groups[1].members[0].node = 2;
  EXPECT_TRUE(Validate(right, cluster, model));
}

class PlanFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("hexiseq_plan_json_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

void ExpectIoError(const std::string& path, const std::string& needle) {
  auto plan = LoadPlan(path);
  ASSERT_FALSE(plan) << path;
  EXPECT_EQ(plan.error().code, ErrorCode::kIo);
  EXPECT_NE(plan.error().message.find(needle), std::string::npos) << plan.error().message;
  EXPECT_NE(plan.error().message.find(path), std::string::npos) << plan.error().message;
}

TEST_F(PlanFileTest, SpecialFilesAreRefusedBeforeReading) {
  const std::string fifo = Path("fifo.json");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ExpectIoError(fifo, "is a FIFO");  // would block forever if opened for a plain read
  ExpectIoError(dir_.string(), "is a directory");
  ExpectIoError("/dev/zero", "is a character device");  // would be read until memory runs out
  ExpectIoError(Path("absent.json"), "No such file");
}

TEST_F(PlanFileTest, FilesAboveTheSizeLimitAreRefused) {
  const std::string big = Path("big.json");
  { std::ofstream out(big); }
  ASSERT_EQ(truncate(big.c_str(), kMaxPlanFileBytes + 1), 0);  // sparse: costs no disk
  ExpectIoError(big, "larger than 512 MiB");
}

TEST_F(PlanFileTest, SaveReportsAFailedWrite) {
  auto saved = SavePlan(GoodPlan(), "/dev/full");
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().code, ErrorCode::kIo);
  EXPECT_NE(saved.error().message.find("/dev/full: write failed"), std::string::npos)
      << saved.error().message;
  saved = SavePlan(GoodPlan(), Path("no/such/dir/plan.json"));
  ASSERT_FALSE(saved);
  EXPECT_NE(saved.error().message.find("cannot open for writing"), std::string::npos);
}

}  // namespace
}  // namespace hexiseq
