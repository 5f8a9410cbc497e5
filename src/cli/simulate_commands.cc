// `hexiseq simulate`: execute a plan in the discrete-event simulator (table or JSON, optional
// Perfetto trace). `hexiseq bench`: the evaluation suite (docs/evaluation.md and its charts).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <thread>

#include "cli/cli.h"
#include "cli/inputs.h"
#include "report/evaluation.h"
#include "sim/simulator.h"
#include "sim/trace.h"
#include "spec/limits.h"

namespace hexiseq::cli {
namespace {

struct SimulateFlags {
  InputFlags inputs;
  std::string plan, trace, format = "table";
  int explicit_layers = 1;
  int nics_per_node = 0;
};

// Sorted ranks as spans: "0-3, 6, 8-9".
std::string RankSpans(const std::vector<int>& ranks) {
  std::string out;
  for (size_t first = 0; first < ranks.size();) {
    size_t last = first;
    while (last + 1 < ranks.size() && ranks[last + 1] == ranks[last] + 1) ++last;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[first]);
    if (last > first) out += "-" + std::to_string(ranks[last]);
    first = last + 1;
  }
  return out;
}

// The replicas (sequences, ranks, busy time; the slowest sets the iteration) and left-out ranks.
void PrintReplicas(const sim::SimResult& result) {
  std::vector<std::vector<std::string>> rows = {
      {"replica", "sequences", "ranks", "layers s/seq", "LM head s/seq", "busy s"}};
  for (const sim::SimReplica& replica : result.replicas)
    rows.push_back({std::to_string(replica.replica) +
                        (replica.replica == result.slowest_replica ? " (slowest)" : ""),
                    std::to_string(replica.sequences), RankSpans(replica.ranks),
                    Fixed(replica.all_layers_seconds, 4), Fixed(replica.head_seconds, 4),
                    Fixed(replica.busy_seconds, 4)});
  std::fputs(FormatTable(rows).c_str(), stdout);
  if (!result.left_out.empty())
    std::printf("left out (idle, no model state, no gradient sync): ranks %s\n",
                RankSpans(result.left_out).c_str());
  std::printf("\n");
}

void PrintSimulateTable(const Plan& plan, const sim::SimResult& result) {
  std::printf("plan %s (%s): %zu groups, %d ranks, %zu replicas; %lld events, %lld messages\n",
              plan.strategy.c_str(), plan.config.c_str(), plan.groups.size(), plan.num_ranks,
              result.replicas.size(), static_cast<long long>(result.events),
              static_cast<long long>(result.messages));
  std::printf("iteration %.4f s, %.0f tokens/s%s\n\n", result.iteration_seconds,
              result.tokens_per_second,
              result.feasible ? "" : ("  (INFEASIBLE: " + result.infeasible_reason + ")").c_str());
  std::vector<std::vector<std::string>> terms = {{"term", "model s", "simulated s", "diff"}};
  for (const sim::SimTerm& t : result.terms)
    terms.push_back({t.name, Fixed(t.model_seconds, 4), Fixed(t.sim_seconds, 4),
                     Fixed(t.sim_seconds - t.model_seconds, 4)});
  std::fputs(FormatTable(terms).c_str(), stdout);
  std::printf("\n");
  PrintReplicas(result);
  std::vector<std::vector<std::string>> rows = {
      {"rank", "device", "replica", "busy s", "idle s", "comm s", "exposed comm s"}};
  for (const sim::SimRank& r : result.ranks)
    rows.push_back({std::to_string(r.rank), r.device,
                    r.replica >= 0 ? std::to_string(r.replica) : "left out",
                    Fixed(r.busy_seconds, 4), Fixed(r.idle_seconds, 4), Fixed(r.comm_seconds, 4),
                    Fixed(r.exposed_comm_seconds, 4)});
  std::fputs(FormatTable(rows).c_str(), stdout);
}

int RunSimulate(const SimulateFlags& f) {
  auto plan = LoadPlan(f.plan);
  if (!plan) return ReportError(plan.error());
  auto problem = LoadInputs(f.inputs, &*plan);
  if (!problem) return ReportError(problem.error());
  sim::SimOptions options;
  options.explicit_layers = f.explicit_layers;
  options.nics_per_node = f.nics_per_node;
  options.keep_timeline = !f.trace.empty();
  auto result = sim::Simulate(*plan, *problem, options);
  if (!result) return ReportError(result.error());
  if (!f.trace.empty())
    if (auto w = sim::WriteChromeTrace(*result, problem->cluster, f.trace); !w)
      return ReportError(w.error());
  if (f.format == "json")
    std::fputs(sim::SimResultToJson(*result).c_str(), stdout);
  else
    PrintSimulateTable(*plan, *result);
  if (!f.trace.empty()) std::fprintf(stderr, "hexiseq: trace written to %s\n", f.trace.c_str());
  return result->feasible ? 0 : 1;
}

struct BenchFlags {
  std::string scenarios = "bench/scenarios", tables = "bench/tables";
  std::string report = "docs/evaluation.md", charts = "docs/evaluation";
  std::string only;
  int jobs = 0;
  std::string command = "bench/eval/run";
};

Result<void> WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return IoError(path + ": cannot open for writing");
  out << text;
  if (!out) return IoError(path + ": write failed");
  return {};
}

