// Strategies by name and the side-by-side comparison of all of them on one workload: what
// `hexiseq plan` and `hexiseq compare` run, and what the Python package calls, so every front end
// reports the same plans and the same rows. Ignores presentation (tables, progress bars).
#pragma once

#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "sched/baselines.h"
#include "sched/scheduler.h"
#include "spec/error.h"

namespace hexiseq {

// The strategy names `RunStrategy` accepts, in the order the CLI lists them.
const std::vector<std::string>& StrategyNames();

// Runs one strategy: hexiseq and exact go through the scheduler with `options`, the others are
// baselines. kInvalidArgument for an unknown name. The result may be not applicable or
// infeasible; `PlanStrategy` turns those into errors.
Result<StrategyResult> RunStrategy(const Problem& problem, const std::string& name,
                                   const ScheduleOptions& options = {});

// RunStrategy for a caller that needs a plan to use: a strategy that is not applicable gives
// kNotSupported, one whose plan does not fit gives kInfeasible with the smallest change that fits,
// one that the deadline stopped before it scored a plan gives kInfeasible saying so. The plan's
// time_limit_reached says whether the deadline cut the search short.
Result<StrategyResult> PlanStrategy(const Problem& problem, const std::string& name,
                                    const ScheduleOptions& options = {});

// Every baseline, hexiseq, and exact where the cluster is small enough for it.
struct Comparison {
  std::vector<StrategyResult> results;
  double best_baseline_seconds = 0;  // the fastest feasible baseline (0: none is feasible)
  double ideal_seconds = 0;          // aggregate-compute bound per iteration
  double ideal_tokens_per_second = 0;
  bool time_limit_reached = false;  // the deadline cut some strategy short (rows say which)
};
// Errors only when the scheduler fails for a reason other than infeasibility (an infeasible
// hexiseq becomes a row with the explanation as its reason).
Result<Comparison> CompareStrategies(const Problem& problem, const ScheduleOptions& options = {});

// The `hexiseq compare --format json` document: ideal_tokens_per_second, time_limit_reached and
// one object per strategy (strategy, config, feasible, reason, iteration_seconds,
// tokens_per_second, fraction_of_ideal, speedup_over_best_baseline, max_memory_fraction; null
// where not scored).
std::string ComparisonToJson(const Comparison& comparison, int indent = 2);

}  // namespace hexiseq
