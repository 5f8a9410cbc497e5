// Baseline plans: valid on random clusters, at their strongest, and the building blocks' exact
// arithmetic (zigzag work balance, largest remainder, KV-aware head splits).
#include "sched/baselines.h"

#include <gtest/gtest.h>

#include <random>

#include "spec/units.h"

namespace hexiseq {
namespace {

Cluster RandomCluster(std::mt19937& rng) {
  const std::vector<DeviceSpec>& all = BuiltinDevices();
  const int types = std::uniform_int_distribution<int>(1, 3)(rng);
  std::vector<DeviceSpec> devices;
  std::vector<int> counts;
  for (int t = 0; t < types; ++t) {
    devices.push_back(all[std::uniform_int_distribution<size_t>(0, all.size() - 1)(rng)]);
    counts.push_back(std::uniform_int_distribution<int>(1, 2)(rng));
  }
  const int gpus = std::vector<int>{1, 2, 4, 8}[std::uniform_int_distribution<int>(0, 3)(rng)];
  const double nic = std::uniform_real_distribution<double>(5e9, 50e9)(rng);
  return MakeCluster(devices, counts, gpus, nic);
}

TEST(Baselines, EveryStrategyValidOnRandomClusters) {
  std::mt19937 rng(11);
  const std::vector<std::string> models = {"llama3-8b", "gpt-7b", "llama3.2-3b", "llama2-13b"};
  for (int trial = 0; trial < 100; ++trial) {
    const Cluster cluster = RandomCluster(rng);
    auto model = LoadModel(models[trial % models.size()]);
    ASSERT_TRUE(model) << model.error().message;
    Workload w;
    w.seq_len = std::uniform_int_distribution<int64_t>(1000, 300000)(rng);
    const CostModel cm(cluster, *model, w);
    std::vector<StrategyResult> all = AllBaselines(cm.problem());
    all.push_back(ProportionalPlan(cm));
    for (const StrategyResult& r : all) {
      if (!r.applicable) continue;
      auto v = Validate(r.plan, cluster, *model);
      ASSERT_TRUE(v) << "trial " << trial << " " << r.strategy << " " << r.config << ": "
                     << v.error().message;
      EXPECT_GT(r.cost.iteration_seconds, 0);
      EXPECT_LE(cm.IdealIterationSeconds(), r.cost.iteration_seconds * (1 + 1e-9))
          << r.strategy << ": nothing beats the aggregate-compute bound";
    }
  }
}

TEST(Baselines, ZigzagBalancesCausalWorkByWeight) {
  const int64_t seq = 1000003;  // prime
  const std::vector<double> w = {3, 1, 0, 2};
  const std::vector<Ranges> parts = ZigzagSplit(seq, w);
  int64_t total = 0;
  for (const Ranges& r : parts) total += TotalTokens(r);
  EXPECT_EQ(total, seq);
  EXPECT_TRUE(parts[2].empty());
  const double all = static_cast<double>(CausalPrefixPairs({{0, seq}}));
  for (size_t k = 0; k < w.size(); ++k)
    EXPECT_NEAR(CausalPrefixPairs(parts[k]) / all, w[k] / 6.0, 1e-5) << k;
}

TEST(Baselines, UniformZigzagIsMegatronLayout) {
  const std::vector<Ranges> parts = UniformZigzag(16, 4);
  EXPECT_EQ(parts[0], (Ranges{{0, 2}, {14, 16}}));
  EXPECT_EQ(parts[3], (Ranges{{6, 10}}));  // the two middle chunks merge
}

TEST(Baselines, LargestRemainderSumsExactly) {
  EXPECT_EQ(LargestRemainder(10, {1, 1, 1}), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(LargestRemainder(7, {0, 1}), (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(LargestRemainder(5, {2.5, 2.5}), (std::vector<int64_t>{3, 2}));
}

TEST(Baselines, SplitHeadsKeepsKvGroupsWhole) {
  // 32 heads, 8 KV groups of 4: a 3:1 split hands out whole KV groups.
  auto s = SplitHeads(32, 8, {3, 1});
  EXPECT_EQ(s[0].size(), 24u);
  EXPECT_EQ(s[1].size(), 8u);
  EXPECT_EQ(s[1].front(), 24);
  // 0.6 : 0.4 of 32 = 19.2 : 12.8 -> whole groups 16 + 12; the leftover KV group goes whole to
  // the larger remainder, so no KV group is cut.
  s = SplitHeads(32, 8, {0.6, 0.4});
  EXPECT_EQ(s[0].size(), 20u);
  EXPECT_EQ(s[1].size(), 12u);
  // 6 heads, 2 KV groups of 3, three equal members: two heads each, one KV group must be cut.
  s = SplitHeads(6, 2, {1, 1, 1});
  EXPECT_EQ(s[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(s[1], (std::vector<int>{2, 3}));
  EXPECT_EQ(s[2], (std::vector<int>{4, 5}));
}

TEST(Baselines, UlyssesNotApplicableWhenHeadsDoNotDivide) {
  auto dev = DeviceCatalog().Find("H100-SXM", "test");
  const Cluster cluster = MakeCluster({*dev}, {3}, 8, 0);  // 24 ranks, 32 heads
  auto model = LoadModel("llama3-8b");
  Workload w;
  w.seq_len = 65536;
  const StrategyResult r = UlyssesBaseline(Problem{cluster, *model, w});
  EXPECT_FALSE(r.applicable);
  EXPECT_NE(r.reason.find("32 heads do not divide over 24 ranks"), std::string::npos) << r.reason;
}

TEST(Baselines, SubsetLeavesSlowTypesOut) {
  auto h100 = DeviceCatalog().Find("H100-SXM", "test");
  auto l4 = DeviceCatalog().Find("L4", "test");
  const Cluster cluster = MakeCluster({*h100, *l4}, {1, 1}, 8, 0);
  auto model = LoadModel("llama3-8b");
  Workload w;
  w.seq_len = 65536;
  const StrategyResult r = SubsetBaseline(Problem{cluster, *model, w});
  ASSERT_TRUE(r.applicable);
  EXPECT_EQ(r.plan.left_out, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));  // the L4s
  for (const PlanGroup& group : r.plan.groups) EXPECT_GT(TotalTokens(group.tokens), 0);
  EXPECT_NE(r.config.find("H100-SXM"), std::string::npos);
}

// With a rate curve a rank's speed depends on its shard: hetero-ring splits again by each rank's
// rate at the shard it got, so the slow rank (whose small shard runs at 0.5x) gets less than the
// split by the plain rates gives it, and the plan is faster.
TEST(Baselines, HeteroRingSplitsByTheRateAtEachRanksShard) {
  auto h100 = DeviceCatalog().Find("H100-SXM", "test");
  auto a100 = DeviceCatalog().Find("A100-SXM-80G", "test");
  auto model = LoadModel("llama3.2-3b");
  ASSERT_TRUE(h100 && a100 && model);
  Workload w;
  w.seq_len = 65536;
  const Cluster plain = MakeCluster({*h100, *a100}, {1, 1}, 1, 25e9);
  Cluster curved = plain;
  curved.kinds[1].device.rate_curve = {{8192, 32768}, {1.0, 1.0}, {0.5, 1.0}};
  const StrategyResult by_plain_rates = HeteroRingBaseline(Problem{plain, *model, w});
  const StrategyResult by_curve = HeteroRingBaseline(Problem{curved, *model, w});
  ASSERT_TRUE(by_plain_rates.applicable && by_curve.applicable);
  ASSERT_TRUE(by_plain_rates.cost.feasible && by_curve.cost.feasible);
  const int64_t slow_tokens_plain = TotalTokens(by_plain_rates.plan.groups[1].tokens);
  const int64_t slow_tokens_curve = TotalTokens(by_curve.plan.groups[1].tokens);
  EXPECT_LT(slow_tokens_curve, slow_tokens_plain);
  EXPECT_NE(by_curve.config.find("at each rank's shard"), std::string::npos) << by_curve.config;
  // The plain split, scored on the curved cluster, is slower than the re-split one.
  const CostModel curved_model(curved, *model, w);
  EXPECT_LT(by_curve.cost.iteration_seconds,
            curved_model.Evaluate(by_plain_rates.plan).iteration_seconds);
}

}  // namespace
}  // namespace hexiseq