int RunBench(const BenchFlags& f) {
  auto scenarios = report::LoadScenarios(f.scenarios);
  if (!scenarios) return ReportError(scenarios.error());
  if (!f.only.empty()) {
    std::erase_if(*scenarios, [&](const report::EvalScenario& s) {
      return s.name.find(f.only) == std::string::npos;
    });
  }
  auto tables = report::LoadTables(f.tables);
  if (!tables) return ReportError(tables.error());
  report::EvalOptions options;
  options.jobs =
      f.jobs > 0 ? f.jobs : std::max(1u, std::min(2u, std::thread::hardware_concurrency()));
  options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  const auto start = std::chrono::steady_clock::now();
  const auto outcomes = report::RunEvaluation(*scenarios, *tables, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char header[512];
  std::snprintf(header, sizeof header,
                "Build: %s, compiler %s; %zu scenarios x %zu tables; %d worker threads. The "
                "numbers do not depend on the machine (simulated); only the planning times do.",
#ifdef NDEBUG
                "Release",
#else
                "Debug",
#endif
                __VERSION__, scenarios->size(), tables->size(), options.jobs);
  std::fprintf(stderr, "hexiseq: evaluation took %.1f s\n", seconds);
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(f.charts, ec);
  const std::string rel =
      fs::path(f.charts).lexically_relative(fs::path(f.report).parent_path()).string() + "/";
  std::set<std::string> groups;
  for (const auto& o : outcomes) groups.insert(o.scenario.group);
  for (const std::string& g : groups)
    if (auto w = WriteText(f.charts + "/group-" + g + ".svg",
                           report::GroupSvg(outcomes, g, tables->front().name));
        !w)
      return ReportError(w.error());
  if (auto w = WriteText(f.report,
                         report::EvaluationMarkdown(outcomes, *tables, f.command, header, rel));
      !w)
    return ReportError(w.error());
  std::printf("wrote %s and %zu charts in %s\n", f.report.c_str(), groups.size(), f.charts.c_str());
  return 0;
}

}  // namespace

void AddSimulateCommand(CLI::App& app, Actions& actions) {
  auto sim_flags = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Execute a plan message by message in the discrete-event simulator");
  cmd->add_option("--plan", sim_flags->plan, "Plan JSON file")->required();
  AddInputFlags(cmd, sim_flags->inputs, false);
  cmd->add_option("--trace", sim_flags->trace,
                  "Write a Chrome trace-event JSON (open in Perfetto) of one simulated layer");
  cmd->add_option("--format", sim_flags->format, "Output format")
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--explicit-layers", sim_flags->explicit_layers,
                  "Layers simulated explicitly (the rest are scaled); default 1")
      ->check(CLI::Range(1, static_cast<int>(kMaxModelWidth)));
  cmd->add_option("--nics-per-node", sim_flags->nics_per_node,
                  "0: one NIC per GPU (default); k: each node's GPUs share k NICs")
      ->check(CLI::Range(0, static_cast<int>(kMaxNicsPerNode)));
  actions[cmd] = [sim_flags] { return RunSimulate(*sim_flags); };

  auto bench_flags = std::make_shared<BenchFlags>();
  CLI::App* bench = app.add_subcommand(
      "bench", "Run the evaluation suite and write docs/evaluation.md with its charts");
  bench->add_option("--scenarios", bench_flags->scenarios, "Folder of scenario YAML files");
  bench->add_option("--tables", bench_flags->tables,
                    "Folder of device-efficiency tables (the built-in catalog is always first)");
  bench->add_option("--report", bench_flags->report, "Markdown report to write");
  bench->add_option("--charts", bench_flags->charts, "Folder for the SVG charts");
  bench->add_option("--only", bench_flags->only, "Only scenarios whose name contains this");
  bench->add_option("--jobs", bench_flags->jobs, "Scenarios run concurrently (default 2)");
  actions[bench] = [bench_flags] { return RunBench(*bench_flags); };
}

}  // namespace hexiseq::cli
