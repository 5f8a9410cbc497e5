// Plan JSON round trip, validation of every invariant, and corrupted plans.
#include "plan/plan.h"

#include <gtest/gtest.h>

namespace hexiseq {
namespace {

// Two groups over 4 ranks, S = 16, H = 4, G = 2; group 0 zigzag head+tail.
Plan SmallPlan() {
  Plan p;
  p.strategy = "test";
  p.model = "tiny";
  p.seq_len = 16;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.num_ranks = 4;
  PlanGroup g0;
  g0.ranks = {0, 1};
  g0.tokens = {{0, 4}, {12, 16}};
  g0.members = {{0, "", 0, {{0, 4}, {12, 13}}, {0, 1, 2}}, {1, "", 0, {{13, 16}}, {3}}};
  PlanGroup g1;
  g1.ranks = {2, 3};
  g1.tokens = {{4, 12}};
  g1.members = {{2, "", 1, {{4, 9}}, {0, 2}}, {3, "", 1, {{9, 12}}, {1, 3}}};
  p.groups = {g0, g1};
  return p;
}

std::string ErrorOf(const Plan& p) {
  auto r = ValidateStructure(p);
  return r ? "" : r.error().message;
}

TEST(Plan, ValidPlanPasses) { EXPECT_EQ(ErrorOf(SmallPlan()), ""); }

TEST(Plan, JsonRoundTrip) {
  Plan p = SmallPlan();
  p.predicted = PlanPrediction{1.5, 10.0, {{0, 1e9, 2e9, 0.5, 0.25, 0.3}}};
  auto back = ParsePlanJson(PlanToJson(p), "mem");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, p);
  EXPECT_EQ(PlanHash(*back), PlanHash(p));
}

TEST(Plan, HashChangesWithHeads) {
  Plan p = SmallPlan();
  const uint64_t h = PlanHash(p);
  std::swap(p.groups[1].members[0].heads[1], p.groups[1].members[1].heads[1]);
  EXPECT_NE(PlanHash(p), h);
}

TEST(Plan, MissingTokensNamed) {
  Plan p = SmallPlan();
  p.groups[1].tokens = {{4, 10}};
  p.groups[1].members[1].tokens = {{9, 10}};
  const std::string e = ErrorOf(p);
  EXPECT_NE(e.find("tokens [10, 12) are missing"), std::string::npos) << e;
}

TEST(Plan, OverlappingTokensNamed) {
  Plan p = SmallPlan();
  p.groups[0].members[1].tokens = {{12, 16}};  // 12 is also rank 0's
  const std::string e = ErrorOf(p);
  EXPECT_NE(e.find("tokens [12, 13) are held by both"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
}

TEST(Plan, MissingHeadNamed) {
  Plan p = SmallPlan();
  p.groups[1].members[1].heads = {1};
  const std::string e = ErrorOf(p);
  EXPECT_NE(e.find("groups[1]: head 3 is missing"), std::string::npos) << e;
}

TEST(Plan, DuplicateHeadNamed) {
  Plan p = SmallPlan();
  p.groups[0].members[1].heads = {2, 3};
  const std::string e = ErrorOf(p);
  EXPECT_NE(e.find("head 2 is held by ranks 0 and 1"), std::string::npos) << e;
}

TEST(Plan, RepeatedAndOutOfRangeRanks) {
  Plan p = SmallPlan();
  p.groups[1].ranks[1] = 0;
  p.groups[1].members[1].rank = 0;
  std::string e = ErrorOf(p);
  EXPECT_NE(e.find("rank 0 appears twice"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 3 is in no group"), std::string::npos) << e;
  p = SmallPlan();
  p.groups[1].ranks[1] = 9;
  p.groups[1].members[1].rank = 9;
  e = ErrorOf(p);
  EXPECT_NE(e.find(".rank = 9: out of range [0, 4)"), std::string::npos) << e;
}

TEST(Plan, IdleGroupMustHoldNoHeads) {
  Plan p = SmallPlan();
  p.num_ranks = 5;
  p.groups.push_back({{4}, {}, {{4, "", 2, {}, {0}}}});
  EXPECT_NE(ErrorOf(p).find("holds heads in a group with no tokens"), std::string::npos);
  p.groups.back().members[0].heads.clear();
  EXPECT_EQ(ErrorOf(p), "");
}

// SmallPlan's 4 ranks as two replicas: {0, 1} (one group, 3 sequences) and {2} (1 sequence);
// rank 3 left out.
Plan TwoReplicaPlan() {
  Plan p = SmallPlan();
  p.batch = 4;
  p.replica_sequences = {3, 1};
  p.groups[0].tokens = {{0, 16}};
  p.groups[0].members[0].tokens = {{0, 10}};
  p.groups[0].members[1].tokens = {{10, 16}};
  p.groups[1] = {{2}, {{0, 16}}, {{2, "", 1, {{0, 16}}, {0, 1, 2, 3}}}, 1};
  p.left_out = {3};
  return p;
}

TEST(Plan, ReplicasAndLeftOutValidate) {
  const Plan p = TwoReplicaPlan();
  EXPECT_EQ(ErrorOf(p), "");
  EXPECT_EQ(NumReplicas(p), 2);
  EXPECT_EQ(ParticipatingRanks(p), (std::vector<int>{0, 1, 2}));
  const Plan second = ReplicaPlan(p, 1);
  EXPECT_EQ(ErrorOf(second), "");
  EXPECT_EQ(second.batch, 1);
  EXPECT_EQ(second.left_out, (std::vector<int>{0, 1, 3}));
  ASSERT_EQ(second.groups.size(), 1u);
  EXPECT_EQ(second.groups[0].replica, 0);
  EXPECT_EQ(second.groups[0].ranks, (std::vector<int>{2}));
}

// MergeReplicas is ReplicaPlan's inverse; EmbedPlan renumbers a part's plan into world ranks.
TEST(Plan, MergeReplicasUndoesReplicaPlanAndEmbedPlanRenumbers) {
  const Plan p = TwoReplicaPlan();
  const Plan merged = MergeReplicas({ReplicaPlan(p, 0), ReplicaPlan(p, 1)});
  EXPECT_EQ(ErrorOf(merged), "");
  EXPECT_EQ(merged.groups, p.groups);
  EXPECT_EQ(merged.replica_sequences, p.replica_sequences);
  EXPECT_EQ(merged.batch, p.batch);
  EXPECT_EQ(merged.left_out, p.left_out);

  Plan part = ReplicaPlan(p, 1);  // rank 2 alone, as a one-rank plan
  part.num_ranks = 1;
  part.left_out.clear();
  part.groups[0].ranks = {0};
  part.groups[0].members[0].rank = 0;
  const Plan embedded = EmbedPlan(part, {2}, 4);
  EXPECT_EQ(ErrorOf(embedded), "");
  EXPECT_EQ(embedded.left_out, (std::vector<int>{0, 1, 3}));
  ASSERT_EQ(embedded.groups.size(), 1u);
  EXPECT_EQ(embedded.groups[0].ranks, (std::vector<int>{2}));
  EXPECT_EQ(embedded.groups[0].members[0].rank, 2);
  EXPECT_EQ(embedded.groups[0].tokens, p.groups[1].tokens);
}

TEST(Plan, ReplicaViolationsAreNamed) {
  Plan p = TwoReplicaPlan();
  p.replica_sequences = {3, 2};
  EXPECT_NE(ErrorOf(p).find("the replicas' sequences sum to 5 but batch = 4"), std::string::npos);
  p = TwoReplicaPlan();
  p.left_out = {2, 3};
  EXPECT_NE(ErrorOf(p).find("rank 2 appears twice: in left_out and replicas[1].groups[0]"),
            std::string::npos)
      << ErrorOf(p);
  p = TwoReplicaPlan();
  p.left_out = {};
  EXPECT_NE(ErrorOf(p).find("rank 3 is in no group"), std::string::npos);
  p = TwoReplicaPlan();
  p.groups[1].tokens = {{0, 12}};
  p.groups[1].members[0].tokens = {{0, 12}};
  EXPECT_NE(ErrorOf(p).find("replicas[1].groups: tokens [12, 16) are missing"), std::string::npos)
      << ErrorOf(p);
  p = TwoReplicaPlan();
  std::swap(p.groups[0], p.groups[1]);
  EXPECT_NE(ErrorOf(p).find("(rule: groups are listed replica by replica)"), std::string::npos);
  p = TwoReplicaPlan();
  p.groups[1].replica = 2;
  EXPECT_NE(ErrorOf(p).find("groups[1].replica = 2: out of range [0, 2)"), std::string::npos);
  p = TwoReplicaPlan();
  p.replica_sequences = {4, 0};
  EXPECT_NE(ErrorOf(p).find("replicas[1].sequences = 0: must be >= 1"), std::string::npos);
  p = TwoReplicaPlan();
  p.left_out = {3, 3};
  EXPECT_NE(ErrorOf(p).find("left_out must be sorted and distinct"), std::string::npos);
}

TEST(Plan, WrongFormatStringRejectedByParser) {
  std::string text = PlanToJson(SmallPlan());
  text.replace(text.find("hexiseq.plan/2"), 14, "hexiseq.plan/9");
  auto r = ParsePlanJson(text, "p.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("p.json: format = \"hexiseq.plan/9\": must be"),
            std::string::npos)
      << r.error().message;
}

TEST(Plan, ParserNamesBadFields) {
  auto r = ParsePlanJson("{\"format\":\"hexiseq.plan/1\",\"seq_len\":\"x\"}", "p.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("p.json: seq_len = \"x\": must be an integer"),
            std::string::npos)
      << r.error().message;
  r = ParsePlanJson("{not json", "p.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("p.json: not valid JSON"), std::string::npos);
  r = ParsePlanJson("", "p.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("empty"), std::string::npos);
  r = LoadPlan("/nonexistent/plan.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kIo);
}

TEST(Plan, KvHeadsOfGqa) {
  EXPECT_EQ(KvHeadsOf({0, 1, 5}, 8, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(KvHeadsOf({}, 8, 2), std::vector<int>{});
}

}  // namespace
}  // namespace hexiseq
