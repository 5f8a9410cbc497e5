// Gathers what the report shows: every strategy scored by the cost model (as `hexiseq compare`),
// the plan shown (given, or the scheduler's) with its breakdown, and its simulated layer.
#include <chrono>

#include "report/report.h"
#include "report/training.h"
#include "sched/baselines.h"
#include "sched/scheduler.h"
#include "sched/strategies.h"
#include "sched/training_search.h"

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

// The scheduler's options for the report's searches.
ScheduleOptions SearchOptions(const ReportOptions& options) {
  ScheduleOptions schedule;
  schedule.deadline = options.deadline;
  schedule.threads = options.threads;
  schedule.zero_auto = options.zero_auto;
  schedule.recompute_auto = options.recompute_auto;
  return schedule;
}

// One strategy through RunStrategy (training settings searched where auto), as a row.
std::optional<StrategyResult> AddStrategy(const Problem& problem, const std::string& name,
                                          const ScheduleOptions& schedule, ReportData& data) {
  auto [result, seconds] = Timed([&] { return RunStrategy(problem, name, schedule); });
  if (!result) {
    data.strategies.push_back(FailedRow(name, result.error(), seconds));
    return std::nullopt;
  }
  data.strategies.push_back(RowOf(*result, seconds));
  return *result;
}

void AddBaselines(const Problem& problem, const ScheduleOptions& schedule, ReportData& data) {
  for (const char* name : {"ring", "ulysses", "usp", "hetero-ring", "subset"}) {
    AddStrategy(problem, name, schedule, data);
    const StrategyRow& row = data.strategies.back();
    if (row.feasible &&
        (data.best_baseline_seconds == 0 || row.iteration_seconds < data.best_baseline_seconds)) {
      data.best_baseline_seconds = row.iteration_seconds;
      data.best_baseline = row.strategy;
    }
  }
}

// The scheduler (and the exact search on small clusters); returns the scheduler's plan, if any.
std::optional<StrategyResult> AddSearches(const Problem& problem, const ReportOptions& options,
                                          const ScheduleOptions& schedule, ReportData& data) {
  std::optional<StrategyResult> chosen = AddStrategy(problem, "hexiseq", schedule, data);
  data.planning_seconds = data.strategies.back().planning_seconds;
  if (!chosen) data.no_plan_reason = data.strategies.back().reason;
  if (options.exact_search && problem.cluster.num_ranks() <= kExactMaxRanks)
    AddStrategy(problem, "exact", schedule, data);
  return chosen;
}

void Simulate(const Problem& problem, ReportData& data) {
  sim::SimOptions options;
  options.keep_timeline = true;
  auto simulated = sim::Simulate(*data.plan, problem, options);
  if (simulated) {
    data.simulation = std::move(*simulated);
  } else {
    data.simulation_error = simulated.error().message;
  }
}

}  // namespace

Result<ReportData> BuildReport(const Problem& problem, const std::optional<Plan>& plan,
                               const ReportOptions& options) {
  if (plan)
    if (auto valid = Validate(*plan, problem.cluster, problem.model); !valid)
      return std::unexpected(valid.error());
  ReportData data;
  data.cluster = problem.cluster;
  data.model = problem.model;
  data.workload = problem.workload;
  const ScheduleOptions schedule = SearchOptions(options);
  data.ideal_iteration_seconds = IdealIterationSeconds(problem, schedule);
  data.ideal_tokens_per_second = problem.workload.batch *
                                 static_cast<double>(problem.workload.seq_len) /
                                 data.ideal_iteration_seconds;
  AddBaselines(problem, schedule, data);
  std::optional<StrategyResult> scheduled = AddSearches(problem, options, schedule, data);
  data.time_limit_reached = options.deadline.CutShort();
  if (plan) {
    data.plan = *plan;
    data.cost = Evaluate(problem, *plan);
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
  // The plan's own training settings (the planner's choice under auto) for what follows.
  const Problem plan_problem = WithPlanTraining(problem, *data.plan);
  data.workload = plan_problem.workload;
  data.shard_ranks = CostModel(plan_problem).ShardRanks(*data.plan);
  const int ranks = problem.cluster.num_ranks();
  if (options.simulate == SimulatePolicy::kNever) {
    data.simulation_error = "not simulated (--simulate never)";
  } else if (options.deadline.Expired()) {
    data.simulation_error = "not simulated: the time limit was reached (hint: raise --time-limit)";
  } else if (options.simulate == SimulatePolicy::kAuto && ranks > kMaxSimulatedRanks) {
    data.simulation_error = "not simulated: " + std::to_string(ranks) + " ranks is more than the " +
                            std::to_string(kMaxSimulatedRanks) +
                            " the report simulates by default, since the simulator's time grows "
                            "quickly with the ranks (hint: --simulate always, or hexiseq "
                            "simulate --trace for a Perfetto timeline)";
  } else {
    Simulate(plan_problem, data);
  }
  return data;
}

}  // namespace hexiseq::report
