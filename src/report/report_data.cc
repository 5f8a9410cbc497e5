// Gathers what the report shows: every strategy scored by the cost model (as `hexiseq compare`),
// the plan shown (given, or the scheduler's) with its breakdown, and its simulated layer.
#include <chrono>

#include "report/report.h"
#include "report/training.h"
#include "sched/baselines.h"
#include "sched/scheduler.h"

namespace hexiseq::report {
namespace {

StrategyRow RowOf(const StrategyResult& result, double planning_seconds) {
  StrategyRow row;
  row.strategy = result.strategy;
  row.config = result.config;
  row.applicable = result.applicable;
  row.feasible = result.feasible();
  row.reason = result.reason.empty() ? result.cost.infeasible_reason : result.reason;
  if (result.applicable && result.cost.iteration_seconds > 0) {
    row.iteration_seconds = result.cost.iteration_seconds;
    row.tokens_per_second = result.cost.tokens_per_second;
    row.max_memory_fraction = result.cost.max_memory_fraction;
    row.replicas = ReplicasCell(result.plan);
    row.left_out = LeftOutCell(result.plan);
    row.training = TrainingCell(result.plan);
  }
  row.planning_seconds = planning_seconds;
  return row;
}

// Runs `plan` and returns its result with the wall-clock seconds it took.
template <class F>
auto Timed(F&& plan) {
  const auto start = std::chrono::steady_clock::now();
  auto result = plan();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::pair{std::move(result), seconds};
}

// A row for a scheduler run that found no plan (the error says why).
StrategyRow FailedRow(const std::string& strategy, const Error& error, double seconds) {
  StrategyRow row;
  row.strategy = strategy;
  row.config = "-";
  row.applicable = error.code != ErrorCode::kNotSupported;
  row.reason = error.message;
  row.planning_seconds = seconds;
  return row;
}

void AddBaselines(const CostModel& model, ReportData& data) {
  using Baseline = StrategyResult (*)(const CostModel&);
  for (Baseline baseline :
       {RingBaseline, UlyssesBaseline, UspBaseline, HeteroRingBaseline, SubsetBaseline}) {
    auto [result, seconds] = Timed([&] { return baseline(model); });
    data.strategies.push_back(RowOf(result, seconds));
    const StrategyRow& row = data.strategies.back();
    if (row.feasible &&
        (data.best_baseline_seconds == 0 || row.iteration_seconds < data.best_baseline_seconds)) {
      data.best_baseline_seconds = row.iteration_seconds;
      data.best_baseline = row.strategy;
    }
  }
}

// The scheduler (and the exact search on small clusters); returns the scheduler's plan, if any.
std::optional<StrategyResult> AddSearches(const CostModel& model, const ReportOptions& options,
                                          ReportData& data) {
  ScheduleOptions schedule;
  schedule.time_limit_seconds = options.time_limit_seconds;
  schedule.threads = options.threads;
  auto [scheduled, seconds] = Timed([&] { return Schedule(model, schedule); });
  std::optional<StrategyResult> chosen;
  if (scheduled) {
    data.strategies.push_back(RowOf(*scheduled, seconds));
    chosen = *scheduled;
  } else {
    data.strategies.push_back(FailedRow("hexiseq", scheduled.error(), seconds));
    data.no_plan_reason = scheduled.error().message;
  }
  data.planning_seconds = seconds;
  if (options.exact_search && model.cluster().num_ranks() <= kExactMaxRanks) {
    auto [exact, exact_seconds] = Timed([&] { return ExactSearch(model, schedule); });
    if (exact) data.strategies.push_back(RowOf(*exact, exact_seconds));
  }
  return chosen;
}

void Simulate(const CostModel& model, ReportData& data) {
  sim::SimOptions options;
  options.keep_timeline = true;
  auto simulated = sim::Simulate(*data.plan, model, options);
  if (simulated) {
    data.simulation = std::move(*simulated);
  } else {
    data.simulation_error = simulated.error().message;
  }
}

}  // namespace

Result<ReportData> BuildReport(const CostModel& model, const std::optional<Plan>& plan,
                               const ReportOptions& options) {
  if (plan)
    if (auto valid = Validate(*plan, model.cluster(), model.model()); !valid)
      return std::unexpected(valid.error());
  ReportData data;
  data.cluster = model.cluster();
  data.model = model.model();
  data.workload = model.workload();
  data.ideal_tokens_per_second = model.IdealTokensPerSecond();
  data.ideal_iteration_seconds = model.IdealIterationSeconds();
  AddBaselines(model, data);
  std::optional<StrategyResult> scheduled = AddSearches(model, options, data);
  if (plan) {
    data.plan = *plan;
    data.cost = model.Evaluate(*plan);
    data.plan_source = "a given plan";
    data.no_plan_reason.clear();
  } else if (scheduled) {
    data.plan = scheduled->plan;
    data.cost = scheduled->cost;
    data.options_recorded = true;
    data.options = scheduled->options_considered;
    data.plan_source = "the hexiseq scheduler";
  }
  if (!data.plan) return data;
  data.shard_ranks = model.ShardRanks(*data.plan);
  const int ranks = model.cluster().num_ranks();
  if (options.simulate == SimulatePolicy::kNever) {
    data.simulation_error = "not simulated (--simulate never)";
  } else if (options.simulate == SimulatePolicy::kAuto && ranks > kMaxSimulatedRanks) {
    data.simulation_error = "not simulated: " + std::to_string(ranks) + " ranks is more than the " +
                            std::to_string(kMaxSimulatedRanks) +
                            " the report simulates by default, since the simulator's time grows "
                            "quickly with the ranks (hint: --simulate always, or hexiseq "
                            "simulate --trace for a Perfetto timeline)";
  } else {
    Simulate(model, data);
  }
  return data;
}

}  // namespace hexiseq::report
