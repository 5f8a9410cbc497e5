// `--zero auto` and `--recompute auto`: the planner tries the ZeRO stages and recompute policies
// the options leave open and keeps the fastest feasible plan. ZeRO 0 is not tried: the cost
// model charges it no less time than stage 1 for any plan (its all-reduce behind the backward
// window alone: CostModel::StageExposedSyncSeconds, plus the unsharded optimizer step) and more
// memory (TrainingSearch.ZeroStageZeroCostsNoLessThanStageOne). Stages 1 and 2 differ where a
// replica takes several sequences: stage 1 keeps whole gradients and syncs once, stage 2 keeps a
// shard and reduce-scatters every sequence's (CostModel::SyncsEverySequence): less memory, more
// sync. With one sequence per replica they take the same time, so with a batch of one stage 1
// is not tried. Cheap strategies (the
// baselines) are run at every configuration. The searches (hexiseq, exact), when more than two
// configurations are open, are run at the first (ZeRO 2 without recompute: every plan is fastest
// there but at ZeRO 1, where the per-sequence reduce-scatters are saved; there the baselines are
// always run again, and the search runs where the plan found is faster and fits), then at the
// best other configuration by its best baseline; a configuration whose
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

// The stages `--zero auto` tries: whole gradients synced once per iteration, gradients sharded
// (synced per sequence), and weights sharded too (ZeRO-3).
inline constexpr int kWholeGradientsStage = 1;
inline constexpr int kLeastMemoryAllReduceStage = 2;
inline constexpr int kShardedWeightsStage = 3;

struct TrainingConfig {
  int zero_stage = 3;
  Recompute recompute = Recompute::kFull;
};

// The configurations the options leave open (a fixed setting is the workload's), in a fixed
// order: the least work first (ZeRO 1 before 2, 3; each with no recompute, selective, full;
// stage 1 only with a batch above one).
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
