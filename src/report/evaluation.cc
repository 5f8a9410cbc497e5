#include "report/evaluation.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "cost/cost_model.h"
#include "report/charts.h"
#include "report/svg.h"
#include "report/training.h"
#include "sched/baselines.h"
#include "sched/scheduler.h"
#include "sim/simulator.h"
#include "spec/cluster.h"
#include "spec/units.h"

namespace hexiseq::report {
namespace {

namespace fs = std::filesystem;

// Layers the simulator runs explicitly per plan (the rest are scaled, docs/simulator.md). On long
// uneven rings the skew between ranks grows over the first layers, so one explicit layer misses
// part of the ring phase: hetero-ring on mixed-64, llama3-70b at 512K (published-measured table)
// simulates 91.474 s with 1, 91.640 s with 8 and 91.696 s with all 80. On the b-mixed64
// scenarios the summary's speedups (average, minimum) with 8 are within 0.3% of all 80 where 1
// was up to 1.1% off, at twice the time of 1 and a sixth of all 80.
constexpr int kEvaluationExplicitLayers = 8;
using sim::SimTerm;
using sim::Simulate;

std::vector<std::string> YamlFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".yaml")
      files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

const std::vector<std::string>& StrategyOrder() {
  static const std::vector<std::string> order = {"ring",        "ulysses", "usp",
                                                 "hetero-ring", "subset",  "hexiseq"};
  return order;
}

template <class F>
std::pair<StrategyResult, double> Timed(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  StrategyResult r = f();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {std::move(r), seconds};
}

// The scenario's problem under the device table.
Result<Problem> LoadScenario(const EvalScenario& sc, const EvalTable& table) {
  DeviceCatalog catalog;
  if (!table.path.empty())
    if (auto merged = catalog.MergeFile(table.path); !merged)
      return std::unexpected(merged.error());
  auto cluster = LoadCluster(sc.cluster_path, catalog);
  if (!cluster) return std::unexpected(cluster.error());
  auto model = LoadModel(sc.model);
  if (!model) return std::unexpected(model.error());
  Workload workload;
  workload.seq_len = sc.seq_len;
  workload.batch = sc.batch;
  if (auto recompute = ParseRecompute(sc.recompute); recompute) workload.recompute = *recompute;
  return Problem{std::move(*cluster), std::move(*model), workload};
}

// Every strategy in StrategyOrder(), with its planning seconds.
std::vector<std::pair<StrategyResult, double>> PlanEveryStrategy(const Problem& problem) {
  std::vector<std::pair<StrategyResult, double>> results;
  results.push_back(Timed([&] { return RingBaseline(problem); }));
  results.push_back(Timed([&] { return UlyssesBaseline(problem); }));
  results.push_back(Timed([&] { return UspBaseline(problem); }));
  results.push_back(Timed([&] { return HeteroRingBaseline(problem); }));
  results.push_back(Timed([&] { return SubsetBaseline(problem); }));
  const auto start = std::chrono::steady_clock::now();
  auto scheduled = Schedule(problem);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  StrategyResult result;
  if (scheduled) {
    result = *scheduled;
  } else {
    result.strategy = "hexiseq";
    result.applicable = true;
    result.cost.feasible = false;
    result.reason = scheduled.error().message;
  }
  results.push_back({std::move(result), seconds});
  return results;
}

// One strategy's row: its plan simulated, with the simulator's largest term.
StrategyOutcome Outcome(const std::string& strategy, const StrategyResult& result, double seconds,
                        const Problem& problem) {
  StrategyOutcome so;
  so.strategy = strategy;
  so.config = result.config;
  so.applicable = result.applicable;
  so.feasible = result.feasible();
  so.reason = result.reason.empty() ? result.cost.infeasible_reason : result.reason;
  so.plan_seconds = seconds;
  if (!so.feasible) return so;
  so.replicas = ReplicasCell(result.plan);
  so.training = TrainingCell(result.plan);
  if (!result.plan.left_out.empty())
    so.left_out = DevicesInWords(result.plan.left_out, problem.cluster);
  so.model_tps = result.cost.tokens_per_second;
  sim::SimOptions options;
  options.explicit_layers = std::min(problem.model.layers, kEvaluationExplicitLayers);
  auto sim = Simulate(result.plan, problem, options);
  if (!sim) {
    so.feasible = false;
    so.reason = "simulation failed: " + sim.error().message;
    return so;
  }
  so.sim_tps = sim->tokens_per_second;
  const SimTerm* worst = nullptr;
  for (const SimTerm& term : sim->terms)
    if (!worst || term.sim_seconds > worst->sim_seconds) worst = &term;
  if (worst) so.sim_bottleneck = worst->name;
  return so;
}

// HexiSeq (the last row) against the best published baseline (the first three rows) and the
// best of all baselines.
void FillSpeedups(ScenarioOutcome& out) {
  const StrategyOutcome& hexiseq = out.strategies.back();
  double best_pub = 0, best_all = 0;
  for (size_t i = 0; i + 1 < out.strategies.size(); ++i) {
    const StrategyOutcome& s = out.strategies[i];
    if (!s.feasible) continue;
    if (i < 3 && s.sim_tps > best_pub) {
      best_pub = s.sim_tps;
      out.best_published = s.strategy;
    }
    if (s.sim_tps > best_all) {
      best_all = s.sim_tps;
      out.best_all = s.strategy;
    }
  }
  if (hexiseq.feasible && best_pub > 0) out.speedup_published = hexiseq.sim_tps / best_pub;
  if (hexiseq.feasible && best_all > 0) out.speedup_all = hexiseq.sim_tps / best_all;
}

ScenarioOutcome RunOne(const EvalScenario& sc, const EvalTable& table) {
  ScenarioOutcome out;
  out.scenario = sc;
  out.table = table.name;
  auto problem = LoadScenario(sc, table);
  if (!problem) {
    out.error = problem.error().message;
    return out;
  }
  out.cluster_name = problem->cluster.name;
  out.num_ranks = problem->cluster.num_ranks();
  out.ideal_tps = CostModel(*problem).IdealTokensPerSecond();
  const std::vector<std::pair<StrategyResult, double>> results = PlanEveryStrategy(*problem);
  for (size_t i = 0; i < results.size(); ++i)
    out.strategies.push_back(
        Outcome(StrategyOrder()[i], results[i].first, results[i].second, *problem));
  FillSpeedups(out);
  return out;
}

struct Stats {
  int n = 0;
  double sum = 0, max = 0, min = 1e300;
  void Add(double v) {
    ++n;
    sum += v;
    max = std::max(max, v);
    min = std::min(min, v);
  }
  double mean() const { return n ? sum / n : 0; }
};

const char* GroupTitle(const std::string& group) {
  if (group == "a") return "(a) testbed-like runs (8 and 16 GPUs, H100 + A100)";
  if (group == "b") return "(b) simulation-scale runs (32-128 GPUs, 3-4 types)";
  if (group == "c") return "(c) FLOP-comparable pairs (mixed vs homogeneous A100)";
  return "other scenarios";
}
const char* Published(const std::string& group) {
  if (group == "a") return "1.11x average, 1.19x max";
  if (group == "b") return "1.36x average, 1.72x max";
  if (group == "c") return "mixed within about 0.5% of the best homogeneous run (Ulysses)";
  return "-";
}

}  // namespace

