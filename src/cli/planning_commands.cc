// plan, compare, validate, explain: parse, load, call the planner, print.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/cli.h"
#include "cli/inputs.h"
#include "report/training.h"
#include "sched/baselines.h"
#include "sched/parallel.h"
#include "sched/scheduler.h"
#include "sched/strategies.h"
#include "sched/training_search.h"
#include "spec/units.h"

namespace hexiseq::cli {
namespace {

struct PlanFlags {
  InputFlags in;
  std::string strategy = "hexiseq";
  std::string format = "table";
  std::string output;
  double time_limit = 0;
  int threads = DefaultPlannerThreads();
};

// A progress bar on stderr, shown only on a terminal and only once a run passes one second.
class ProgressBar {
 public:
  ProgressBar() : start_(std::chrono::steady_clock::now()), tty_(isatty(2)) {}
  ~ProgressBar() {
    if (shown_) std::fprintf(stderr, "\r%60s\r", "");
  }
  void Update(double fraction) {
    if (!tty_) return;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (elapsed < 1.0) return;
    shown_ = true;
    const int width = 30, filled = static_cast<int>(fraction * width);
    std::fprintf(stderr, "\rplanning [%s%s] %3.0f%% %.1fs", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), 100 * fraction, elapsed);
  }

 private:
  std::chrono::steady_clock::time_point start_;
  bool tty_ = false, shown_ = false;
};

// The scheduler's options from the flags, with a progress bar on a terminal.
ScheduleOptions MakeScheduleOptions(const PlanFlags& flags, const CommandDeadline& deadline,
                                    ProgressBar& bar,
                                    std::vector<CandidateRecord>* candidates = nullptr) {
  ScheduleOptions options;
  options.deadline = deadline.deadline();
  options.threads = flags.threads;
  options.progress = [&bar](double fraction) { bar.Update(fraction); };
  options.candidates = candidates;
  ApplyTrainingChoice(flags.in, options);
  return options;
}

std::string Percent(double fraction) { return Fixed(100.0 * fraction, 1) + "%"; }

// The groups table; with several replicas a column says which replica each group is in.
std::string GroupsTable(const Plan& plan, const Cluster& cluster) {
  const bool replicas = NumReplicas(plan) > 1;
  std::vector<std::string> header = {"group",  "ranks",  "devices",
                                     "tokens", "ranges", "heads per member"};
  if (replicas) header.insert(header.begin() + 1, "replica");
  std::vector<std::vector<std::string>> rows = {header};
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const PlanGroup& group = plan.groups[g];
    std::string ranks, devices, heads;
    for (size_t i = 0; i < group.members.size(); ++i) {
      const PlanMember& m = group.members[i];
      if (i) {
        ranks += ",";
        heads += ",";
      }
      ranks += std::to_string(m.rank);
      heads += std::to_string(m.heads.size());
      const std::string& d = cluster.device(m.rank).name;
      if (devices.find(d) == std::string::npos) devices += (devices.empty() ? "" : "+") + d;
    }
    if (ranks.size() > 40) ranks = ranks.substr(0, 37) + "...";
    if (heads.size() > 40) heads = heads.substr(0, 37) + "...";
    rows.push_back({std::to_string(g), ranks, devices, std::to_string(TotalTokens(group.tokens)),
                    std::to_string(group.tokens.size()), heads});
    if (replicas) rows.back().insert(rows.back().begin() + 1, std::to_string(group.replica));
  }
  return FormatTable(rows);
}

// What the strategy weighed: absent for a plan read from a file.
struct ChoiceRecord {
  bool recorded = false;
  std::vector<TrainingOption> options;
};

// `ideal_seconds`: the aggregate-compute bound of the least work the settings allowed (without
// recompute when the planner chose it).
std::string PlanSummary(const Plan& plan, const Problem& problem, const PlanCost& cost,
                        const ChoiceRecord& choice, double ideal_seconds) {
  std::string out = "strategy " + plan.strategy + " (" + plan.config + ")\n";
  out += "predicted: " + Fixed(cost.iteration_seconds, 3) + " s/iteration, " +
         Fixed(cost.tokens_per_second, 0) + " tokens/s, " +
         Percent(ideal_seconds / cost.iteration_seconds) + " of ideal, max memory " +
         Percent(cost.max_memory_fraction) + "\n";
  out += report::TrainingText(plan, cost, problem.cluster, CostModel(problem).ShardRanks(plan),
                              choice.options, choice.recorded);
  return out + "\n" + GroupsTable(plan, problem.cluster);
}

