// The Problem value: its checks (each error names the field, the value and the rule) and its
// fingerprint.
#include "spec/problem.h"

#include <gtest/gtest.h>

namespace hexiseq {
namespace {

Problem SmallProblem() {
  const DeviceSpec h100 = *DeviceCatalog().Find("H100-SXM", "test");
  Problem problem{MakeCluster({h100}, {1}, 4, 50e9), *LoadModel("llama3-8b"), Workload{}};
  problem.workload.seq_len = 32768;
  return problem;
}

TEST(Problem, AValidProblemPasses) { EXPECT_TRUE(ValidateProblem(SmallProblem())); }

TEST(Problem, KvHeadsThatDoNotDivideHeadsAreNamed) {
  Problem problem = SmallProblem();
  problem.model.kv_heads = 5;
  const auto valid = ValidateProblem(problem);
  ASSERT_FALSE(valid);
  EXPECT_EQ(valid.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(valid.error().message.find("heads = 32, kv_heads = 5"), std::string::npos)
      << valid.error().message;
  EXPECT_NE(valid.error().message.find("divisible"), std::string::npos);
  EXPECT_NE(valid.error().message.find("hint"), std::string::npos);
}

TEST(Problem, ZeroHeadsAndEmptyClustersAreErrors) {
  Problem no_kv = SmallProblem();
  no_kv.model.kv_heads = 0;
  ASSERT_FALSE(ValidateProblem(no_kv));
  EXPECT_NE(ValidateProblem(no_kv).error().message.find("kv_heads = 0"), std::string::npos);

  Problem empty = SmallProblem();
  empty.cluster = Cluster{};
  empty.cluster.name = "nothing";
  ASSERT_FALSE(ValidateProblem(empty));
  EXPECT_NE(ValidateProblem(empty).error().message.find("cluster nothing: no ranks"),
            std::string::npos);
}

TEST(Problem, WorkloadRangesAreChecked) {
  Problem problem = SmallProblem();
  problem.workload.batch = 0;
  const auto valid = ValidateProblem(problem);
  ASSERT_FALSE(valid);
  EXPECT_NE(valid.error().message.find("--batch"), std::string::npos) << valid.error().message;
}

TEST(Problem, InputHashIsSixteenHexDigitsAndFollowsEveryInput) {
  const Problem base = SmallProblem();
  const std::string hash = InputHash(base);
  ASSERT_EQ(hash.size(), 16u);
  EXPECT_EQ(hash.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(InputHash(SmallProblem()), hash);  // equal problems, equal hashes

  Problem longer = base;
  longer.workload.seq_len *= 2;
  Problem batched = base;
  batched.workload.batch = 4;
  Problem zero1 = base;
  zero1.workload.zero_stage = 1;
  Problem bigger = base;
  bigger.cluster = MakeCluster({base.cluster.kinds[0].device}, {2}, 4, 50e9);
  Problem other_model = base;
  other_model.model = *LoadModel("llama3-70b");
  for (const Problem* changed : {&longer, &batched, &zero1, &bigger, &other_model})
    EXPECT_NE(InputHash(*changed), hash);
}

}  // namespace
}  // namespace hexiseq