Result<std::vector<EvalScenario>> LoadScenarios(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return IoError(dir + ": not a directory (hint: pass --scenarios bench/scenarios)");
  std::vector<EvalScenario> out;
  for (const std::string& file : YamlFiles(dir)) {
    YAML::Node root;
    try {
      root = YAML::LoadFile(file);
    } catch (const YAML::Exception& e) {
      return InvalidArgument(file + ": " + e.what());
    }
    if (!root.IsMap()) return InvalidArgument(file + ": a scenario file is a mapping");
    auto text = [&](const char* key, const std::string& fallback) -> std::string {
      return root[key] && root[key].IsScalar() ? root[key].as<std::string>() : fallback;
    };
    for (const char* key : {"group", "cluster", "model", "seq"})
      if (!root[key])
        return InvalidArgument(file + ": " + key +
                               " is missing (rule: a scenario has group, "
                               "cluster, model and seq)");
    std::vector<std::string> seqs;
    if (root["seq"].IsSequence())
      for (const auto& s : root["seq"]) seqs.push_back(s.as<std::string>());
    else
      seqs.push_back(root["seq"].as<std::string>());
    for (const std::string& seq_text : seqs) {
      auto seq = ParseTokenCount(seq_text, file + ": seq");
      if (!seq) return std::unexpected(seq.error());
      EvalScenario sc;
      sc.file = fs::path(file).filename().string();
      sc.name = fs::path(file).stem().string() + "@" + FormatTokens(*seq);
      sc.group = text("group", "other");
      sc.cluster_path = (fs::path(file).parent_path() / text("cluster", "")).lexically_normal();
      sc.model = text("model", "");
      if (sc.model.find('/') != std::string::npos || sc.model.ends_with(".yaml"))
        sc.model = (fs::path(file).parent_path() / sc.model).lexically_normal();
      sc.seq_len = *seq;
      try {
        sc.batch = root["batch"] ? root["batch"].as<int>() : 1;
      } catch (const YAML::Exception&) {
        return InvalidArgument(file + ": batch must be a whole number >= 1");
      }
      if (sc.batch < 1) return InvalidArgument(file + ": batch must be >= 1");
      sc.recompute = text("recompute", "full");
      sc.pair = text("pair", "");
      sc.side = text("side", "");
      sc.note = text("note", "");
      out.push_back(std::move(sc));
    }
  }
  if (out.empty()) return InvalidArgument(dir + ": no *.yaml scenario files");
  return out;
}

