// Internal to the scheduler: group structures, sequence allocation and the search driver shared
// by Schedule, ExactSearch and ExplainInfeasible. Not part of the public API.
#pragma once

#include <chrono>
#include <optional>
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

// The searches' name for the command's deadline (ScheduleOptions::deadline).
using Clock = Deadline;

// Appends the structure's idle ranks, if any, as one group with no tokens and no heads.
void AppendIdleGroup(const Structure& structure, Layout& layout);
// Layout with the given tokens per active group (mirrored head + tail chunks), member tokens by
// GEMM speed and heads by attention speed; the idle ranks form one idle group at the end.
Layout MakeLayout(const CostModel& model, const Structure& structure,
                  const std::vector<int64_t>& group_tokens);
// Each active group's token rate at the average causal density (compute-proportional weights).
std::vector<double> RateWeights(const CostModel& model, const Structure& structure);
// Exact balancing by bisection on the target time, memory-capped, re-fitted `rounds` times.
// `scored`, when given, is the state of `tokens` already evaluated (the first round's fit).
std::vector<int64_t> BalanceTokens(const CostModel& model, const Structure& structure,
                                   std::vector<int64_t> tokens, int rounds,
                                   const PlanState* scored = nullptr);

// Class-level pattern search: groups with the same make-up form a class; each class's share of
// the sequence and its front fraction are searched with full re-scoring (at most
// `max_evaluations` of them). Returns the improved layout.
Layout ClassSearch(const CostModel& model, Layout layout, int max_evaluations, const Clock& clock);

// Small clusters: every ring order of the layout's active groups (3 or 4 of them; the idle group
// stays last) scored with the groups' tokens and member splits kept, the best two new orders
// refined (ClassSearch, then Descend with `trials`); returns the best of those and `layout`
// (order_search.cc).
Layout OrderSearch(const CostModel& model, const Layout& layout, int class_evaluations,
                   int64_t trials, const Clock& clock);

struct SearchOutcome {
  StrategyResult best;  // feasible or not: the best by Better()
  // The best feasible plan that leaves no rank out (a refined candidate or a baseline).
  std::optional<StrategyResult> best_all_ranks;
};
// The scheduler proper. `quick`: one structure pass, one candidate, no descent (used by
// ExplainInfeasible's re-plans). `rank_search`: the rank-level structure search and the wider
// refinement on small clusters (off for the replica search's re-plans, which plan many small
// sub-clusters). `baselines`: AllBaselines(model) when the caller has scored them (null: scored
// here).
SearchOutcome RunScheduler(const CostModel& model, const ScheduleOptions& options, bool quick,
                           bool rank_search = true,
                           const std::vector<StrategyResult>* baselines = nullptr);

// Schedule with the baselines already scored (`baselines` as for RunScheduler).
Result<StrategyResult> ScheduleWithBaselines(const Problem& problem, const ScheduleOptions& options,
                                             const std::vector<StrategyResult>* baselines);

// ---- The exact search's domain (exact_search.cc states it in full; the steps are in
// scheduler.h).
// The sequence grid of the domain (scheduler.h states it; the tests use coarser ones).
struct ExactGrid {
  int group_steps = kExactGroupSteps;    // S in 2 x this chunks
  int member_steps = kExactMemberSteps;  // member tokens in multiples of 1 / this of the group's
};

// Every set partition of {0, ..., n-1}, blocks in order of their smallest element (restricted
// growth strings); none for n = 0.
std::vector<std::vector<std::vector<int>>> SetPartitions(int n);
// Every (participant set, partition of it into at most `batch` replicas) of `num_ranks` ranks,
// each replica's ranks sorted, in a fixed order: participant sets by bit mask, partitions by
// restricted growth string. 2^n x Bell(n) at most: for small clusters only.
std::vector<std::vector<std::vector<int>>> ReplicaShapes(int num_ranks, int batch);
// A one-replica plan's busy time: its iteration without the exposed gradient sync.
inline double BusySeconds(const PlanCost& cost) { return cost.replica_busy_seconds.front(); }
// Feasible first, then busy time; among infeasible plans the smaller memory overshoot.
bool BusyBetter(const PlanCost& a, const PlanCost& b);

// Every structure of the domain (set partition, optional idle block, order of the active groups,
// member order in each group), one per class of structures equal up to swapping ranks of a node.
std::vector<Structure> ExactStructures(const Cluster& cluster);
// Integer counts proportional to `steps` summing to `total` (largest remainder).
std::vector<int64_t> GridSplit(int64_t total, const std::vector<int>& steps);
// The domain point: group front and back chunks of group_steps[k] / sum(group_steps) of S/2 each,
// member tokens member_steps[k][i] / sum(member_steps[k]) of the group's, heads[k][i] heads.
Layout ExactLayout(const Structure& structure, const std::vector<int>& group_steps, int64_t seq_len,
                   const std::vector<std::vector<int>>& member_steps,
                   const std::vector<std::vector<int>>& heads);

struct ExactDomainResult {
  bool found = false;     // at least one point scored
  bool complete = false;  // false when the time limit cut the enumeration
  PlanCost cost;          // the optimum: feasible first, then busy time (BusyBetter)
  Layout layout;
  // The best points of other structures within a few % of the optimum, best first (refinement
  // starts: outside the grid another structure may win).
  std::vector<Layout> runners_up;
  int64_t structures = 0;  // distinct structures enumerated
  int64_t evaluated = 0;   // domain points scored in full (the rest were pruned by the bound)
};
// The optimum of the cost model over the one-replica domain on the model's whole cluster
// (exhaustive with exact pruning), by busy time: for one replica also the iteration optimum.
ExactDomainResult ExactDomainOptimum(const CostModel& model, const ScheduleOptions& options,
                                     const ExactGrid& grid = {});
// The nearest domain point to a layout: same groups, orders and heads; the idle ranks merged
// into one idle group at the end; group and member tokens rounded onto the grid (every active
// group keeps at least one step).
Layout SnapToExactDomain(const Layout& layout, int64_t seq_len, const ExactGrid& grid = {});

// ---- The exact search over training shapes (exact_training.cc): which ranks take part, their
// partition into data-parallel replicas, the batch split; each replica the one-replica domain
// optimum of its sub-cluster.
struct ExactTrainingResult {
  bool found = false;     // some shape has a plan in the domain (feasible or not)
  bool complete = true;   // false when the time limit cut an enumeration
  StrategyResult best;    // the optimum over the domain, scored on the world (strategy "exact")
  int64_t shapes = 0;     // (participants, replica partition) pairs enumerated
  int64_t evaluated = 0;  // domain points scored in full, over every replica search
};
ExactTrainingResult ExactTrainingOptimum(const CostModel& model, const ScheduleOptions& options,
                                         const ExactGrid& grid = {});
// A plan (any replicas) rounded onto the domain grid replica by replica (SnapToExactDomain of each
// replica's groups; left-out ranks and the batch split kept); nullopt when a replica does not
// have the layout form.
std::optional<Plan> SnapPlanToExactDomain(const CostModel& model, const Plan& plan,
                                          const ExactGrid& grid = {});

}  // namespace hexiseq::sched_internal