int RunPlan(const PlanFlags& f) {
  const CommandDeadline deadline(f.time_limit);
  auto problem = LoadInputs(f.in);
  if (!problem) return ReportError(problem.error());
  std::vector<CandidateRecord> candidates;
  ProgressBar bar;
  const ScheduleOptions options = MakeScheduleOptions(f, deadline, bar, &candidates);
  auto result = PlanStrategy(*problem, f.strategy, options);
  if (!result) return ReportError(result.error());
  deadline.NoteIfReached("the plan is the best found by then");
  std::string text = f.format == "json" ? PlanToJson(result->plan)
                                        : PlanSummary(result->plan, *problem, result->cost,
                                                      {true, result->options_considered},
                                                      IdealIterationSeconds(*problem, options));
  if (f.format != "json" && !candidates.empty()) {  // the table behind the decision
    std::vector<std::vector<std::string>> rows = {
        {"candidate", "feasible", "predicted s", "refined s", "max mem"}};
    for (size_t i = 0; i < candidates.size() && i < 12; ++i) {
      const CandidateRecord& c = candidates[i];
      rows.push_back({c.name, c.feasible ? "yes" : "no", Fixed(c.iteration_seconds, 3),
                      c.refined_seconds > 0 ? Fixed(c.refined_seconds, 3) : "-",
                      Percent(c.max_memory_fraction)});
    }
    text += "\ncandidates (best first, " + std::to_string(candidates.size()) + " scored):\n" +
            FormatTable(rows);
  }
  if (!f.output.empty()) {
    if (auto r = SavePlan(result->plan, f.output); !r) return ReportError(r.error());
    std::fprintf(stderr, "wrote %s\n", f.output.c_str());
    if (f.format == "json") return 0;
  }
  std::fputs(text.c_str(), stdout);
  return 0;
}

int RunCompare(const PlanFlags& f) {
  const CommandDeadline deadline(f.time_limit);
  auto loaded = LoadInputs(f.in);
  if (!loaded) return ReportError(loaded.error());
  const Problem& problem = *loaded;
  ProgressBar bar;
  auto comparison = CompareStrategies(problem, MakeScheduleOptions(f, deadline, bar));
  if (!comparison) return ReportError(comparison.error());
  deadline.NoteIfReached(
      "each row is the best that strategy found by then, and rows not scored say so");
  const std::vector<StrategyResult>& results = comparison->results;
  const double best_baseline = comparison->best_baseline_seconds;
  const double ideal = comparison->ideal_seconds;
  const bool any_feasible =
      std::any_of(results.begin(), results.end(),
                  [](const StrategyResult& r) { return r.applicable && r.feasible(); });
  // The comparison is still printed (it says why each strategy fails), but nothing fits.
  const int exit_code =
      any_feasible
          ? 0
          : ReportError(
                Error{ErrorCode::kInfeasible,
                      "infeasible: no strategy fits this workload on this cluster "
                      "(each strategy's reason is in the comparison; hint: a shorter --seq, more "
                      "memory or --recompute full)"});
  if (f.format == "json") {
    std::cout << ComparisonToJson(*comparison) << "\n";
    return exit_code;
  }
  std::vector<std::vector<std::string>> rows = {{"strategy", "config", "replicas", "left out",
                                                 "training", "feasible", "iter s", "tokens/s",
                                                 "vs best baseline", "of ideal", "max mem"}};
  std::vector<std::string> notes;
  for (const StrategyResult& r : results) {
    if (!r.applicable || r.cost.iteration_seconds <= 0) {  // not applicable, or nothing fits
      const std::string feasible = r.timed_out ? "-" : r.applicable ? "no" : "n/a";
      rows.push_back({r.strategy, "-", "-", "-", "-", feasible, "-", "-", "-", "-", "-"});
      notes.push_back(r.strategy + ": " + (r.applicable || r.timed_out ? "" : "not applicable: ") +
                      r.reason);
      continue;
    }
    rows.push_back(
        {r.strategy, r.config, report::ReplicasCell(r.plan), report::LeftOutCell(r.plan),
         report::TrainingCell(r.plan), r.feasible() ? "yes" : "no",
         Fixed(r.cost.iteration_seconds, 3), Fixed(r.cost.tokens_per_second, 0),
         best_baseline > 0 ? Fixed(best_baseline / r.cost.iteration_seconds, 3) + "x" : "-",
         Percent(ideal / r.cost.iteration_seconds), Percent(r.cost.max_memory_fraction)});
    if (!r.feasible()) notes.push_back(r.strategy + ": " + r.reason);
  }
  const Workload& w = problem.workload;
  std::printf("cluster %s: %d ranks; model %s; seq %s x batch %d; recompute %s; zero %s\n",
              problem.cluster.name.c_str(), problem.cluster.num_ranks(), problem.model.name.c_str(),
              FormatTokens(w.seq_len).c_str(), w.batch,
              f.in.recompute == "auto" ? "auto" : RecomputeName(w.recompute),
              f.in.zero == "auto" ? "auto" : std::to_string(w.zero_stage).c_str());
  std::printf("ideal (aggregate-compute bound): %.3f s/iteration, %.0f tokens/s\n\n", ideal,
              comparison->ideal_tokens_per_second);
  std::fputs(FormatTable(rows).c_str(), stdout);
  for (const std::string& n : notes) std::printf("  %s\n", n.c_str());
  return exit_code;
}

