// The choice of ZeRO stage and recompute policy (training_search.h).
#include "sched/training_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "sched/parallel.h"

namespace hexiseq {
namespace {

constexpr size_t kSearchedConfigs = 2;  // configurations a search is run at, after the screen
// A plan using at least this fraction of some rank's memory is taken to be shaped by memory (as
// is one the search found while a faster candidate did not fit): a configuration that needs less
// memory may allow a faster plan than the same search found here.
constexpr double kMemoryShapedFraction = 0.9;

bool IsSearch(const std::string& name) { return name == "hexiseq" || name == "exact"; }

// Feasible first by time, then by memory (the configuration closest to fitting).
bool ScreenBefore(const StrategyResult& a, const StrategyResult& b) {
  if (a.feasible() != b.feasible()) return a.feasible();
  if (a.feasible()) return a.cost.iteration_seconds < b.cost.iteration_seconds;
  return a.cost.max_memory_fraction < b.cost.max_memory_fraction;
}

// The results of a strategy at the configurations it was run at, each with its table of
// candidates (when the options ask for one), and the first error that is not infeasibility.
struct Runs {
  std::vector<StrategyResult> results;
  std::vector<std::vector<CandidateRecord>> tables;  // tables[i]: results[i]'s candidates
  std::optional<Error> first_error;
  std::optional<StrategyResult> best_baseline;  // the best baseline scored on the way
  void Run(const FixedStrategy& run, const Problem& at, const ScheduleOptions& fixed,
           const std::vector<StrategyResult>* baselines) {
    std::vector<CandidateRecord> table;
    ScheduleOptions own = fixed;
    if (fixed.candidates) own.candidates = &table;
    Result<StrategyResult> result = run(at, own, baselines);
    if (result && !result->timed_out) {
      results.push_back(std::move(*result));
      tables.push_back(std::move(table));
    } else if (result.error().code != ErrorCode::kInfeasible && !first_error) {
      first_error = result.error();
    }
  }
  void NoteBaseline(const StrategyResult& baseline) {
    if (baseline.applicable && (!best_baseline || Better(baseline, *best_baseline)))
      best_baseline = baseline;
  }
  // The fastest feasible result so far (infinity when none is feasible).
  double BestFeasibleSeconds() const {
    double best = std::numeric_limits<double>::infinity();
    for (const StrategyResult& result : results)
      if (result.feasible()) best = std::min(best, result.cost.iteration_seconds);
    return best;
  }
};

// A configuration with the baselines scored there and the best of them.
struct Screened {
  TrainingConfig config;
  std::vector<StrategyResult> baselines;  // AllBaselines at the configuration
  StrategyResult best;                    // the best baseline (the screen's score)
};

Screened ScreenedFrom(const TrainingConfig& config, std::vector<StrategyResult> baselines) {
  Screened screened{config, std::move(baselines), {}};
  screened.best = *std::min_element(screened.baselines.begin(), screened.baselines.end(), Better);
  return screened;
}

Screened ScreenAt(const Problem& problem, const TrainingConfig& config, const Deadline& deadline,
                  int threads) {
  return ScreenedFrom(config, AllBaselines(WithTraining(problem, config), deadline, threads));
}

// A result's plan scored at `problem`'s settings (its ZeRO stage and recompute policy).
StrategyResult Rescored(const Problem& problem, const StrategyResult& result) {
  const CostModel model(problem);
  Plan plan = result.plan;
  const Plan shell = EmptyPlan(model, plan.strategy);
  plan.zero_stage = shell.zero_stage;
  plan.recompute = shell.recompute;
  plan.input_hash = shell.input_hash;
  return Score(model, std::move(plan), result.config);
}

// `baseline` (feasible or not, from the first configuration) re-scored at `at` where no plan of
// it can beat `to_beat` there; nullopt where it must be run again. At a configuration where
// plans may be faster than at the first (`faster_there`: ZeRO 1, whose whole gradients save
// ZeRO 2's per-sequence reduce-scatters) that holds where its plans take every rank and save
// less than `saving` (CostModel::WholeGradientsSavingBound: exact), or where its plan re-scored
// there fits and is no faster (exact for a baseline that picks among the same plans:
// ScreenAgainst).
std::optional<StrategyResult> RescoredIfUnbeaten(const Problem& at, const StrategyResult& baseline,
                                                 double to_beat, bool faster_there, double saving) {
  if (!baseline.feasible()) return std::nullopt;
  const double seconds = baseline.cost.iteration_seconds;
  if (!faster_there)
    return seconds >= to_beat ? std::optional(Rescored(at, baseline)) : std::nullopt;
  StrategyResult there = Rescored(at, baseline);
  const bool bounded = BaselineUsesEveryRank(baseline.strategy) && seconds - saving >= to_beat;
  if (bounded || (there.feasible() && there.cost.iteration_seconds >= to_beat)) return there;
  return std::nullopt;
}

// The baselines at another configuration, given those at the first one and the best plan found
// there (`to_beat`). A plan takes at least as long here as there (ZeRO-3's extra sync,
// recompute's extra work; TrainingSearch.PlansNeverFasterThanAtTheFirstConfiguration), so a
// baseline that was feasible there and no faster than that plan is not expected to beat it here
// either: its plan from there is only re-scored here (a seed and a floor for the search), and
// every other baseline is run again. This is exact for a baseline that picks among the same
// plans at every configuration; the data-parallel baselines' per-replica choice and hetero-ring's
// memory cap may pick other plans here, so the benches check the floor against every baseline
// run at every configuration (sched_replicas quality, bench/sched/plan_quality --diff).
Screened ScreenAgainst(const Problem& problem, const TrainingConfig& config, const Screened& first,
                       double to_beat, bool faster_there, const Deadline& deadline, int threads) {
  const Problem at = WithTraining(problem, config);
  const double saving = faster_there ? CostModel(at).WholeGradientsSavingBound() : 0;
  ScheduleOptions rerun;
  rerun.deadline = deadline;
  Screened screened{config, std::vector<StrategyResult>(first.baselines.size()), {}};
  ParallelFor(threads, first.baselines.size(), [&](size_t index) {
    const StrategyResult& baseline = first.baselines[index];
    if (!baseline.applicable) {
      screened.baselines[index] = baseline;
    } else if (auto rescored = RescoredIfUnbeaten(at, baseline, to_beat, faster_there, saving)) {
      screened.baselines[index] = std::move(*rescored);
    } else {
      screened.baselines[index] = *RunStrategy(at, baseline.strategy, rerun);
    }
  });
  screened.best = *std::min_element(screened.baselines.begin(), screened.baselines.end(), Better);
  return screened;
}

// The configurations ordered by their aggregate-compute bound, least first (stable): no plan at a
// configuration is faster than its bound.
std::vector<std::pair<TrainingConfig, double>> ByBound(const Problem& problem,
                                                       const std::vector<TrainingConfig>& configs) {
  std::vector<std::pair<TrainingConfig, double>> order;
  for (const TrainingConfig& config : configs)
    order.push_back({config, CostModel(WithTraining(problem, config)).IdealIterationSeconds()});
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  return order;
}

// Whether the search is run again at a screened configuration, given the best plan found so far
// (`to_beat`, infinity when none is feasible) and whether memory shaped it. A plan is never faster
// at another configuration than at the first, so the search there can only do better where memory
// bound the first (it lets plans fit that did not) or where one of its baselines beats the plan
// found (which then also keeps the floor).
// At a configuration with whole gradients (`faster_there`) memory cannot help, but the plan found
// (`found`) may itself be faster there: then the search is run there too.
bool WorthSearching(const Screened& screened, double to_beat, bool memory_shaped, bool faster_there,
                    const std::optional<StrategyResult>& found, const Problem& at) {
  if (!std::isfinite(to_beat)) return true;
  if (screened.best.feasible() && screened.best.cost.iteration_seconds < to_beat) return true;
  if (!faster_there) return memory_shaped;
  const StrategyResult there = Rescored(at, *found);
  return there.feasible() && there.cost.iteration_seconds < to_beat;
}

// Whether a plan may be faster at `config` than at the search's first configuration: only with
// whole gradients where the first shards them (CostModel::SyncsEverySequence).
bool FasterThere(const TrainingConfig& config, const TrainingConfig& first) {
  return config.zero_stage < first.zero_stage && first.zero_stage == kLeastMemoryAllReduceStage;
}

// A search over the open configurations (TrainingConfigs order: the first is ZeRO 2 with the
// least recompute, so every plan is fastest there but at ZeRO 1, which saves ZeRO 2's
// per-sequence reduce-scatters). First the search at the first configuration; then the
// baselines at every other configuration whose bound is below the best plan found (the others
// cannot beat it: neither the search nor a baseline there; at ZeRO 1 a baseline is re-scored
// only where ScreenAgainst's bounds allow), and the search at the best of those by best baseline
// where WorthSearching (always for the `exact` search, which reports no unfit candidates; the best
// two when the first search found no feasible plan). The best baseline over every configuration is
// therefore at a configuration searched or no faster than a plan found, so the search keeps its
// floor.
void SearchBounded(const Problem& problem, const std::vector<TrainingConfig>& configs,
                   const ScheduleOptions& fixed, const FixedStrategy& run, bool exact, Runs& runs) {
  const Deadline& deadline = fixed.deadline;
  // The first run scores the baselines there itself (the hexiseq search scores them beside its
  // replica search); a run that does not (exact) has them scored after it.
  std::vector<StrategyResult> scored;
  ScheduleOptions first_options = fixed;
  first_options.scored_baselines = &scored;
  runs.Run(run, WithTraining(problem, configs.front()), first_options, nullptr);
  const Screened first = scored.empty()
                             ? ScreenAt(problem, configs.front(), deadline, fixed.threads)
                             : ScreenedFrom(configs.front(), std::move(scored));
  runs.NoteBaseline(first.best);
  if (runs.first_error) return;  // bad options: the same error at every configuration
  const double to_beat = runs.BestFeasibleSeconds();
  // With to_beat finite the first run gave a feasible plan: the only result so far.
  const std::optional<StrategyResult> found =
      std::isfinite(to_beat) ? std::optional(runs.results.front()) : std::nullopt;
  const bool memory_shaped = found && (found->cost.max_memory_fraction >= kMemoryShapedFraction ||
                                       found->fastest_unfit_seconds < to_beat);
  std::vector<Screened> screened;
  const std::vector<TrainingConfig> others(configs.begin() + 1, configs.end());
  for (const auto& [config, bound] : ByBound(problem, others)) {
    if (deadline.Expired()) return;
    if (bound >= to_beat) continue;
    screened.push_back(ScreenAgainst(problem, config, first, to_beat,
                                     FasterThere(config, configs.front()), deadline,
                                     fixed.threads));
    runs.NoteBaseline(screened.back().best);
  }
  std::stable_sort(screened.begin(), screened.end(), [](const Screened& a, const Screened& b) {
    return ScreenBefore(a.best, b.best);
  });
  const size_t searches = std::isfinite(to_beat) ? kSearchedConfigs - 1 : kSearchedConfigs;
  size_t searched = 0;
  bool row_added = false;
  for (const Screened& candidate : screened) {
    if (searched == searches || deadline.Expired()) break;
    const Problem at = WithTraining(problem, candidate.config);
    if (exact || WorthSearching(candidate, to_beat, memory_shaped,
                                FasterThere(candidate.config, configs.front()), found, at)) {
      runs.Run(run, at, fixed, &candidate.baselines);
      ++searched;
    } else if (!row_added) {  // the option row of the best configuration not searched: the
                              // plan found, re-scored there (with its candidate table, should
                              // it win a tie on memory)
      runs.results.push_back(Rescored(at, *found));
      runs.tables.push_back(runs.tables.front());
      row_added = true;
    }
  }
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
  std::vector<int> stages = {workload.zero_stage};
  // ZeRO 2 first (SearchBounded's first configuration). With one sequence per iteration ZeRO 1
  // takes ZeRO 2's time for any plan, with more memory: not tried.
  if (options.zero_auto) {
    stages = {kLeastMemoryAllReduceStage, kShardedWeightsStage};
    if (workload.batch > 1) stages.insert(stages.begin() + 1, kWholeGradientsStage);
  }
  std::vector<Recompute> policies = {workload.recompute};
  if (options.recompute_auto)
    policies = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  std::vector<TrainingConfig> configs;
  for (int stage : stages)
    for (Recompute policy : policies) configs.push_back({stage, policy});
  return configs;
}

Problem WithTraining(const Problem& problem, const TrainingConfig& config) {
  Problem changed = problem;
  changed.workload.zero_stage = config.zero_stage;
  changed.workload.recompute = config.recompute;
  return changed;
}

Problem WithPlanTraining(const Problem& problem, const Plan& plan) {
  return WithTraining(problem,
                      {plan.zero_stage, ParseRecompute(plan.recompute).value_or(Recompute::kFull)});
}

double IdealIterationSeconds(const Problem& problem, const ScheduleOptions& options) {
  if (!options.recompute_auto) return CostModel(problem).IdealIterationSeconds();
  return CostModel(WithTraining(problem, {problem.workload.zero_stage, Recompute::kNone}))
      .IdealIterationSeconds();
}

Result<StrategyResult> SearchTraining(const Problem& problem, const std::string& name,
                                      const ScheduleOptions& options, const FixedStrategy& run) {
  const std::vector<TrainingConfig> configs = TrainingConfigs(problem.workload, options);
  ScheduleOptions fixed = options;
  fixed.zero_auto = fixed.recompute_auto = false;
  fixed.explain_infeasible = false;
  Runs runs;
  if (IsSearch(name) && configs.size() > kSearchedConfigs) {
    SearchBounded(problem, configs, fixed, run, name == "exact", runs);
  } else {
    for (const TrainingConfig& config : configs) {
      if (options.deadline.Expired()) break;
      runs.Run(run, WithTraining(problem, config), fixed, nullptr);
    }
  }
  // A search cut short is never worse than the best baseline it scored.
  if (runs.best_baseline && options.deadline.CutShort()) {
    runs.results.push_back(AsSearchResult(std::move(*runs.best_baseline), name));
    runs.tables.emplace_back();
  }
  std::vector<StrategyResult>& results = runs.results;
  if (results.empty()) {
    if (runs.first_error) return std::unexpected(*runs.first_error);
    if (options.deadline.CutShort()) return NotScored(name, options.deadline);
    return Infeasible(ExplainInfeasible(problem, options));
  }
  size_t best = 0;  // the first of the best, as the stable sort below keeps it
  for (size_t index = 1; index < results.size(); ++index)
    if (Better(results[index], results[best])) best = index;
  if (options.candidates) *options.candidates = std::move(runs.tables[best]);
  std::stable_sort(results.begin(), results.end(), Better);
  StrategyResult chosen = results.front();
  chosen.options_considered =
      OptionRows(chosen, std::vector<StrategyResult>(results.begin() + 1, results.end()));
  return chosen;
}

}  // namespace hexiseq
