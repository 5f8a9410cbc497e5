#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "plan/plan.h"
#include "sched/sched_test_util.h"
#include "sched/scheduler.h"

namespace hexiseq {
namespace {

TEST(ExactSearch, RefusesMoreThanEightRanks) {
  Cluster cluster = MakeCluster({sched_test::Device("H100-SXM")}, {1}, 9, 25e9);
  Workload w;
  w.seq_len = 65536;
  CostModel model(cluster, sched_test::Model("llama3-8b"), w);
  auto r = ExactSearch(model);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotSupported);
  EXPECT_NE(r.error().message.find("9 ranks"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("at most 8"), std::string::npos) << r.error().message;
}

// A fixed set of small heterogeneous cases: the scheduler within 1% of the exact search, and the
// exact search never worse than the best baseline (it enumerates a superset of their structures
// and refines the baselines' sequence splits too).
TEST(ExactSearch, SchedulerWithinOnePercentOnFixedCases) {
  std::mt19937_64 rng(11);
  const char* models[] = {"llama3-8b", "llama3.2-3b", "gpt-3b", "llama2-7b"};
  int compared = 0;
  for (int c = 0; c < 6; ++c) {
    const int ranks = 2 + static_cast<int>(rng() % 3);
    Cluster cluster = sched_test::RandomSmallCluster(rng, ranks);
    Workload w;
    w.seq_len = int64_t{1} << (15 + rng() % 3);
    CostModel model(cluster, sched_test::Model(models[rng() % 4]), w);
    auto s = Schedule(model);
    auto e = ExactSearch(model);
    ASSERT_EQ(s.has_value(), e.has_value()) << "case " << c;
    if (!s) continue;
    ++compared;
    ASSERT_TRUE(Validate(e->plan, cluster, model.model()));
    EXPECT_EQ(e->strategy, "exact");
    EXPECT_LE(s->cost.iteration_seconds, e->cost.iteration_seconds * 1.01) << "case " << c;
    double best_baseline = 1e300;
    for (const StrategyResult& b : AllBaselines(model))
      if (b.feasible()) best_baseline = std::min(best_baseline, b.cost.iteration_seconds);
    EXPECT_LE(e->cost.iteration_seconds, best_baseline * (1 + 1e-12)) << "case " << c;
  }
  EXPECT_GE(compared, 3);
}

// Same input, same plan, byte for byte: two runs, and one and two threads, of both strategies,
// on small heterogeneous clusters (the structure search and the exact search both run there).
TEST(Determinism, ScheduleAndExactGiveByteIdenticalPlans) {
  std::mt19937_64 rng(5);
  for (int c = 0; c < 3; ++c) {
    Cluster cluster = sched_test::RandomSmallCluster(rng, 3 + c);
    Workload w;
    w.seq_len = 65536;
    CostModel model(cluster, sched_test::Model("llama3-8b"), w);
    ScheduleOptions one, two;
    two.threads = 2;
    for (auto run : {&Schedule, &ExactSearch}) {
      auto a = run(model, one);
      auto b = run(model, one);
      auto t = run(model, two);
      ASSERT_EQ(a.has_value(), b.has_value());
      ASSERT_EQ(a.has_value(), t.has_value());
      if (!a) continue;
      EXPECT_EQ(PlanToJson(a->plan), PlanToJson(b->plan)) << "case " << c;
      EXPECT_EQ(PlanToJson(a->plan), PlanToJson(t->plan)) << "case " << c << ", 2 threads";
    }
  }
}

}  // namespace
}  // namespace hexiseq