Result<std::pair<Plan, Problem>> LoadPlanAndInputs(const std::string& path, const InputFlags& in) {
  auto plan = LoadPlan(path);
  if (!plan) return std::unexpected(plan.error());
  auto problem = LoadInputs(in, &*plan);
  if (!problem) return std::unexpected(problem.error());
  if (auto v = Validate(*plan, problem->cluster, problem->model); !v)
    return std::unexpected(Error{v.error().code, path + ": " + v.error().message});
  return std::pair{std::move(*plan), std::move(*problem)};
}

int RunValidate(const std::string& path, const InputFlags& in) {
  auto loaded = LoadPlanAndInputs(path, in);
  if (!loaded) return ReportError(loaded.error());
  const Plan& plan = loaded->first;
  const PlanCost cost = Evaluate(loaded->second, plan);
  std::printf("%s: valid %s plan: %zu groups over %d ranks, %s tokens, %d heads\n", path.c_str(),
              plan.strategy.c_str(), plan.groups.size(), plan.num_ranks,
              FormatTokens(plan.seq_len).c_str(), plan.num_heads);
  std::printf("replicas: %s; left out: %s; %s\n", report::ReplicasCell(plan).c_str(),
              report::LeftOutCell(plan).c_str(), report::TrainingCell(plan).c_str());
  if (!cost.feasible) {
    std::fprintf(stderr, "hexiseq: %s: infeasible: %s\n", path.c_str(),
                 cost.infeasible_reason.c_str());
    return 1;
  }
  return 0;
}

// Per-rank figures, group by group (the group column counts over the whole plan), then a row per
// left-out rank; with several replicas a column says which replica each rank is in.
std::string RankBreakdownTable(const Plan& plan, const Cluster& cluster, const PlanCost& cost) {
  const bool replicas = NumReplicas(plan) > 1;
  std::vector<std::string> header = {"rank",        "device",         "group",       "tokens",
                                     "heads",       "linear s",       "attention s", "all-to-all s",
                                     "ring comm s", "ring exposed s", "memory",      "capacity",
                                     "mem %"};
  if (replicas) header.insert(header.begin() + 2, "replica");
  std::vector<std::vector<std::string>> rows = {header};
  for (size_t g = 0; g < plan.groups.size(); ++g)
    for (const PlanMember& m : plan.groups[g].members) {
      const RankCost& rc = cost.ranks[m.rank];
      rows.push_back({std::to_string(m.rank), cluster.device(m.rank).name, std::to_string(g),
                      std::to_string(TotalTokens(m.tokens)), std::to_string(m.heads.size()),
                      Fixed(rc.linear_seconds, 3), Fixed(rc.attention_seconds, 3),
                      Fixed(rc.all_to_all_seconds, 3), Fixed(rc.ring_comm_seconds, 3),
                      Fixed(rc.ring_exposed_seconds, 3), FormatBytes(rc.memory_bytes),
                      FormatBytes(rc.memory_capacity_bytes),
                      Percent(rc.memory_bytes / rc.memory_capacity_bytes)});
      if (replicas)
        rows.back().insert(rows.back().begin() + 2, std::to_string(plan.groups[g].replica));
    }
  for (const int rank : plan.left_out) {
    std::vector<std::string> row(header.size(), "-");
    row[0] = std::to_string(rank);
    row[1] = cluster.device(rank).name;
    row[replicas ? 3 : 2] = "left out";  // the group column
    rows.push_back(std::move(row));
  }
  return FormatTable(rows);
}

