// The report's figures, each a standalone SVG: cluster map, plan map, per-rank load and memory,
// timeline, strategies. Colours: Okabe-Ito hues (svg.h); in the plan map, ranks take the hues in
// the plan's member order, the lightness stepping every seven ranks, so members of a group and
// neighbouring groups differ in hue and every rank has a colour of its own. Readability at scale:
// with more than kMaxRanksShownSingly ranks, figures show one entry per node (plan-map cells
// coloured by node, load and memory bars of each node's busiest rank, timeline rows of selected
// ranks), so size grows with nodes, not ranks.
#pragma once

#include <string>
#include <vector>

#include "report/report.h"

namespace hexiseq::report {

inline constexpr int kMaxRanksShownSingly = 64;
inline constexpr int kMaxTimelineRows = 32;
// Appended to the label of a left-out rank (or of a node whose ranks are all left out); such
// units are grey (kGrey) in every figure.
inline constexpr const char* kLeftOutLabel = " (left out)";

// What one coloured entry of the figures stands for: a rank, or a node's ranks.
struct DisplayUnits {
  bool by_node = false;
  std::vector<std::vector<int>> ranks;  // per unit, its ranks
  std::vector<int> unit_of_rank;        // per rank
  std::vector<std::string> labels;      // "rank 3" / "node 2"
  std::vector<std::string> colors;      // distinct per unit
};
DisplayUnits UnitsOf(const Plan& plan, const Cluster& cluster);

// Layout of the plan map, exposed so tests can check coordinates.
inline constexpr double kPlanMapLeft = 70;
inline constexpr double kPlanMapTop = 40;
inline constexpr double kPlanMapWidth = 1000;

std::string ClusterMapSvg(const Cluster& cluster);
// Cells (class "cell", one per contiguous run of heads of one unit over one token range),
// group outlines (class "group-outline") labelled with their ring position. With several
// data-parallel replicas, one band per replica (class "replica-band", labelled "replica r: ..."),
// at most 8 drawn; left-out ranks are grey in the legend and named under the axis (class
// "left-out").
std::string PlanMapSvg(const Plan& plan, const Cluster& cluster);
// Stacked time per rank (compute, exposed all-to-all, exposed ring, exposed gradient sync, idle)
// and memory against capacity with the reserve marked.
std::string LoadSvg(const Plan& plan, const PlanCost& cost, const Cluster& cluster,
                    double memory_reserve);
// Gantt chart of the simulated layer (forward, recompute, backward); rows of at most
// kMaxTimelineRows ranks; intervals shorter than a pixel are merged (hover says how many).
std::string TimelineSvg(const sim::SimResult& simulation, const Plan& plan, const Cluster& cluster,
                        int bottleneck_rank);
// Tokens/s of every scored strategy with the ideal as a line (BarChartSvg).
std::string StrategiesSvg(const ReportData& data);

// The ranks the timeline shows: all when they fit, else the bottleneck rank's group and the first
// member of the other groups, in rank order.
std::vector<int> TimelineRanks(const Plan& plan, int num_ranks, int bottleneck_rank);

}  // namespace hexiseq::report
