// Strategy dispatch by name, the plan-or-error wrapper, and the comparison of all strategies.
#include "sched/strategies.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "sched/scheduler_internal.h"
#include "sched/training_search.h"

namespace hexiseq {

const std::vector<std::string>& StrategyNames() {
  static const std::vector<std::string> names = {"hexiseq", "exact",       "ring",  "ulysses",
                                                 "usp",     "hetero-ring", "subset"};
  return names;
}

namespace {

// One strategy at the workload's ZeRO stage and recompute policy (`baselines`: AllBaselines of
// `problem` when already scored, else null).
Result<StrategyResult> RunFixed(const Problem& problem, const std::string& name,
                                const ScheduleOptions& options,
                                const std::vector<StrategyResult>* baselines = nullptr) {
  if (name == "hexiseq") return sched_internal::ScheduleWithBaselines(problem, options, baselines);
  if (name == "exact") return ExactSearch(problem, options);
  if (name == "ring") return RingBaseline(problem, options.deadline);
  if (name == "ulysses") return UlyssesBaseline(problem, options.deadline);
  if (name == "usp") return UspBaseline(problem, options.deadline);
  if (name == "hetero-ring") return HeteroRingBaseline(problem, options.deadline);
  if (name == "subset") return SubsetBaseline(problem, options.deadline);
  return InvalidArgument("--strategy = \"" + name +
                         "\": unknown (rule: one of hexiseq, exact, ring, ulysses, usp, "
                         "hetero-ring, subset)");
}

}  // namespace

Result<StrategyResult> RunStrategy(const Problem& problem, const std::string& name,
                                   const ScheduleOptions& options) {
  const auto& names = StrategyNames();
  if (!(options.zero_auto || options.recompute_auto) ||
      std::find(names.begin(), names.end(), name) == names.end())
    return RunFixed(problem, name, options);
  return SearchTraining(problem, name, options,
                        [&name](const Problem& fixed_problem, const ScheduleOptions& fixed,
                                const std::vector<StrategyResult>* baselines) {
                          return RunFixed(fixed_problem, name, fixed, baselines);
                        });
}

Result<StrategyResult> PlanStrategy(const Problem& problem, const std::string& name,
                                    const ScheduleOptions& options) {
  auto result = RunStrategy(problem, name, options);
  if (!result) return result;
  if (result->timed_out)
    return Infeasible("strategy " + name + ": no plan was found within the time limit (" +
                      result->reason + ")");
  result->plan.time_limit_reached = options.deadline.CutShort();
  if (!result->applicable) {
    return NotSupported("strategy " + name + " is not applicable: " + result->reason);
  }
  if (!result->cost.feasible && options.deadline.CutShort())
    return Infeasible("strategy " + name +
                      ": no plan that fits was found within the time limit of " +
                      LimitText(options.deadline) + " (the best found: " + result->reason +
                      "; hint: raise --time-limit, 0 means none)");
  if (!result->cost.feasible) {
    std::string why = ExplainInfeasible(problem, options);
    if (why.empty()) why = "infeasible: " + result->cost.infeasible_reason;
    return Infeasible(why + " (strategy " + name +
                      "; hint: the hexiseq strategy searches every grouping, try --strategy "
                      "hexiseq)");
  }
  return result;
}

Result<Comparison> CompareStrategies(const Problem& problem, const ScheduleOptions& options) {
  Comparison comparison;
  const Deadline& deadline = options.deadline;
  for (const char* name : {"ring", "ulysses", "usp", "hetero-ring", "subset"}) {
    if (deadline.Expired()) {
      comparison.results.push_back(NotScored(name, deadline));
      continue;
    }
    auto baseline = RunStrategy(problem, name, options);
    if (!baseline) return std::unexpected(baseline.error());
    comparison.results.push_back(std::move(*baseline));
  }
  for (const StrategyResult& r : comparison.results) {
    if (r.feasible() && (comparison.best_baseline_seconds == 0 ||
                         r.cost.iteration_seconds < comparison.best_baseline_seconds)) {
      comparison.best_baseline_seconds = r.cost.iteration_seconds;
    }
  }
  auto hex = deadline.Expired() ? Result<StrategyResult>(NotScored("hexiseq", deadline))
                                : RunStrategy(problem, "hexiseq", options);
  if (hex) {
    comparison.results.push_back(*hex);
  } else if (hex.error().code == ErrorCode::kInfeasible) {
    StrategyResult none;
    none.strategy = "hexiseq";
    none.config = "-";
    none.cost.feasible = false;
    none.reason = hex.error().message;
    comparison.results.push_back(none);
  } else {
    return std::unexpected(hex.error());
  }
  if (problem.cluster.num_ranks() <= kExactMaxRanks) {  // small enough for the exact search
    auto exact = deadline.Expired() ? Result<StrategyResult>(NotScored("exact", deadline))
                                    : RunStrategy(problem, "exact", options);
    if (exact) comparison.results.push_back(*exact);
  }
  comparison.time_limit_reached = deadline.CutShort();
  comparison.ideal_seconds = IdealIterationSeconds(problem, options);
  comparison.ideal_tokens_per_second = problem.workload.batch *
                                       static_cast<double>(problem.workload.seq_len) /
                                       comparison.ideal_seconds;
  return comparison;
}

std::string ComparisonToJson(const Comparison& comparison, int indent) {
  nlohmann::json j;
  j["ideal_tokens_per_second"] = comparison.ideal_tokens_per_second;
  j["time_limit_reached"] = comparison.time_limit_reached;
  j["strategies"] = nlohmann::json::array();
  const double best = comparison.best_baseline_seconds;
  for (const StrategyResult& r : comparison.results) {
    nlohmann::json s;
    s["strategy"] = r.strategy;
    s["config"] = r.config;
    s["feasible"] = r.feasible();
    s["reason"] = r.reason;
    const bool scored = r.applicable && r.cost.iteration_seconds > 0;
    const double seconds = r.cost.iteration_seconds;
    s["iteration_seconds"] = scored ? nlohmann::json(seconds) : nullptr;
    s["tokens_per_second"] = scored ? nlohmann::json(r.cost.tokens_per_second) : nullptr;
    s["fraction_of_ideal"] = scored ? nlohmann::json(comparison.ideal_seconds / seconds) : nullptr;
    s["speedup_over_best_baseline"] = scored && best > 0 ? nlohmann::json(best / seconds) : nullptr;
    s["max_memory_fraction"] = scored ? nlohmann::json(r.cost.max_memory_fraction) : nullptr;
    // The training configuration: data-parallel replicas and their sequences, left-out ranks.
    nlohmann::json sequences = nlohmann::json::array();
    for (int replica = 0; scored && replica < NumReplicas(r.plan); ++replica)
      sequences.push_back(ReplicaSequences(r.plan, replica));
    s["replicas"] = scored ? nlohmann::json(NumReplicas(r.plan)) : nullptr;
    s["replica_sequences"] = scored ? sequences : nullptr;
    s["left_out"] = scored ? nlohmann::json(r.plan.left_out) : nullptr;
    s["zero_stage"] = scored ? nlohmann::json(r.plan.zero_stage) : nullptr;
    s["recompute"] = scored ? nlohmann::json(r.plan.recompute) : nullptr;
    j["strategies"].push_back(std::move(s));
  }
  return j.dump(indent);
}

}  // namespace hexiseq