int RunExplain(const std::string& path, const InputFlags& in, const std::string& format) {
  auto loaded = LoadPlanAndInputs(path, in);
  if (!loaded) return ReportError(loaded.error());
  Plan& plan = loaded->first;
  const Problem& problem = loaded->second;
  const PlanCost cost = Evaluate(problem, plan);
  if (format == "json") {  // the plan with the cost model's prediction on these inputs
    AttachPrediction(plan, cost);
    std::fputs(PlanToJson(plan).c_str(), stdout);
    return cost.feasible ? 0 : 1;
  }
  std::fputs(
      PlanSummary(plan, problem, cost, {}, CostModel(problem).IdealIterationSeconds()).c_str(),
      stdout);
  std::printf(
      "\nper iteration%s: local (linear + all-to-all) %.3f s, ring attention %.3f s, "
      "recompute %.3f s, LM head %.3f s, exposed gradient sync %.3f s, optimizer step %.3f s\n",
      NumReplicas(plan) > 1 ? " (phases of the slowest replica)" : "", cost.local_seconds,
      cost.ring_seconds, cost.recompute_seconds, cost.head_seconds, cost.grad_sync_seconds,
      cost.optimizer_seconds);
  std::printf("\n%s", RankBreakdownTable(plan, problem.cluster, cost).c_str());
  if (cost.bottleneck_rank >= 0)
    std::printf("\nbottleneck: rank %d (%s), phase: %s\n", cost.bottleneck_rank,
                problem.cluster.device(cost.bottleneck_rank).name.c_str(),
                cost.bottleneck_phase.c_str());
  if (!cost.feasible) std::printf("infeasible: %s\n", cost.infeasible_reason.c_str());
  return cost.feasible ? 0 : 1;
}

}  // namespace

void AddPlanningCommands(CLI::App& app, Actions& actions) {
  static PlanFlags plan_flags, compare_flags;
  static std::string validate_plan, explain_plan, explain_format = "table";
  static InputFlags validate_in, explain_in;

  CLI::App* plan = app.add_subcommand("plan", "Plan a cluster + model + sequence");
  AddInputFlags(plan, plan_flags.in, true);
  static const std::string strategy_help =
      "hexiseq|exact|ring|ulysses|usp|hetero-ring|subset. exact: the cost model's optimum, on "
      "clusters of at most " +
      std::to_string(kExactMaxRanks) +
      " GPUs, over every set of ranks left out, partition of the rest into data-parallel "
      "replicas and batch split, and per replica every grouping (one group may idle), group "
      "order, member order and whole-head split, at the chosen ZeRO stage and recompute policy; "
      "group tokens in multiples of S/" +
      std::to_string(kExactGroupSteps) +
      " (mirrored front and back chunks), member tokens in multiples of 1/" +
      std::to_string(kExactMemberSteps) +
      " of the group's; then refined by 1-token descent (docs/performance.md, Scheduler)";
  plan->add_option("--strategy", plan_flags.strategy, strategy_help)
      ->check(
          CLI::IsMember({"hexiseq", "exact", "ring", "ulysses", "usp", "hetero-ring", "subset"}));
  plan->add_option("--format", plan_flags.format, "table|json")
      ->check(CLI::IsMember({"table", "json"}));
  plan->add_option("-o,--output", plan_flags.output, "Write the plan JSON to this file");
  plan->add_option("--time-limit", plan_flags.time_limit,
                   "Wall-clock limit in seconds for the whole command (0: none); when reached, "
                   "the best plan found so far is returned and stderr says so")
      ->check(TimeLimitRange());
  plan->add_option(
          "--threads", plan_flags.threads,
          "Planner threads (default: the machine's hardware threads, at most 8; results do "
          "not depend on it)")
      ->check(CLI::Range(1, 256));
  actions[plan] = [] { return RunPlan(plan_flags); };

  CLI::App* compare = app.add_subcommand("compare", "Every strategy side by side");
  AddInputFlags(compare, compare_flags.in, true);
  compare
      ->add_option("--time-limit", compare_flags.time_limit,
                   "Wall-clock limit in seconds for the whole comparison (0: none); when "
                   "reached, each strategy keeps the best it found and stderr says so")
      ->check(TimeLimitRange());
  compare
      ->add_option("--threads", compare_flags.threads,
                   "Planner threads (default: the machine's hardware threads, at most 8)")
      ->check(CLI::Range(1, 256));
  compare->add_option("--format", compare_flags.format, "table|json")
      ->check(CLI::IsMember({"table", "json"}));
  actions[compare] = [] { return RunCompare(compare_flags); };

  CLI::App* validate = app.add_subcommand("validate", "Check a plan's invariants");
  validate->add_option("--plan", validate_plan, "Plan JSON file")->required();
  AddInputFlags(validate, validate_in, false);
  actions[validate] = [] { return RunValidate(validate_plan, validate_in); };

  CLI::App* explain = app.add_subcommand("explain", "Per-rank breakdown and the bottleneck");
  explain->add_option("--plan", explain_plan, "Plan JSON file")->required();
  AddInputFlags(explain, explain_in, false);
  explain
      ->add_option("--format", explain_format,
                   "table|json (json: the plan with `predicted` re-evaluated on these inputs)")
      ->check(CLI::IsMember({"table", "json"}));
  actions[explain] = [] { return RunExplain(explain_plan, explain_in, explain_format); };
}

}  // namespace hexiseq::cli
