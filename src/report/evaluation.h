// The evaluation suite: scenario files (bench/scenarios/*.yaml) x device-efficiency tables
// (bench/tables/*.yaml, plus the built-in catalog as "default"). For each scenario and table,
// every baseline (ring, ulysses, usp, hetero-ring, subset) and the HexiSeq scheduler's plan are
// planned with the cost model and executed by the simulator; throughput is the simulated one.
// Renders docs/evaluation.md (tables, per-group averages and maxima, every strategy's replicas,
// left-out devices and training configuration, the regenerate command) and
// one SVG chart per scenario group (drawn by report/charts.h, like the report page's charts).
// Ignores run-to-run noise: everything is deterministic except the reported planning times.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spec/error.h"

namespace hexiseq::report {

// One scenario file expands into one scenario per sequence length.
//   group: a | b | c          name: ...            cluster: FILE (relative to the scenario file)
//   model: NAME|FILE          seq: [8K, 256K]      batch: 8
//   pair: ID   side: mixed|homogeneous             (group c: FLOP-comparable pairs)
//   recompute: full           note: free text
struct EvalScenario {
  std::string file;
  std::string name;  // file name + "@" + seq
  std::string group;
  std::string cluster_path;
  std::string model;
  int64_t seq_len = 0;
  int batch = 1;
  std::string recompute = "full";
  std::string pair, side, note;
};

struct EvalTable {
  std::string name;         // file stem, or "default"
  std::string path;         // "" for the built-in catalog
  std::string description;  // the file's leading comment lines
};

Result<std::vector<EvalScenario>> LoadScenarios(const std::string& dir);
// "default" first, then every *.yaml of `dir` in name order.
Result<std::vector<EvalTable>> LoadTables(const std::string& dir);

struct StrategyOutcome {
  std::string strategy, config;
  bool applicable = false, feasible = false;
  std::string reason;          // not applicable / infeasible
  double model_tps = 0;        // cost model tokens/s
  double sim_tps = 0;          // simulated tokens/s
  double plan_seconds = 0;     // wall-clock planning time
  std::string sim_bottleneck;  // largest simulated term
  // The plan's training configuration (report/training.h): "dp 2 (5+3)", "zero 1, selective",
  // and the left-out devices ("4 x L40S on node 3", "-" when none); "-" when infeasible.
  std::string replicas = "-", training = "-", left_out = "-";
};

struct ScenarioOutcome {
  EvalScenario scenario;
  std::string table;
  std::string cluster_name;
  int num_ranks = 0;
  double ideal_tps = 0;
  std::vector<StrategyOutcome> strategies;  // ring, ulysses, usp, hetero-ring, subset, hexiseq
  std::string error;                        // input error (scenario kept, marked)
  // Simulated HexiSeq / best feasible of {ring, ulysses, usp} and of all baselines (0: none).
  double speedup_published = 0, speedup_all = 0;
  std::string best_published, best_all;
};

struct EvalOptions {
  int jobs = 2;                                      // scenarios simulated concurrently
  std::function<void(const std::string&)> progress;  // one line per finished scenario
};

std::vector<ScenarioOutcome> RunEvaluation(const std::vector<EvalScenario>& scenarios,
                                           const std::vector<EvalTable>& tables,
                                           const EvalOptions& options);

// The report. `command` is the one command that regenerates it; `header` describes the machine
// and build; `svg_prefix` is the path of the charts relative to the report.
std::string EvaluationMarkdown(const std::vector<ScenarioOutcome>& outcomes,
                               const std::vector<EvalTable>& tables, const std::string& command,
                               const std::string& header, const std::string& svg_prefix);
// Fraction of ideal per strategy for each scenario of `group` under `table`, as grouped bars.
std::string GroupSvg(const std::vector<ScenarioOutcome>& outcomes, const std::string& group,
                     const std::string& table);

}  // namespace hexiseq::report
