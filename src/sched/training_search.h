// `--zero auto` and `--recompute auto`: the planner tries every ZeRO stage and recompute policy
// the options leave open and keeps the fastest feasible plan. Cheap strategies (the baselines)
// are run at every configuration; the searches (hexiseq, exact) are run only at the few
// configurations whose best baseline is fastest (the screen: a feasible baseline first, by
// iteration time; then by memory), which keeps their floor: the best baseline over every
// configuration is among those screened first. Ignores nothing else: each configuration is a
// full re-plan scored by the cost model.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sched/strategies.h"

namespace hexiseq {

struct TrainingConfig {
  int zero_stage = 3;
  Recompute recompute = Recompute::kFull;
};

// The configurations the options leave open (a fixed setting is the workload's), in a fixed
// order: the least memory first (ZeRO 3 before 2, 1, 0; full recompute before selective, none).
std::vector<TrainingConfig> TrainingConfigs(const Workload& workload,
                                            const ScheduleOptions& options);
// `model` with the workload's ZeRO stage and recompute policy replaced.
CostModel WithTraining(const CostModel& model, const TrainingConfig& config);

// The aggregate-compute bound (CostModel::IdealIterationSeconds) of the least work the options
// allow: without recompute when the recompute policy is auto.
double IdealIterationSeconds(const CostModel& model, const ScheduleOptions& options);

// One strategy at the model's fixed settings.
using FixedStrategy =
    std::function<Result<StrategyResult>(const CostModel&, const ScheduleOptions&)>;

// The best result of `run` over the open configurations, with options_considered: its own rows
// first, then the best plan of each other configuration tried (best first). When no
// configuration of a search gives a plan: kInfeasible explained by ExplainInfeasible(model,
// options), or the first other error.
Result<StrategyResult> SearchTraining(const CostModel& model, const std::string& name,
                                      const ScheduleOptions& options, const FixedStrategy& run);

}  // namespace hexiseq
