// The HexiSeq scheduler (strategy "hexiseq"), the exact search (strategy "exact") and the
// explanation of infeasible workloads. Hierarchical, coarse to fine (DESIGN.md, "Scheduler"):
// group-level candidates (which ranks form each all-to-all group, in which ring order, and how
// much of the sequence each group gets), the best few kept, then per-rank token and head counts
// refined by bounded coordinate descent with incremental scoring. Every baseline is scored too,
// so the result is never predicted worse than the best baseline. Every entry point takes the
// Problem; all plans are scored by its CostModel; nothing here models hardware itself.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "sched/baselines.h"
#include "sched/deadline.h"
#include "spec/error.h"

namespace hexiseq {

// One row of the table behind a decision (for `hexiseq explain` and the benches).
struct CandidateRecord {
  std::string name;              // e.g. "groups=node|8 seq=balanced" or "baseline usp"
  double iteration_seconds = 0;  // predicted; before refinement for group-level candidates
  double refined_seconds = 0;    // after refinement (0 when it was not refined)
  bool feasible = false;
  double max_memory_fraction = 0;
};

struct ScheduleOptions {
  // The command's wall-clock deadline (deadline.h; default: none). Once it passes, every search,
  // baseline and comparison under these options stops at its next step and the best plan found
  // so far is returned (deadline.CutShort() then says so); results are then no longer guaranteed
  // byte-identical between runs.
  Deadline deadline;
  // Worker threads for refining the retained candidates (each candidate is refined alone and the
  // winner chosen in a fixed order, so the result does not depend on the thread count).
  int threads = 1;
  // Called from the calling thread with the fraction done, in [0, 1]; may be empty.
  std::function<void(double)> progress;
  int top_k = 4;  // group-level candidates kept for refinement (at least 8 on <= 16 ranks; on
                  // <= 4 ranks every structure is a candidate and every membership is refined)
  // Descent work per retained candidate, in trial moves (0: automatic, scaled to the cluster).
  int64_t max_trials = 0;
  // When no plan fits, also search for the smallest change that fits (costs a few re-plans).
  bool explain_infeasible = true;
  // Filled (when not null) with every scored candidate, best first.
  std::vector<CandidateRecord>* candidates = nullptr;
  // Filled (when not null) by a search that scores the baselines itself (AllBaselines at the
  // problem's settings), so that a caller needing them too need not score them again.
  std::vector<StrategyResult>* scored_baselines = nullptr;
  // `--zero auto` / `--recompute auto`: RunStrategy and CompareStrategies try every ZeRO stage
  // (0..3) / recompute policy (none, selective, full) and keep the fastest feasible plan; false:
  // the workload's value is respected. Schedule itself always plans the workload as given.
  bool zero_auto = false;
  bool recompute_auto = false;
};

// Strategy "hexiseq". Returns the best plan found (strategy "hexiseq", config naming the group
// structure), or kInfeasible when no plan fits memory, with the message of ExplainInfeasible.
// Deterministic: the same inputs and options (without a time limit) give the same plan.
// Thread-safe for concurrent calls on the same Problem.
Result<StrategyResult> Schedule(const Problem& problem, const ScheduleOptions& options = {});

// Strategy "exact": the optimum of the cost model over a stated domain, for clusters of at most
// kExactMaxRanks ranks, at the workload's ZeRO stage and recompute policy (under --zero auto /
// --recompute auto it runs at the settings the screen of training_search.h keeps, as hexiseq
// does). The domain: every set of participating ranks (the others left out: no state, no sync),
// every partition of it into at most `batch` data-parallel replicas, every split of the batch
// (each replica >= 1 sequence); per replica, every grouping of its ranks (set partition,
// optionally one group idle), every order of the groups (ring order and zigzag placement), every
// member order, every head split at whole-head granularity (consecutive blocks in member order);
// the sequence in 2 x kExactGroupSteps chunks, active group k taking c_k >= 1 from the front and
// c_k from the back (sum c_k = kExactGroupSteps), member tokens in multiples of 1 /
// kExactMemberSteps of their group's (largest remainder where S does not divide). Exhaustive,
// pruned only by exact bounds (symmetry between ranks of one node, per-rank compute and memory
// lower bounds) and by the separability of replicas (exact_training.cc); the optimum is then
// refined outside the grid (class-level sequence search and 1-token descent per replica, also
// from runners-up and the baselines), and the baselines' own plans compete (never worse).
// kNotSupported for larger clusters.
inline constexpr int kExactMaxRanks = 3;
inline constexpr int kExactGroupSteps = 32;
inline constexpr int kExactMemberSteps = 24;
Result<StrategyResult> ExactSearch(const Problem& problem, const ScheduleOptions& options = {});

// For a workload that does not fit: which rank cannot fit, what it needs and what it has, and the
// smallest change that makes the scheduler find a plan that fits: "with --recompute full it
// fits", "with --zero 3 it fits", "needs about 11 GiB more per A100-40G", "a shorter --seq of at
// most 768K fits" (each found by re-running the scheduler on the modified workload; the sequence
// length by bisection). Returns "" when the workload fits. Once `deadline` passes no further
// change is tried, and the message says so.
std::string ExplainInfeasible(const Problem& problem, const Deadline& deadline = {});
// The same, for a search that chose the settings `options` marks auto: the workload is explained
// at the auto settings that need the least memory (ZeRO-3, full recompute), and a setting the
// planner already chose is never suggested.
std::string ExplainInfeasible(const Problem& problem, const ScheduleOptions& options);

}  // namespace hexiseq
