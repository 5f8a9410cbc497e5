// Internal to the scheduler: group structures, sequence allocation and the search driver shared
// by Schedule, ExactSearch and ExplainInfeasible. Not part of the public API.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "sched/plan_state.h"
#include "sched/scheduler.h"

namespace hexiseq::sched_internal {

// Which ranks form each all-to-all group, in ring order, and which ranks are idle.
struct Structure {
  std::vector<std::vector<int>> groups;
  std::vector<int> idle;
};

class Clock {
 public:
  explicit Clock(double limit_seconds);
  double Elapsed() const;
  bool Expired() const;  // never when the limit is 0

 private:
  std::chrono::steady_clock::time_point start_;
  double limit_;
};

// Layout with the given tokens per active group (mirrored head + tail chunks), member tokens by
// GEMM speed and heads by attention speed; the idle ranks form one idle group at the end.
Layout MakeLayout(const CostModel& model, const Structure& structure,
                  const std::vector<int64_t>& group_tokens);
// Each active group's token rate at the average causal density (compute-proportional weights).
std::vector<double> RateWeights(const CostModel& model, const Structure& structure);
// Exact balancing by bisection on the target time, memory-capped, re-fitted `rounds` times.
std::vector<int64_t> BalanceTokens(const CostModel& model, const Structure& structure,
                                   std::vector<int64_t> tokens, int rounds);

// Class-level pattern search: groups with the same make-up form a class; each class's share of
// the sequence and its front fraction are searched with full re-scoring (at most
// `max_evaluations` of them). Returns the improved layout.
Layout ClassSearch(const CostModel& model, Layout layout, int max_evaluations, const Clock& clock);

struct SearchOutcome {
  StrategyResult best;  // feasible or not: the best by Better()
};
// The scheduler proper. `quick`: one structure pass, one candidate, no descent (used by
// ExplainInfeasible's re-plans).
SearchOutcome RunScheduler(const CostModel& model, const ScheduleOptions& options, bool quick);

}  // namespace hexiseq::sched_internal
