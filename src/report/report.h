// `hexiseq report`: one self-contained HTML page (inline SVG and CSS, no script, no network) that
// shows a plan on its cluster: headline figures, cluster map, plan map (sequence x heads coloured
// by rank), per-rank load and memory, the simulator's timeline of one layer, and every strategy
// side by side. Everything shown comes from the public APIs of the planner (baselines, Schedule),
// the cost model (Evaluate) and the simulator (Simulate); nothing here models hardware.
// Large clusters stay readable and bounded in size: above kMaxRanksShownSingly ranks the figures
// show one entry per node instead of one per rank (see figures.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cost/cost_model.h"
#include "plan/plan.h"
#include "sched/baselines.h"
#include "sim/simulator.h"
#include "spec/error.h"

namespace hexiseq::report {

// One row of the strategies table (what `hexiseq compare` prints), scored by the cost model.
struct StrategyRow {
  std::string strategy, config;
  bool applicable = true;
  bool feasible = false;
  std::string reason;            // not applicable / infeasible
  double iteration_seconds = 0;  // 0: not scored
  double tokens_per_second = 0;
  double max_memory_fraction = 0;
  double planning_seconds = 0;
  // The training configuration (report/training.h cells): "dp 2 (2+1)", "rank 7", "zero 1, full";
  // "-" when not scored.
  std::string replicas = "-", left_out = "-", training = "-";
};

// The simulator executes every message of a layer; its run time grows faster than the number of
// ranks (about 1.6 s at 256 ranks, 6 s at 512, 110 s at 1024 with 1M tokens on 2 cores), so by
// default the report simulates only clusters of at most kMaxSimulatedRanks ranks.
inline constexpr int kMaxSimulatedRanks = 256;
enum class SimulatePolicy { kAuto, kAlways, kNever };

struct ReportOptions {
  Deadline deadline;            // the command's planning deadline (sched/deadline.h; default: none)
  int threads = 1;              // scheduler threads
  bool exact_search = true;     // add the exact search on clusters of <= kExactMaxRanks ranks
  bool zero_auto = false;       // the planner picks the ZeRO stage (--zero auto)
  bool recompute_auto = false;  // the planner picks the recompute policy (--recompute auto)
  SimulatePolicy simulate = SimulatePolicy::kAuto;
};

struct ReportData {
  Cluster cluster;
  ModelSpec model;
  Workload workload;
  double ideal_tokens_per_second = 0;
  double ideal_iteration_seconds = 0;
  std::vector<StrategyRow> strategies;  // baselines, hexiseq, exact (when run)
  double best_baseline_seconds = 0;     // fastest feasible baseline (0: none)
  std::string best_baseline;
  // The plan shown: the one given, or the scheduler's. Absent when nothing fits.
  std::optional<Plan> plan;
  std::string plan_source;  // the plan file, or "the hexiseq scheduler"
  PlanCost cost;            // the plan's cost-model breakdown
  int shard_ranks = 0;      // the ranks ZeRO shards model state over (CostModel::ShardRanks)
  // The training configurations the scheduler weighed for the plan shown (best first); not
  // recorded for a given plan.
  bool options_recorded = false;
  std::vector<TrainingOption> options;
  double planning_seconds = 0;
  std::string no_plan_reason;                // why there is no plan (the scheduler's explanation)
  bool time_limit_reached = false;           // the deadline cut some strategy's search short
  std::optional<sim::SimResult> simulation;  // one layer, with its timeline
  std::string simulation_error;              // why there is no simulation (skipped or failed)
};

// Plans (or takes `plan`), scores every strategy and simulates the shown plan.
// A given plan must validate against the cost model's cluster and model (kInvalidArgument with
// Validate's message otherwise). A workload where nothing fits is not an error: the report
// explains it.
Result<ReportData> BuildReport(const Problem& problem, const std::optional<Plan>& plan,
                               const ReportOptions& options = {});

// The page. Every user string is escaped.
std::string ReportHtml(const ReportData& data);

enum class Figure { kPlanMap, kTimeline, kStrategies };
// "plan-map" | "timeline" | "strategies"; kInvalidArgument naming --figure otherwise.
Result<Figure> ParseFigure(std::string_view name);
// One figure as a standalone SVG file. kInfeasible when the figure needs a plan and there is none.
Result<std::string> FigureSvg(const ReportData& data, Figure figure);

}  // namespace hexiseq::report