Result<std::vector<EvalTable>> LoadTables(const std::string& dir) {
  std::vector<EvalTable> out;
  out.push_back(
      {"default", "", "the built-in device catalog (src/spec/device.cc, docs/devices.md)"});
  if (dir.empty()) return out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return IoError(dir + ": not a directory");
  for (const std::string& file : YamlFiles(dir)) {
    EvalTable t;
    t.name = fs::path(file).stem().string();
    t.path = file;
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line) && line.starts_with("#")) {
      if (!t.description.empty()) t.description += " ";
      t.description += line.substr(line.size() > 1 && line[1] == ' ' ? 2 : 1);
    }
    DeviceCatalog probe;
    if (auto r = probe.MergeFile(file); !r) return std::unexpected(r.error());
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<ScenarioOutcome> RunEvaluation(const std::vector<EvalScenario>& scenarios,
                                           const std::vector<EvalTable>& tables,
                                           const EvalOptions& options) {
  const size_t total = scenarios.size() * tables.size();
  std::vector<ScenarioOutcome> out(total);
  std::atomic<size_t> next{0};
  std::mutex progress_mutex;
  size_t done = 0;
  auto worker = [&] {
    for (size_t task = next++; task < total; task = next++) {
      const EvalTable& table = tables[task / scenarios.size()];
      const EvalScenario& sc = scenarios[task % scenarios.size()];
      out[task] = RunOne(sc, table);
      if (options.progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        ++done;
        char buf[256];
        std::snprintf(buf, sizeof buf, "[%zu/%zu] %s %s: hexiseq %.3fx best published", done, total,
                      table.name.c_str(), sc.name.c_str(), out[task].speedup_published);
        options.progress(buf);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < std::max(1, options.jobs); ++j) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  return out;
}

namespace {

// What every section of the report reads.
struct MarkdownInputs {
  const std::vector<ScenarioOutcome>& outcomes;
  const std::vector<EvalTable>& tables;
  std::set<std::string> groups;
  std::string default_table;
  std::string command, header, svg_prefix;
};

// What was run, how to regenerate it, and the device tables.
void WriteIntro(const MarkdownInputs& in, std::ostringstream& md) {
  const std::vector<EvalTable>& tables = in.tables;
  md << "# Evaluation\n\n"
     << "Simulated throughput of every strategy on the scenarios of `bench/scenarios/` (modelled "
        "on the HexiSeq paper's setups), under "
     << tables.size()
     << " device-efficiency tables. Every plan is made by the planner (baselines at their "
        "strongest, `src/sched/baselines.cc`; HexiSeq by the hierarchical scheduler, "
        "`src/sched/scheduler.cc`), scored by the analytical cost model, then executed message by "
        "message by the discrete-event simulator (`docs/simulator.md`; "
     << kEvaluationExplicitLayers
     << " layers explicit, the rest scaled); the throughput reported "
        "is the simulated one. The ideal is the aggregate-compute bound "
        "(`CostModel::IdealTokensPerSecond`). No scenario is dropped: infeasible or "
        "not-applicable strategies are shown as such.\n\n"
     << "Regenerate everything (this file and the charts) with one command:\n\n```\n"
     << in.command << "\n```\n\n"
     << in.header << "\n\n";

  md << "## Device tables\n\n| table | source |\n| --- | --- |\n";
  for (const EvalTable& t : tables) md << "| `" << t.name << "` | " << t.description << " |\n";
  md << "\n";
}

// HexiSeq's speedup per group and table.
void WriteSummary(const MarkdownInputs& in, std::ostringstream& md) {
  const std::vector<ScenarioOutcome>& outcomes = in.outcomes;
  const std::vector<EvalTable>& tables = in.tables;
  const std::set<std::string>& groups = in.groups;
  md << "## Summary: HexiSeq's simulated speedup\n\n"
     << "Speedup = HexiSeq's simulated tokens/s over the best feasible published baseline "
        "(ring, Ulysses, USP) and over the best of all baselines (adding hetero-ring and "
        "subset). Scenarios where no published baseline is feasible are left out of the "
        "averages and counted in the `n` column.\n\n"
     << "| group | table | n | vs published: avg | max | min | vs all: avg | max | min | "
        "HexiSeq % of ideal: avg | min | paper |\n"
     << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const std::string& g : groups)
    for (const EvalTable& t : tables) {
      Stats pub, all, ideal;
      int n = 0;
      for (const ScenarioOutcome& o : outcomes) {
        if (o.scenario.group != g || o.table != t.name) continue;
        ++n;
        if (o.speedup_published > 0) pub.Add(o.speedup_published);
        if (o.speedup_all > 0) all.Add(o.speedup_all);
        const StrategyOutcome& h = o.strategies.empty() ? StrategyOutcome{} : o.strategies.back();
        if (h.feasible && o.ideal_tps > 0) ideal.Add(h.sim_tps / o.ideal_tps);
      }
      md << "| " << g << " | " << t.name << " | " << pub.n << "/" << n << " | "
         << Fmt("%.3fx", pub.mean()) << " | " << Fmt("%.3fx", pub.max) << " | "
         << Fmt("%.3fx", pub.n ? pub.min : 0) << " | " << Fmt("%.3fx", all.mean()) << " | "
         << Fmt("%.3fx", all.max) << " | " << Fmt("%.3fx", all.n ? all.min : 0) << " | "
         << Fmt("%.1f%%", 100 * ideal.mean()) << " | "
         << Fmt("%.1f%%", 100 * (ideal.n ? ideal.min : 0)) << " | " << Published(g) << " |\n";
    }
  md << "\n";
}

// Per group, the default table in full.
void WriteGroupTables(const MarkdownInputs& in, std::ostringstream& md) {
  const std::vector<ScenarioOutcome>& outcomes = in.outcomes;
  const std::set<std::string>& groups = in.groups;
  const std::string& default_table = in.default_table;
  for (const std::string& g : groups) {
    md << "## " << GroupTitle(g) << "\n\n"
       << "Table `" << default_table << "`. Simulated tokens/s per strategy (`-`: not applicable "
       << "or infeasible, see notes), HexiSeq's fraction of ideal, its speedups, its planning "
       << "time and the cost model's error against the simulator on HexiSeq's plan.\n\n"
       << "![" << g << "](" << in.svg_prefix << "group-" << g << ".svg)\n\n"
       << "| scenario | GPUs | ideal | ring | ulysses | usp | hetero-ring | subset | hexiseq | "
          "% ideal | vs published | vs all | plan s | model err |\n"
       << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    std::vector<std::string> notes;
    for (const ScenarioOutcome& o : outcomes) {
      if (o.scenario.group != g || o.table != default_table) continue;
      if (!o.error.empty()) {
        md << "| " << o.scenario.name << " | error: " << o.error << " |\n";
        continue;
      }
      md << "| " << o.scenario.name << " | " << o.num_ranks << " | " << Tps(o.ideal_tps);
      for (const StrategyOutcome& s : o.strategies) {
        md << " | " << (s.feasible ? Tps(s.sim_tps) : "-");
        if (!s.feasible)
          notes.push_back(o.scenario.name + " " + s.strategy + ": " +
                          (s.applicable ? "infeasible: " : "not applicable: ") + s.reason);
      }
      const StrategyOutcome& h = o.strategies.back();
      md << " | " << (h.feasible ? Fmt("%.1f%%", 100 * h.sim_tps / o.ideal_tps) : "-") << " | "
         << (o.speedup_published > 0
                 ? Fmt("%.3fx", o.speedup_published) + " (" + o.best_published + ")"
                 : "-")
         << " | "
         << (o.speedup_all > 0 ? Fmt("%.3fx", o.speedup_all) + " (" + o.best_all + ")" : "-")
         << " | " << Fmt("%.2f", h.plan_seconds) << " | "
         << (h.feasible ? Fmt("%+.1f%%", 100 * (h.model_tps / h.sim_tps - 1)) : "-") << " |\n";
    }
    if (!notes.empty()) {
      md << "\n<details><summary>Notes: " << notes.size()
         << " strategies not applicable or infeasible</summary>\n\n";
      for (const std::string& n : notes) md << "- " << n << "\n";
      md << "\n</details>\n";
    }
    md << "\n";
  }
}

// Every strategy's training configuration per scenario (default table).
void WriteTrainingConfigurations(const MarkdownInputs& in, std::ostringstream& md) {
  md << "## Training configuration of every strategy\n\n"
     << "Table `" << in.default_table
     << "`. Per strategy: its data-parallel replicas (`dp R (sequences of each)`), its ZeRO "
        "stage and recompute policy, and the devices it leaves out (in no replica, no model "
        "state, no gradient sync). `-`: not applicable or infeasible.\n\n"
     << "| scenario |";
  for (const std::string& strategy : StrategyOrder()) md << " " << strategy << " |";
  md << "\n| --- |";
  for (size_t column = 0; column < StrategyOrder().size(); ++column) md << " --- |";
  md << "\n";
  for (const ScenarioOutcome& o : in.outcomes) {
    if (o.table != in.default_table || !o.error.empty()) continue;
    md << "| " << o.scenario.name << " |";
    for (const StrategyOutcome& s : o.strategies) {
      if (!s.feasible) {
        md << " - |";
        continue;
      }
      md << " " << s.replicas << ", " << s.training
         << (s.left_out == "-" ? "" : ", left out: " + s.left_out) << " |";
    }
    md << "\n";
  }
  md << "\n";
}

// The speedup per scenario under each device table.
void WriteSensitivity(const MarkdownInputs& in, std::ostringstream& md) {
  const std::vector<ScenarioOutcome>& outcomes = in.outcomes;
  const std::vector<EvalTable>& tables = in.tables;
  md << "## Sensitivity to the device-efficiency table\n\n"
     << "HexiSeq's simulated speedup over the best published baseline, per scenario and table.\n\n"
     << "| scenario |";
  for (const EvalTable& t : tables) md << " " << t.name << " |";
  md << "\n| --- |";
  for (size_t i = 0; i < tables.size(); ++i) md << " --- |";
  md << "\n";
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, const ScenarioOutcome*>> by_name;
  for (const ScenarioOutcome& o : outcomes) {
    if (!by_name.count(o.scenario.name)) order.push_back(o.scenario.name);
    by_name[o.scenario.name][o.table] = &o;
  }
  for (const std::string& name : order) {
    md << "| " << name << " |";
    for (const EvalTable& t : tables) {
      const ScenarioOutcome* o = by_name[name][t.name];
      md << " " << (o && o->speedup_published > 0 ? Fmt("%.3fx", o->speedup_published) : "-")
         << " |";
    }
    md << "\n";
  }
  md << "\n";
}

// Mixed clusters against their FLOP-comparable homogeneous pair.
void WritePairs(const MarkdownInputs& in, std::ostringstream& md) {
  const std::vector<ScenarioOutcome>& outcomes = in.outcomes;
  md << "## FLOP-comparable pairs\n\n"
     << "The mixed cluster with HexiSeq against the homogeneous A100 cluster with its best "
        "strategy (simulated).\n\n"
     << "| pair | scenario | table | mixed: HexiSeq | homogeneous: best | ratio |\n"
     << "| --- | --- | --- | --- | --- | --- |\n";
  for (const ScenarioOutcome& mixed : outcomes) {
    if (mixed.scenario.side != "mixed") continue;
    for (const ScenarioOutcome& homo : outcomes) {
      if (homo.scenario.side != "homogeneous" || homo.scenario.pair != mixed.scenario.pair ||
          homo.table != mixed.table || homo.scenario.seq_len != mixed.scenario.seq_len ||
          homo.scenario.model != mixed.scenario.model)
        continue;
      double best = 0;
      std::string best_name = "-";
      for (const StrategyOutcome& s : homo.strategies)
        if (s.feasible && s.sim_tps > best) {
          best = s.sim_tps;
          best_name = s.strategy;
        }
      const StrategyOutcome& h = mixed.strategies.back();
      md << "| " << mixed.scenario.pair << " | " << mixed.scenario.model << " @ "
         << FormatTokens(mixed.scenario.seq_len) << " | " << mixed.table << " | "
         << (h.feasible ? Tps(h.sim_tps) : "-") << " | " << Tps(best) << " (" << best_name << ") | "
         << (h.feasible && best > 0 ? Fmt("%.3f", h.sim_tps / best) : "-") << " |\n";
    }
  }
  md << "\n";
}

// Where joint CP-HP plans beat hetero-ring.
void WriteBeatsHeteroRing(const MarkdownInputs& in, std::ostringstream& md) {
  const std::vector<ScenarioOutcome>& outcomes = in.outcomes;
  const std::string& default_table = in.default_table;
  md << "## Where joint CP-HP plans beat hetero-ring\n\n"
     << "Scenarios (table `" << default_table
     << "`) where HexiSeq's simulated throughput exceeds hetero-ring's by more than 2% "
        "(or hetero-ring does not fit), with HexiSeq's plan.\n\n"
     << "| scenario | hexiseq / hetero-ring | HexiSeq plan |\n| --- | --- | --- |\n";
  for (const ScenarioOutcome& o : outcomes) {
    if (o.table != default_table || o.strategies.size() < 6) continue;
    const StrategyOutcome& h = o.strategies[5];
    const StrategyOutcome& hr = o.strategies[3];
    if (!h.feasible) continue;
    if (hr.feasible && h.sim_tps < 1.02 * hr.sim_tps) continue;
    md << "| " << o.scenario.name << " | "
       << (hr.feasible ? Fmt("%.3fx", h.sim_tps / hr.sim_tps) : "hetero-ring infeasible") << " | "
       << h.config << " |\n";
  }
}

// Scenarios below 95% of ideal or below some baseline.
void WriteShortfalls(const MarkdownInputs& in, std::ostringstream& md) {
  const std::vector<ScenarioOutcome>& outcomes = in.outcomes;
  const std::string& default_table = in.default_table;
  md << "\n## Shortfalls\n\n"
     << "Scenarios (table `" << default_table
     << "`) where HexiSeq is below 95% of ideal, or below some baseline in simulation, with the "
        "largest simulated term of HexiSeq's iteration.\n\n"
     << "| scenario | % ideal | best baseline / hexiseq | largest term |\n| --- | --- | --- | --- "
        "|\n";
  for (const ScenarioOutcome& o : outcomes) {
    if (o.table != default_table || o.strategies.size() < 6) continue;
    const StrategyOutcome& h = o.strategies[5];
    if (!h.feasible) {
      md << "| " << o.scenario.name << " | no feasible plan | - | " << h.reason << " |\n";
      continue;
    }
    const double frac = h.sim_tps / o.ideal_tps;
    if (frac >= 0.95 && o.speedup_all >= 1.0) continue;
    md << "| " << o.scenario.name << " | " << Fmt("%.1f%%", 100 * frac) << " | "
       << (o.speedup_all > 0 ? Fmt("%.3f", 1 / o.speedup_all) + " (" + o.best_all + ")" : "-")
       << " | " << h.sim_bottleneck << " |\n";
  }
}

// Cost model against simulator on the evaluation's plans.
void WriteFidelity(const MarkdownInputs& in, std::ostringstream& md) {
  const std::vector<ScenarioOutcome>& outcomes = in.outcomes;
  md << "\n## Cost model against simulator on the evaluation's plans\n\n"
     << "(model tokens/s / simulated tokens/s - 1), all tables, feasible plans.\n\n"
     << "| strategy | n | mean abs error | max error | min error |\n| --- | --- | --- | --- | --- "
        "|\n";
  for (size_t i = 0; i < StrategyOrder().size(); ++i) {
    Stats abs_err, err;
    for (const ScenarioOutcome& o : outcomes) {
      if (o.strategies.size() <= i || !o.strategies[i].feasible) continue;
      const double e = o.strategies[i].model_tps / o.strategies[i].sim_tps - 1;
      abs_err.Add(std::abs(e));
      err.Add(e);
    }
    md << "| " << StrategyOrder()[i] << " | " << abs_err.n << " | "
       << Fmt("%.1f%%", 100 * abs_err.mean()) << " | " << Fmt("%+.1f%%", 100 * err.max) << " | "
       << Fmt("%+.1f%%", 100 * (err.n ? err.min : 0)) << " |\n";
  }
}

}  // namespace

std::string EvaluationMarkdown(const std::vector<ScenarioOutcome>& outcomes,
                               const std::vector<EvalTable>& tables, const std::string& command,
                               const std::string& header, const std::string& svg_prefix) {
  MarkdownInputs in{outcomes, tables, {},        tables.empty() ? "default" : tables.front().name,
                    command,  header, svg_prefix};
  for (const ScenarioOutcome& o : outcomes) in.groups.insert(o.scenario.group);
  std::ostringstream md;
  for (auto* section :
       {WriteIntro, WriteSummary, WriteGroupTables, WriteTrainingConfigurations, WriteSensitivity,
        WritePairs, WriteBeatsHeteroRing, WriteShortfalls, WriteFidelity})
    section(in, md);
  return md.str();
}

std::string GroupSvg(const std::vector<ScenarioOutcome>& outcomes, const std::string& group,
                     const std::string& table) {
  static const char* colors[] = {kOkabeIto[7], kOkabeIto[1], kOkabeIto[4],
                                 kOkabeIto[0], kOkabeIto[6], kOkabeIto[5]};
  BarChart chart;
  chart.title =
      std::string(GroupTitle(group)) + ": simulated fraction of ideal (table " + table + ")";
  chart.css_class = "evaluation-chart";
  for (size_t s = 0; s < StrategyOrder().size(); ++s)
    chart.series.push_back({StrategyOrder()[s], colors[s]});
  chart.tick_step = 0.25;
  for (const ScenarioOutcome& o : outcomes) {
    if (o.scenario.group != group || o.table != table || !o.error.empty()) continue;
    chart.categories.push_back(o.scenario.name);
    std::vector<double> row(chart.series.size(), 0.0);
    for (size_t s = 0; s < row.size() && s < o.strategies.size(); ++s) {
      const StrategyOutcome& so = o.strategies[s];
      row[s] = so.feasible ? std::min(1.0, so.sim_tps / o.ideal_tps) : 0;
    }
    chart.values.push_back(row);
  }
  return BarChartSvg(chart);
}

}  // namespace hexiseq::report
