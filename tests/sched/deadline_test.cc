// The command-wide deadline (sched/deadline.h): its checks, the record shared by its copies, and
// what each search returns once it has passed (the best scored so far, or NotScored).
#include "sched/deadline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "sched/baselines.h"
#include "sched/sched_test_util.h"
#include "sched/scheduler.h"
#include "sched/strategies.h"

namespace hexiseq {
namespace {

using sched_test::Device;
using sched_test::Model;

Workload Work(int64_t seq, Recompute recompute = Recompute::kFull) {
  Workload workload;
  workload.seq_len = seq;
  workload.recompute = recompute;
  return workload;
}

// A deadline that has already passed.
Deadline Passed() {
  Deadline deadline = *Deadline::FromTimeLimit(1e-6);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return deadline;
}

TEST(Deadline, BadLimitsNameTheFlag) {
  for (double bad : {-1.0, std::nan(""), static_cast<double>(INFINITY), 2e6}) {
    auto deadline = Deadline::FromTimeLimit(bad, "--time-limit");
    ASSERT_FALSE(deadline) << bad;
    EXPECT_EQ(deadline.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(deadline.error().message.find("--time-limit = "), std::string::npos);
    EXPECT_NE(deadline.error().message.find("[0, 1e6]"), std::string::npos);
  }
}

TEST(Deadline, NoLimitNeverExpires) {
  const Deadline none, zero = *Deadline::FromTimeLimit(0);
  EXPECT_FALSE(none.Expired());
  EXPECT_FALSE(zero.Expired());
  EXPECT_FALSE(zero.CutShort());
  EXPECT_EQ(LimitText(zero), "none");
}

TEST(Deadline, CopiesShareTheRecordOfBeingReached) {
  const Deadline original = Passed();
  const Deadline copy = original;
  EXPECT_FALSE(original.CutShort());  // nothing has checked it yet
  EXPECT_TRUE(copy.Expired());
  EXPECT_TRUE(original.CutShort());
  EXPECT_EQ(LimitText(original), "1e-06 s");
}

TEST(Deadline, BaselinesStartedAfterItAreNotScored) {
  const Cluster cluster =
      MakeCluster({Device("H100-SXM"), Device("A100-SXM-80G")}, {1, 1}, 4, 25e9);
  const CostModel model(cluster, Model("llama3-8b"), Work(65536));
  const Deadline deadline = Passed();
  for (const StrategyResult& result : AllBaselines(model.problem(), deadline)) {
    EXPECT_TRUE(result.timed_out) << result.strategy;
    EXPECT_FALSE(result.applicable);
    EXPECT_NE(result.reason.find("not scored: the time limit of 1e-06 s"), std::string::npos);
  }
  // Without a deadline the same baselines are scored.
  for (const StrategyResult& result : AllBaselines(model.problem())) EXPECT_FALSE(result.timed_out);
}

TEST(Deadline, ComparisonSaysWhichStrategiesWereNotScored) {
  const Cluster cluster = MakeCluster({Device("H100-SXM")}, {1}, 4, 25e9);
  const CostModel model(cluster, Model("llama3-8b"), Work(65536));
  ScheduleOptions options;
  options.deadline = Passed();
  auto comparison = CompareStrategies(model.problem(), options);
  ASSERT_TRUE(comparison);
  EXPECT_TRUE(comparison->time_limit_reached);
  for (const StrategyResult& result : comparison->results)
    EXPECT_TRUE(result.timed_out) << result.strategy;
  // The scheduler itself always scores its first candidate: a valid plan, marked as cut short.
  auto scheduled = PlanStrategy(model.problem(), "hexiseq", options);
  ASSERT_TRUE(scheduled) << scheduled.error().message;
  EXPECT_TRUE(Validate(scheduled->plan, cluster, model.model()));
  EXPECT_TRUE(scheduled->plan.time_limit_reached);
  // Under --zero/--recompute auto the screen of training settings comes first; stopped before
  // it scored anything, there is no plan, and the error says why.
  options.zero_auto = options.recompute_auto = true;
  auto screened = PlanStrategy(model.problem(), "hexiseq", options);
  ASSERT_FALSE(screened);
  EXPECT_NE(screened.error().message.find("no plan was found within the time limit"),
            std::string::npos)
      << screened.error().message;
}

TEST(Deadline, InfeasibilityExplanationStopsAtTheDeadline) {
  const Cluster cluster = MakeCluster({Device("A100-40G")}, {1}, 8, 25e9);
  const CostModel model(cluster, Model("llama3-8b"), Work(int64_t{128} << 10, Recompute::kNone));
  const std::string full = ExplainInfeasible(model.problem());
  EXPECT_NE(full.find("with --recompute full it fits"), std::string::npos) << full;
  const std::string cut = ExplainInfeasible(model.problem(), Passed());
  EXPECT_NE(cut.find("infeasible: no plan fits memory"), std::string::npos) << cut;
  EXPECT_NE(cut.find("the time limit was reached before the smallest change"), std::string::npos)
      << cut;
  EXPECT_EQ(cut.find("it fits"), std::string::npos) << cut;
}

}  // namespace
}  // namespace hexiseq
