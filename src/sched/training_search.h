// `--zero auto` and `--recompute auto`: the planner tries the ZeRO stages and recompute policies
// the options leave open and keeps the fastest feasible plan. ZeRO 0 and 1 are not tried: the
// cost model charges stages 1 and 2 the same time for any plan (a reduce-scatter and an
// all-gather per iteration, the optimizer step over sharded state), stage 0 no less (its
// all-reduce behind the backward window alone: CostModel::StageExposedSyncSeconds) plus the
// unsharded step's extra, and stage 2 the least memory of the three, so stage 2 is never worse
// (tested in TrainingSearch.ZeroStagesBelowThreeCostNoLessThanStageTwo). Cheap strategies (the
// baselines) are run at every configuration. The searches (hexiseq, exact), when more than two
// configurations are open, are run at the first (the lowest stage without recompute: every plan is
// fastest there), then at the best other configuration by its best baseline; a configuration whose
// aggregate-compute bound is no less than the plan found is skipped (no plan there, searched or
// baseline, can beat it), and there a baseline that was feasible at the first configuration and
// no faster than that plan is only re-scored, not re-planned (a plan is never faster at another
// configuration: TrainingSearch.PlansNeverFasterThanAtTheFirstConfiguration). So the best
// baseline over every configuration is at a searched configuration or no faster than a plan
// found, and the search keeps its floor; the baselines scored at a configuration are handed to
// its search, which does not score them again. Ignores nothing else: each searched configuration
// is a full re-plan scored by the cost model.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sched/strategies.h"

namespace hexiseq {

// The stages `--zero auto` tries: the all-reduce stage with the least memory, and ZeRO-3.
inline constexpr int kLeastMemoryAllReduceStage = 2;
inline constexpr int kShardedWeightsStage = 3;

struct TrainingConfig {
  int zero_stage = 3;
  Recompute recompute = Recompute::kFull;
};

// The configurations the options leave open (a fixed setting is the workload's), in a fixed
// order: the least memory first (ZeRO 3 before 2, 1, 0; full recompute before selective, none).
std::vector<TrainingConfig> TrainingConfigs(const Workload& workload,
                                            const ScheduleOptions& options);
// `problem` with the workload's ZeRO stage and recompute policy replaced.
Problem WithTraining(const Problem& problem, const TrainingConfig& config);
// `problem` at the plan's own ZeRO stage and recompute policy (the planner's choice under auto);
// a recompute name the plan format does not know (Validate rejects it) reads as full.
Problem WithPlanTraining(const Problem& problem, const Plan& plan);

// The aggregate-compute bound (CostModel::IdealIterationSeconds) of the least work the options
// allow: without recompute when the recompute policy is auto.
double IdealIterationSeconds(const Problem& problem, const ScheduleOptions& options);

// One strategy at the problem's fixed settings. `baselines`: AllBaselines of that problem when the
// caller has already scored them (null: not scored yet).
using FixedStrategy = std::function<Result<StrategyResult>(
    const Problem&, const ScheduleOptions&, const std::vector<StrategyResult>* baselines)>;

// The best result of `run` over the open configurations, with options_considered: its own rows
// first, then the best plan of each other configuration tried (best first). options.candidates,
// when set, gets the candidate table of the configuration chosen. When no
// configuration of a search gives a plan: kInfeasible explained by ExplainInfeasible(problem,
// options), or the first other error.
Result<StrategyResult> SearchTraining(const Problem& problem, const std::string& name,
                                      const ScheduleOptions& options, const FixedStrategy& run);

}  // namespace hexiseq
