// `hexiseq report`: plan (or load --plan), score every strategy, simulate, and write one
// self-contained HTML page, or with --format svg one figure (--figure
// plan-map|timeline|strategies).
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>

#include "cli/cli.h"
#include "cli/inputs.h"
#include "report/report.h"
#include "sched/parallel.h"
#include "spec/units.h"

namespace hexiseq::cli {
namespace {

struct ReportFlags {
  InputFlags inputs;
  std::string plan, output, format = "html", figure, simulate = "auto";
  double time_limit = 0;
  int threads = DefaultPlannerThreads();
};

int UsageError(const std::string& message) {
  std::fprintf(stderr, "hexiseq: %s\n", message.c_str());
  return 2;
}

// --format svg needs --figure and --figure needs --format svg; the figure name must be known.
std::optional<int> CheckUsage(const ReportFlags& f) {
  if (f.format == "svg" && f.figure.empty())
    return UsageError("--format svg needs --figure plan-map|timeline|strategies");
  if (f.format != "svg" && !f.figure.empty())
    return UsageError("--figure " + f.figure + " needs --format svg (the HTML page has them all)");
  if (!f.figure.empty())
    if (auto figure = report::ParseFigure(f.figure); !figure)
      return UsageError(figure.error().message);
  return std::nullopt;
}

// The plan given with --plan must be for the --seq given.
Result<std::optional<Plan>> LoadGivenPlan(const ReportFlags& f) {
  if (f.plan.empty()) return std::optional<Plan>{};
  auto plan = LoadPlan(f.plan);
  if (!plan) return std::unexpected(plan.error());
  auto seq = ParseTokenCount(f.inputs.seq, "--seq");
  if (!seq) return std::unexpected(seq.error());
  if (*seq != plan->seq_len)
    return InvalidArgument("--seq = " + f.inputs.seq + " (" + std::to_string(*seq) +
                           " tokens): the plan " + f.plan + " is for seq_len " +
                           std::to_string(plan->seq_len) +
                           " (rule: a given plan is reported with its own workload; hint: pass "
                           "--seq " +
                           std::to_string(plan->seq_len) + ")");
  return std::optional<Plan>{std::move(*plan)};
}

Result<void> Write(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fputs(text.c_str(), stdout);
    return {};
  }
  std::ofstream out(path, std::ios::binary);
  if (!out) return IoError(path + ": cannot open for writing (hint: check the directory)");
  out << text;
  if (!out) return IoError(path + ": write failed");
  return {};
}

int RunReport(const ReportFlags& f) {
  if (auto usage = CheckUsage(f)) return *usage;
  const CommandDeadline deadline(f.time_limit);
  auto plan = LoadGivenPlan(f);
  if (!plan) return ReportError(plan.error());
  auto problem = LoadInputs(f.inputs, *plan ? &**plan : nullptr);
  if (!problem) return ReportError(problem.error());
  report::ReportOptions options;
  options.deadline = deadline.deadline();
  options.threads = f.threads;
  options.zero_auto = !*plan && f.inputs.zero == "auto";
  options.recompute_auto = !*plan && f.inputs.recompute == "auto";
  options.simulate = f.simulate == "always"  ? report::SimulatePolicy::kAlways
                     : f.simulate == "never" ? report::SimulatePolicy::kNever
                                             : report::SimulatePolicy::kAuto;
  auto data = report::BuildReport(*problem, *plan, options);
  if (!data)
    return ReportError(
        Error{data.error().code, (*plan ? f.plan + ": " : std::string()) + data.error().message});
  if (*plan) data->plan_source = f.plan;
  deadline.NoteIfReached("the report shows the best plans found by then");
  std::string text;
  if (f.format == "svg") {
    auto svg = report::FigureSvg(*data, *report::ParseFigure(f.figure));
    if (!svg) return ReportError(svg.error());
    text = std::move(*svg);
  } else {
    text = report::ReportHtml(*data);
  }
  if (auto w = Write(f.output, text); !w) return ReportError(w.error());
  if (!f.output.empty() && f.output != "-")
    std::fprintf(stderr, "hexiseq: wrote %s\n", f.output.c_str());
  return 0;
}

}  // namespace

void AddReportCommand(CLI::App& app, Actions& actions) {
  auto flags = std::make_shared<ReportFlags>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "One self-contained HTML page of a plan: cluster, plan map, load, timeline, "
      "strategies");
  AddInputFlags(cmd, flags->inputs, true);
  cmd->add_option("--plan", flags->plan,
                  "Report this plan JSON (default: plan with the hexiseq scheduler)");
  cmd->add_option("-o,--output", flags->output, "Output file (default: stdout)");
  cmd->add_option("--format", flags->format, "html|svg")->check(CLI::IsMember({"html", "svg"}));
  cmd->add_option("--figure", flags->figure, "With --format svg: plan-map|timeline|strategies");
  cmd->add_option("--time-limit", flags->time_limit,
                  "Wall-clock limit in seconds for the planning and simulation (0: none); when "
                  "reached, the best plans found so far are shown and stderr says so")
      ->check(TimeLimitRange());
  cmd->add_option("--threads", flags->threads,
                  "Planner threads (default: the machine's hardware threads, at most 8)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--simulate", flags->simulate,
                  "auto (simulate the timeline on clusters of at most 256 ranks) | always | never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  actions[cmd] = [flags] { return RunReport(*flags); };
}

}  // namespace hexiseq::cli
