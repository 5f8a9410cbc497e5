// The choice of ZeRO stage and recompute policy (training_search.h).
#include "sched/training_search.h"

#include <algorithm>
#include <optional>

namespace hexiseq {
namespace {

constexpr size_t kSearchedConfigs = 2;  // configurations a search is run at, after the screen

bool IsSearch(const std::string& name) { return name == "hexiseq" || name == "exact"; }

// The best baseline of a configuration (the screen's score).
StrategyResult BestBaseline(const CostModel& model, const Deadline& deadline) {
  std::vector<StrategyResult> baselines = AllBaselines(model, deadline);
  return *std::min_element(baselines.begin(), baselines.end(), Better);
}

// Feasible first by time, then by memory (the configuration closest to fitting).
bool ScreenBefore(const StrategyResult& a, const StrategyResult& b) {
  if (a.feasible() != b.feasible()) return a.feasible();
  if (a.feasible()) return a.cost.iteration_seconds < b.cost.iteration_seconds;
  return a.cost.max_memory_fraction < b.cost.max_memory_fraction;
}

struct Screened {
  std::vector<TrainingConfig> kept;             // the configurations to search, best first
  std::optional<StrategyResult> best_baseline;  // the screen's best plan (none: nothing scored)
};

// The configurations a search is run at: the best few by their best baseline. Configurations
// the deadline stopped before a baseline was scored are left out.
Screened Screen(const CostModel& model, const std::vector<TrainingConfig>& configs,
                const Deadline& deadline) {
  std::vector<std::pair<StrategyResult, size_t>> scored;
  for (size_t index = 0; index < configs.size() && !deadline.Expired(); ++index) {
    StrategyResult best = BestBaseline(WithTraining(model, configs[index]), deadline);
    if (!best.timed_out) scored.push_back({std::move(best), index});
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return ScreenBefore(a.first, b.first); });
  Screened screened;
  for (size_t rank = 0; rank < std::min(kSearchedConfigs, scored.size()); ++rank)
    screened.kept.push_back(configs[scored[rank].second]);
  if (!scored.empty() && scored.front().first.applicable)
    screened.best_baseline = scored.front().first;
  return screened;
}

// Rows of the chosen result first, then the best of every other configuration, best first.
std::vector<TrainingOption> OptionRows(const StrategyResult& chosen,
                                       const std::vector<StrategyResult>& others) {
  std::vector<TrainingOption> rows = chosen.options_considered;
  if (rows.empty()) rows.push_back(OptionOf(chosen));
  std::vector<TrainingOption> rest;
  for (const StrategyResult& other : others) rest.push_back(OptionOf(other));
  std::stable_sort(rest.begin(), rest.end(), [](const TrainingOption& a, const TrainingOption& b) {
    if (a.feasible != b.feasible) return a.feasible;
    return a.iteration_seconds < b.iteration_seconds;
  });
  rows.insert(rows.end(), rest.begin(), rest.end());
  return rows;
}

}  // namespace

std::vector<TrainingConfig> TrainingConfigs(const Workload& workload,
                                            const ScheduleOptions& options) {
  // The settings that need the least memory first: a search the deadline cuts short has then
  // tried the configurations most likely to fit.
  std::vector<int> stages = {workload.zero_stage};
  if (options.zero_auto) stages = {3, 2, 1, 0};
  std::vector<Recompute> policies = {workload.recompute};
  if (options.recompute_auto)
    policies = {Recompute::kFull, Recompute::kSelective, Recompute::kNone};
  std::vector<TrainingConfig> configs;
  for (int stage : stages)
    for (Recompute policy : policies) configs.push_back({stage, policy});
  return configs;
}

CostModel WithTraining(const CostModel& model, const TrainingConfig& config) {
  Workload workload = model.workload();
  workload.zero_stage = config.zero_stage;
  workload.recompute = config.recompute;
  return CostModel(model.cluster(), model.model(), workload, model.constants());
}

double IdealIterationSeconds(const CostModel& model, const ScheduleOptions& options) {
  if (!options.recompute_auto) return model.IdealIterationSeconds();
  return WithTraining(model, {model.workload().zero_stage, Recompute::kNone})
      .IdealIterationSeconds();
}

Result<StrategyResult> SearchTraining(const CostModel& model, const std::string& name,
                                      const ScheduleOptions& options, const FixedStrategy& run) {
  const Deadline& deadline = options.deadline;
  std::vector<TrainingConfig> configs = TrainingConfigs(model.workload(), options);
  std::optional<StrategyResult> screened_baseline;
  if (IsSearch(name) && configs.size() > kSearchedConfigs) {
    Screened screened = Screen(model, configs, deadline);
    configs = std::move(screened.kept);
    screened_baseline = std::move(screened.best_baseline);
  }
  ScheduleOptions fixed = options;
  fixed.zero_auto = fixed.recompute_auto = false;
  fixed.explain_infeasible = false;
  std::vector<StrategyResult> results;
  std::optional<Error> first_error;
  for (const TrainingConfig& config : configs) {
    if (deadline.Expired()) break;
    auto result = run(WithTraining(model, config), fixed);
    if (result && !result->timed_out) {
      results.push_back(std::move(*result));
    } else if (!result && result.error().code != ErrorCode::kInfeasible && !first_error) {
      first_error = result.error();
    }
  }
  // A search cut short is never worse than the best baseline it screened.
  if (screened_baseline && deadline.CutShort())
    results.push_back(AsSearchResult(std::move(*screened_baseline), name));
  if (results.empty()) {
    if (first_error) return std::unexpected(*first_error);
    if (deadline.CutShort()) return NotScored(name, deadline);
    return Infeasible(ExplainInfeasible(model, options));
  }
  std::stable_sort(results.begin(), results.end(), Better);
  StrategyResult chosen = results.front();
  chosen.options_considered =
      OptionRows(chosen, std::vector<StrategyResult>(results.begin() + 1, results.end()));
  return chosen;
}

}  // namespace hexiseq
