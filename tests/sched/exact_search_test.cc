#include <gtest/gtest.h>

#include <random>

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

// A fixed set of small heterogeneous cases: the scheduler within 15% of the exact search (the goal
// is 1%; the worst case of this set is about 11% today, see docs/performance.md), and the
// exact search never worse than the best baseline (it enumerates a superset of their structures).
TEST(ExactSearch, SchedulerWithinBoundOnFixedCases) {
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
    std::printf("DBG case %d sched %.6f exact %.6f\n", c, s->cost.iteration_seconds, e->cost.iteration_seconds);
    ASSERT_TRUE(Validate(e->plan, cluster, model.model()));
    EXPECT_EQ(e->strategy, "exact");
    EXPECT_LE(s->cost.iteration_seconds, e->cost.iteration_seconds * 1.15) << "case " << c;
  }
  EXPECT_GE(compared, 3);
}

}  // namespace
}  // namespace hexiseq
