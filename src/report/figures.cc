// Cluster map, plan map, per-rank load and memory, strategies chart (see figures.h).
#include "report/figures.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>

#include "report/charts.h"
#include "report/svg.h"
#include "report/training.h"
#include "spec/units.h"

namespace hexiseq::report {
namespace {

constexpr int kCellHues = 7;  // Okabe-Ito without black (black is for outlines and text)
constexpr double kShades[] = {0.0, 0.45, -0.35};  // lightness steps every seven hues
constexpr double kShadeNudge = 0.07;              // step that makes a colliding colour unique
constexpr int kMaxNudges = 12;

// `candidate`, or the nearest lighter/darker variant not yet used.
std::string UniqueColor(const std::string& candidate, std::set<std::string>& used) {
  for (int nudge = 0; nudge <= kMaxNudges; ++nudge) {
    const double amount = (nudge % 2 ? 1 : -1) * kShadeNudge * ((nudge + 1) / 2);
    std::string color = Lighten(candidate, amount);
    if (used.insert(color).second) return color;
  }
  // Last resort (thousands of units): any unused colour, spread by a multiplicative hash.
  for (uint32_t value = static_cast<uint32_t>(used.size());; ++value) {
    char color[8];
    std::snprintf(color, sizeof color, "#%06X", (value * 2654435761u) & 0xFFFFFFu);
    if (used.insert(color).second) return color;
  }
}

std::string HueOf(int index, int shade_index) {
  return Lighten(kOkabeIto[index % kCellHues], kShades[shade_index % 3]);
}

}  // namespace

DisplayUnits UnitsOf(const Plan& plan, const Cluster& cluster) {
  DisplayUnits units;
  units.by_node = cluster.num_ranks() > kMaxRanksShownSingly;
  units.unit_of_rank.assign(cluster.num_ranks(), 0);
  std::set<std::string> used;
  if (units.by_node) {
    for (const NodeInfo& node : cluster.nodes) {
      units.ranks.emplace_back();
      for (int rank = node.first_rank; rank < node.first_rank + node.num_ranks; ++rank) {
        units.ranks.back().push_back(rank);
        units.unit_of_rank[rank] = node.node;
      }
      units.labels.push_back("node " + std::to_string(node.node));
      units.colors.push_back(UniqueColor(HueOf(node.node, node.node / kCellHues), used));
      const auto first =
          std::lower_bound(plan.left_out.begin(), plan.left_out.end(), node.first_rank);
      const auto last =
          std::lower_bound(first, plan.left_out.end(), node.first_rank + node.num_ranks);
      if (last - first == node.num_ranks) {  // the whole node is left out
        units.labels.back() += kLeftOutLabel;
        units.colors.back() = kGrey;
      }
    }
    return units;
  }
  units.ranks.resize(cluster.num_ranks());
  units.labels.resize(cluster.num_ranks());
  units.colors.resize(cluster.num_ranks());
  for (int rank = 0; rank < cluster.num_ranks(); ++rank) {
    units.ranks[rank] = {rank};
    units.unit_of_rank[rank] = rank;
    units.labels[rank] = "rank " + std::to_string(rank);
  }
  // Hues follow the plan's member order (group by group), so members of a group and neighbouring
  // groups differ in hue; every seven members the lightness steps.
  int position = 0;
  for (const PlanGroup& group : plan.groups)
    for (const PlanMember& member : group.members) {
      units.colors[member.rank] = UniqueColor(HueOf(position, position / kCellHues), used);
      ++position;
    }
  for (const int rank : plan.left_out) {
    units.colors[rank] = kGrey;
    units.labels[rank] += kLeftOutLabel;
  }
  return units;
}

// ---- Cluster map

namespace {

constexpr double kGpuSize = 16, kGpuGap = 3, kNodePad = 8, kNodeGap = 14, kNodeLabel = 30;
constexpr int kNodesDrawnPerKind = 4;  // more nodes of one kind: the last box says "+N more"
constexpr double kClusterWidth = 1100;

std::string KindColor(int kind) { return kOkabeIto[kind % kCellHues]; }

double NodeBoxWidth(const NodeKind& kind) {
  constexpr double kMinWidth = 200;  // room for the node's label
  const int per_row = std::min(kind.gpus_per_node, 16);
  return std::max(kMinWidth, 2 * kNodePad + per_row * (kGpuSize + kGpuGap));
}

double NodeBoxHeight(const NodeKind& kind) {
  const int rows = (kind.gpus_per_node + 15) / 16;
  return 2 * kNodePad + rows * (kGpuSize + kGpuGap) + kNodeLabel;
}

void DrawNode(const Cluster& cluster, const NodeInfo& node, double x, double y, Svg& svg) {
  const NodeKind& kind = cluster.kinds[node.kind];
  svg.Rect(x, y, NodeBoxWidth(kind), NodeBoxHeight(kind), "white", {},
           "stroke=\"#222222\" class=\"node\"");
  for (int local = 0; local < node.num_ranks; ++local) {
    const int rank = node.first_rank + local;
    const double gx = x + kNodePad + (local % 16) * (kGpuSize + kGpuGap);
    const double gy = y + kNodePad + (local / 16) * (kGpuSize + kGpuGap);
    svg.Rect(gx, gy, kGpuSize, kGpuSize, KindColor(node.kind),
             "rank " + std::to_string(rank) + ": " + kind.device.name + ", " +
                 FormatBytes(kind.device.memory_bytes) + ", " +
                 Fmt("%.0f", kind.device.peak_flops / 1e12) + " TFLOP/s peak",
             "class=\"gpu\"");
  }
  const double label_y = y + NodeBoxHeight(kind) - kNodeLabel + 12;
  svg.Text(x + kNodePad, label_y, "node " + std::to_string(node.node) + ": " + kind.device.name,
           "start", 10);
  svg.Text(x + kNodePad, label_y + 12,
           "in-node " + FormatBandwidth(kind.intra_node_bytes_per_second) + ", NIC " +
               FormatBandwidth(kind.nic_bytes_per_second),
           "start", 9);
}

void DrawMoreNodes(const NodeKind& kind, int more, double x, double y, Svg& svg) {
  svg.Rect(x, y, NodeBoxWidth(kind), NodeBoxHeight(kind), kLightGrey,
           std::to_string(more) + " more nodes like the previous ones",
           "stroke=\"#222222\" stroke-dasharray=\"4 3\"");
  svg.Text(x + NodeBoxWidth(kind) / 2, y + NodeBoxHeight(kind) / 2 + 4,
           "+ " + std::to_string(more) + " more " + kind.device.name + " nodes", "middle", 11);
}

// Node boxes of every kind, flowing left to right; returns the height used.
double DrawNodes(const Cluster& cluster, double top, Svg* svg) {
  double x = 10, y = top, row_height = 0;
  for (size_t kind_index = 0; kind_index < cluster.kinds.size(); ++kind_index) {
    const NodeKind& kind = cluster.kinds[kind_index];
    int drawn = 0;
    for (const NodeInfo& node : cluster.nodes) {
      if (node.kind != static_cast<int>(kind_index)) continue;
      if (x + NodeBoxWidth(kind) > kClusterWidth - 10 && x > 10) {
        x = 10;
        y += row_height + kNodeGap;
        row_height = 0;
      }
      const bool last_box = drawn == kNodesDrawnPerKind - 1 && kind.count > kNodesDrawnPerKind;
      if (svg && last_box) DrawMoreNodes(kind, kind.count - drawn, x, y, *svg);
      if (svg && !last_box) DrawNode(cluster, node, x, y, *svg);
      x += NodeBoxWidth(kind) + kNodeGap;
      row_height = std::max(row_height, NodeBoxHeight(kind));
      if (++drawn == kNodesDrawnPerKind) break;
    }
  }
  return y + row_height - top;
}

std::vector<std::string> LinkLines(const Cluster& cluster) {
  std::vector<std::string> lines;
  lines.push_back("between nodes without an override: the smaller NIC of the two GPUs; latency " +
                  Duration(cluster.inter_node_latency_seconds) + " per message");
  for (const LinkOverride& link : cluster.links)
    lines.push_back("link override: " + cluster.kinds[link.kind_a].device.name + " <-> " +
                    cluster.kinds[link.kind_b].device.name + ": " +
                    FormatBandwidth(link.bytes_per_second) + " per GPU per direction");
  return lines;
}

}  // namespace

std::string ClusterMapSvg(const Cluster& cluster) {
  constexpr double kLegendRow = 16, kTop = 30;
  const double nodes_height = DrawNodes(cluster, kTop, nullptr);
  const std::vector<std::string> links = LinkLines(cluster);
  const double legend_top = kTop + nodes_height + 20;
  const double height = legend_top + (cluster.kinds.size() + links.size()) * kLegendRow + 10;
  Svg svg(kClusterWidth, height, "cluster-map", "Cluster map: " + cluster.name);
  svg.Text(10, 18,
           "Cluster " + cluster.name + ": " + std::to_string(cluster.nodes.size()) + " nodes, " +
               std::to_string(cluster.num_ranks()) + " GPUs",
           "start", 13);
  DrawNodes(cluster, kTop, &svg);
  double y = legend_top;
  for (size_t kind = 0; kind < cluster.kinds.size(); ++kind, y += kLegendRow) {
    const NodeKind& k = cluster.kinds[kind];
    svg.Rect(10, y - 10, 12, 12, KindColor(static_cast<int>(kind)));
    svg.Text(28, y,
             k.device.name + ": " + std::to_string(k.count) + " x " +
                 std::to_string(k.gpus_per_node) + " GPUs, " + FormatBytes(k.device.memory_bytes) +
                 ", " + Fmt("%.0f", k.device.peak_flops / 1e12) + " TFLOP/s peak, in-node " +
                 FormatBandwidth(k.intra_node_bytes_per_second) + ", NIC " +
                 FormatBandwidth(k.nic_bytes_per_second),
             "start", 11);
  }
  for (const std::string& line : links) {
    svg.Text(10, y, line, "start", 11);
    y += kLegendRow;
  }
  return svg.Finish();
}

// ---- Plan map

namespace {

// The plan's groups that hold tokens, in the ring order of their replica: ring_position[group]
// (counted from 0 in every replica) or -1.
std::vector<int> RingPositions(const Plan& plan) {
  std::vector<int> positions(plan.groups.size(), -1);
  int next = 0;
  for (size_t group = 0; group < plan.groups.size(); ++group) {
    if (group > 0 && plan.groups[group].replica != plan.groups[group - 1].replica) next = 0;
    if (!plan.groups[group].tokens.empty()) positions[group] = next++;
  }
  return positions;
}

// One band: a replica's sequence x heads, starting at `top`.
struct PlanMapScale {
  double seq_len, row, top = kPlanMapTop;
  double X(int64_t token) const { return kPlanMapLeft + kPlanMapWidth * token / seq_len; }
  double Y(int head) const { return top + head * row; }
};

// Token ticks under the last band.
void DrawTokenAxis(const Plan& plan, const PlanMapScale& last_band, Svg& svg) {
  const double bottom = last_band.Y(plan.num_heads);
  const double token_step = NiceStep(static_cast<double>(plan.seq_len), 8);
  for (double token = 0; token <= plan.seq_len; token += token_step) {
    const double x = last_band.X(static_cast<int64_t>(token));
    svg.Line(x, bottom, x, bottom + 4, kInk);
    svg.Text(x, bottom + 15, FormatTokens(static_cast<int64_t>(token)), "middle", 10);
  }
  svg.Text(kPlanMapLeft + kPlanMapWidth / 2, bottom + 30, "sequence position (tokens)", "middle");
}

// Head ticks beside every band, and one axis title over all of them.
void DrawHeadAxis(const Plan& plan, const std::vector<PlanMapScale>& bands, Svg& svg) {
  constexpr double kMinLabelGap = 13;  // px between head labels
  const int head_step = std::max({1, static_cast<int>(NiceStep(plan.num_heads, 8)),
                                  static_cast<int>(std::ceil(kMinLabelGap / bands.front().row))});
  for (const PlanMapScale& band : bands)
    for (int head = 0; head < plan.num_heads; head += head_step)
      svg.Text(kPlanMapLeft - 6, band.Y(head) + std::min(band.row, 10.0),
               "h" + std::to_string(head), "end", 10);
  const double middle = (bands.front().top + bands.back().Y(plan.num_heads)) / 2;
  svg.Text(14, middle, "query heads", "middle", 11,
           "transform=\"rotate(-90 14 " + Fmt("%.1f", middle) + ")\"");
}

std::string CellTitle(const Plan& plan, const Cluster& cluster, const DisplayUnits& units,
                      int group, int ring_position, const Range& range, int first_rank,
                      int head_begin, int head_end) {
  const int unit = units.unit_of_rank[first_rank];
  std::string who = units.by_node ? units.labels[unit] + " (ranks " +
                                        std::to_string(units.ranks[unit].front()) + "-" +
                                        std::to_string(units.ranks[unit].back()) + ")"
                                  : units.labels[unit];
  who += " " + cluster.device(first_rank).name;
  if (NumReplicas(plan) > 1) who += ", replica " + std::to_string(plan.groups[group].replica);
  return who + ", group " + std::to_string(group) + " (ring position " +
         std::to_string(ring_position) + "): tokens [" + std::to_string(range.begin) + ", " +
         std::to_string(range.end) + ") = " + FormatTokens(range.end - range.begin) + ", heads " +
         std::to_string(head_begin) + "-" + std::to_string(head_end - 1) + " (" +
         std::to_string(head_end - head_begin) + ")";
}

// One group's cells: per token range, runs of heads held by the same unit.
void DrawGroupCells(const Plan& plan, const Cluster& cluster, const DisplayUnits& units, int group,
                    int ring_position, const PlanMapScale& scale, Svg& svg) {
  std::vector<int> rank_of_head(plan.num_heads, -1);
  for (const PlanMember& member : plan.groups[group].members)
    for (const int head : member.heads) rank_of_head[head] = member.rank;
  for (const Range& range : plan.groups[group].tokens) {
    for (int head = 0; head < plan.num_heads;) {
      const int rank = rank_of_head[head];
      int end = head + 1;
      while (end < plan.num_heads && rank_of_head[end] >= 0 && rank >= 0 &&
             units.unit_of_rank[rank_of_head[end]] == units.unit_of_rank[rank])
        ++end;
      if (rank >= 0)
        svg.Rect(scale.X(range.begin), scale.Y(head), scale.X(range.end) - scale.X(range.begin),
                 (end - head) * scale.row, units.colors[units.unit_of_rank[rank]],
                 CellTitle(plan, cluster, units, group, ring_position, range, rank, head, end),
                 "class=\"cell\"");
      head = end;
    }
  }
}

// Outlines thin out as ranges narrow, so that they never hide the cells.
double OutlineWidth(const Plan& plan) {
  constexpr double kWidest = 1.2, kThinnest = 0.2, kFractionOfRange = 0.125;
  size_t ranges = 0;
  for (const PlanGroup& group : plan.groups) ranges += group.tokens.size();
  const double ranges_per_band = static_cast<double>(ranges) / NumReplicas(plan);
  const double average_range = kPlanMapWidth / std::max(1.0, ranges_per_band);
  return std::clamp(average_range * kFractionOfRange, kThinnest, kWidest);
}

void DrawGroupOutlines(const Plan& plan, const std::vector<int>& ring,
                       const std::vector<PlanMapScale>& bands, Svg& svg) {
  constexpr double kMinLabelWidth = 16;
  const std::string stroke = "stroke=\"#222222\" stroke-width=\"" +
                             Fmt("%.2f", OutlineWidth(plan)) + "\" class=\"group-outline\"";
  for (size_t group = 0; group < plan.groups.size(); ++group) {
    const size_t replica = plan.groups[group].replica;
    if (ring[group] < 0 || replica >= bands.size()) continue;
    const PlanMapScale& scale = bands[replica];
    for (const Range& range : plan.groups[group].tokens) {
      const double x = scale.X(range.begin), width = scale.X(range.end) - x;
      svg.Rect(x, scale.top, width, plan.num_heads * scale.row, "none", {}, stroke);
      if (width >= kMinLabelWidth)
        svg.Text(x + width / 2, scale.top - 5, "#" + std::to_string(ring[group]), "middle", 9);
    }
  }
}

// Legend entries per row: ten, fewer when labels are long ("rank 12 (left out)").
size_t LegendPerRow(const DisplayUnits& units) {
  constexpr double kEntryWidth = 100, kCharWidth = 5.6, kSwatch = 20;
  size_t longest = 0;
  for (const std::string& label : units.labels) longest = std::max(longest, label.size());
  const double width = std::max(kEntryWidth, kSwatch + kCharWidth * longest);
  return std::max<size_t>(1, static_cast<size_t>(kPlanMapWidth / width));
}

void DrawUnitLegend(const DisplayUnits& units, double top, Svg& svg) {
  constexpr double kRowHeight = 16;
  const size_t per_row = LegendPerRow(units);
  const double entry_width = kPlanMapWidth / per_row;
  for (size_t unit = 0; unit < units.labels.size(); ++unit) {
    const double x = kPlanMapLeft + (unit % per_row) * entry_width;
    const double y = top + (unit / per_row) * kRowHeight;
    svg.Rect(x, y, 10, 10, units.colors[unit]);
    svg.Text(x + 14, y + 9, units.labels[unit], "start", 10);
  }
}

}  // namespace

namespace {

constexpr int kMaxReplicaBands = 8;  // more replicas: the first ones drawn, the rest counted
constexpr double kBandLabel = 28;    // above each band when there are several: its label
constexpr double kBandGap = 6;

// One band per drawn replica (one band, at kPlanMapTop, for a one-replica plan).
std::vector<PlanMapScale> ReplicaBands(const Plan& plan) {
  constexpr double kMaxMapHeight = 420, kMinRow = 3, kMinBandRow = 1, kMaxRow = 14;
  const int bands = std::min(NumReplicas(plan), kMaxReplicaBands);
  const double seq_len = static_cast<double>(std::max<int64_t>(1, plan.seq_len));
  const double row = std::clamp(kMaxMapHeight / std::max(1, plan.num_heads * bands),
                                bands > 1 ? kMinBandRow : kMinRow, kMaxRow);
  if (bands == 1) return {PlanMapScale{seq_len, row}};
  std::vector<PlanMapScale> scales;
  for (int band = 0; band < bands; ++band)
    scales.push_back(
        {seq_len, row,
         kPlanMapTop + kBandLabel + band * (plan.num_heads * row + kBandLabel + kBandGap)});
  return scales;
}

void DrawReplicaLabels(const Plan& plan, const Cluster& cluster,
                       const std::vector<PlanMapScale>& bands, Svg& svg) {
  const std::vector<ReplicaSummary> replicas = SummarizeReplicas(plan, PlanCost{});
  for (size_t band = 0; band < bands.size(); ++band) {
    const ReplicaSummary& replica = replicas[band];
    const double top = bands[band].top, height = plan.num_heads * bands[band].row;
    const std::string label =
        "replica " + std::to_string(band) + ": " + std::to_string(replica.sequences) + " of " +
        std::to_string(plan.batch) + " sequences, " + RanksWord(replica.ranks) + " (" +
        DevicesInWords(replica.ranks, cluster) + ")";
    svg.Rect(kPlanMapLeft - 2, top - 2, kPlanMapWidth + 4, height + 4, "none", label,
             "stroke=\"#666666\" stroke-dasharray=\"3 2\" class=\"replica-band\"");
    svg.Text(kPlanMapLeft, top - 16, label, "start", 11, "class=\"replica-label\"");
  }
}

// Under the axis: the replicas not drawn, and the left-out ranks (grey in the legend). Returns the
// height used; draws only when `svg` is given.
double PlanMapNotes(const Plan& plan, const Cluster& cluster, size_t bands, double top, Svg* svg) {
  constexpr double kLine = 16;
  std::vector<std::pair<std::string, std::string>> notes;  // text, class
  if (static_cast<size_t>(NumReplicas(plan)) > bands)
    notes.push_back({"+ " + std::to_string(NumReplicas(plan) - bands) +
                         " more replicas, not drawn (hexiseq explain lists every replica)",
                     "more-replicas"});
  if (!plan.left_out.empty())
    notes.push_back({"left out (grey): " + RanksWord(plan.left_out) + " (" +
                         DevicesInWords(plan.left_out, cluster) +
                         "): in no replica, no model state, no gradient sync",
                     "left-out"});
  for (size_t line = 0; svg && line < notes.size(); ++line)
    svg->Text(kPlanMapLeft, top + line * kLine, notes[line].first, "start", 11,
              "class=\"" + notes[line].second + "\"");
  return kLine * notes.size();
}

}  // namespace

std::string PlanMapSvg(const Plan& plan, const Cluster& cluster) {
  constexpr double kAxisSpace = 50;
  const DisplayUnits units = UnitsOf(plan, cluster);
  const std::vector<PlanMapScale> bands = ReplicaBands(plan);
  const double notes_top = bands.back().Y(plan.num_heads) + kAxisSpace;
  const double legend_top = notes_top + PlanMapNotes(plan, cluster, bands.size(), 0, nullptr);
  const double legend_rows =
      std::ceil(units.labels.size() / static_cast<double>(LegendPerRow(units)));
  Svg svg(
      kPlanMapLeft + kPlanMapWidth + 20, legend_top + legend_rows * 16 + 10, "plan-map",
      "Plan map: sequence x heads, coloured by " + std::string(units.by_node ? "node" : "rank"));
  svg.Text(kPlanMapLeft, 16,
           "Who computes each (token, head) pair inside attention; colour = " +
               std::string(units.by_node ? "node" : "rank") +
               ", outlines = all-to-all groups, #k = position in the ring" +
               (bands.size() > 1 ? "; one band per data-parallel replica" : ""),
           "start", 12);
  const std::vector<int> ring = RingPositions(plan);
  for (size_t group = 0; group < plan.groups.size(); ++group) {
    const size_t replica = plan.groups[group].replica;
    if (ring[group] >= 0 && replica < bands.size())
      DrawGroupCells(plan, cluster, units, static_cast<int>(group), ring[group], bands[replica],
                     svg);
  }
  DrawGroupOutlines(plan, ring, bands, svg);
  if (bands.size() > 1) DrawReplicaLabels(plan, cluster, bands, svg);
  DrawTokenAxis(plan, bands.back(), svg);
  DrawHeadAxis(plan, bands, svg);
  PlanMapNotes(plan, cluster, bands.size(), notes_top, &svg);
  DrawUnitLegend(units, legend_top, svg);
  return svg.Finish();
}

// ---- Per-rank load and memory

namespace {

struct LoadSegment {
  const char* name;
  const char* color;
};
constexpr LoadSegment kTimeSegments[] = {{"compute", kOkabeIto[4]},
                                         {"all-to-all", kOkabeIto[0]},
                                         {"exposed ring", kOkabeIto[2]},
                                         {"exposed grad sync", kOkabeIto[6]},
                                         {"idle", kGrey}};
constexpr LoadSegment kMemorySegments[] = {{"model state", kOkabeIto[4]},
                                           {"activations", kOkabeIto[1]},
                                           {"attention", kOkabeIto[0]},
                                           {"buffers + logits", kOkabeIto[2]}};

std::vector<double> TimeParts(const RankCost& rank, double iteration_seconds) {
  std::vector<double> parts = {rank.compute_seconds(), rank.all_to_all_seconds,
                               rank.ring_exposed_seconds, rank.grad_sync_seconds};
  double busy = 0;
  for (const double part : parts) busy += part;
  parts.push_back(std::max(0.0, iteration_seconds - busy));
  return parts;
}

std::vector<double> MemoryParts(const RankCost& rank) {
  const MemoryBreakdown& m = rank.memory;
  return {m.weights + m.gradients + m.optimizer, m.activations, m.attention_working,
          m.ring_buffers + m.logits};
}

// Per unit, the rank it shows: the unit's rank with the largest `key`.
template <class Key>
std::vector<int> Representatives(const DisplayUnits& units, Key key) {
  std::vector<int> chosen;
  for (const std::vector<int>& ranks : units.ranks)
    chosen.push_back(*std::max_element(ranks.begin(), ranks.end(),
                                       [&](int a, int b) { return key(a) < key(b); }));
  return chosen;
}

struct Panel {
  double left, width, top, row;
  double scale_max;
  double X(double value) const { return left + width * value / scale_max; }
};

void DrawRowLabels(const DisplayUnits& units, const std::vector<int>& shown, const Panel& panel,
                   int bottleneck_rank, Svg& svg) {
  const int every = std::max(1, static_cast<int>(std::ceil(9.0 / panel.row)));
  for (size_t unit = 0; unit < shown.size(); ++unit) {
    const double y = panel.top + unit * panel.row + std::min(panel.row, 12.0) - 2;
    const bool bottleneck = shown[unit] == bottleneck_rank;
    if (unit % every != 0 && !bottleneck) continue;
    const std::string label = units.by_node
                                  ? units.labels[unit] + " r" + std::to_string(shown[unit])
                                  : units.labels[unit];
    svg.Text(panel.left - 4, y, bottleneck ? label + " *" : label, "end",
             std::min(10.0, std::max(7.0, panel.row - 2)),
             bottleneck ? "font-weight=\"bold\"" : "");
  }
}

void DrawSegments(const std::vector<double>& parts, const LoadSegment* segments, const Panel& panel,
                  double y, const std::string& who, bool as_bytes, Svg& svg) {
  double start = 0;
  for (size_t part = 0; part < parts.size(); ++part) {
    if (parts[part] <= 0) continue;
    const std::string value = as_bytes ? FormatBytes(parts[part]) : Duration(parts[part]);
    svg.Rect(panel.X(start), y, panel.X(start + parts[part]) - panel.X(start),
             std::max(1.0, panel.row - 1), segments[part].color,
             who + ": " + segments[part].name + " " + value, "class=\"segment\"");
    start += parts[part];
  }
}

void DrawLegendRow(const LoadSegment* segments, size_t count, double left, double y, Svg& svg) {
  double x = left;
  for (size_t segment = 0; segment < count; ++segment) {
    svg.Rect(x, y - 9, 10, 10, segments[segment].color);
    svg.Text(x + 13, y, segments[segment].name, "start", 9);
    x += 13 + 6.0 * std::string_view(segments[segment].name).size() + 8;
  }
}

void DrawTimePanel(const Plan& plan, const PlanCost& cost, const Cluster& cluster,
                   const DisplayUnits& units, const Panel& base, Svg& svg) {
  const std::vector<int> shown = Representatives(units, [&](int rank) {
    return cost.ranks[rank].compute_seconds() + cost.ranks[rank].exposed_comm_seconds();
  });
  Panel panel = base;
  panel.scale_max = cost.iteration_seconds;
  for (const int rank : shown) {
    double busy = 0;
    for (const double part : TimeParts(cost.ranks[rank], 0)) busy += part;
    panel.scale_max = std::max(panel.scale_max, busy);
  }
  panel.scale_max = std::max(panel.scale_max, 1e-12);
  svg.Text(panel.left, panel.top - 22,
           "Time per iteration (cost model), " + Duration(cost.iteration_seconds) + " in all",
           "start", 12);
  DrawLegendRow(kTimeSegments, std::size(kTimeSegments), panel.left, panel.top - 6, svg);
  DrawRowLabels(units, shown, panel, cost.bottleneck_rank, svg);
  for (size_t unit = 0; unit < shown.size(); ++unit) {
    const int rank = shown[unit];
    if (std::binary_search(plan.left_out.begin(), plan.left_out.end(), rank)) continue;  // no bar
    DrawSegments(TimeParts(cost.ranks[rank], cost.iteration_seconds), kTimeSegments, panel,
                 panel.top + unit * panel.row,
                 "rank " + std::to_string(rank) + " (" + cluster.device(rank).name + ")", false,
                 svg);
  }
}

void DrawMemoryPanel(const PlanCost& cost, const Cluster& cluster, const DisplayUnits& units,
                     double reserve, const Panel& base, Svg& svg) {
  const std::vector<int> shown = Representatives(units, [&](int rank) {
    return cost.ranks[rank].memory_bytes / std::max(1.0, cost.ranks[rank].memory_capacity_bytes);
  });
  const double keep = std::max(1e-9, 1 - reserve);
  Panel panel = base;
  panel.scale_max = 1;
  for (const int rank : shown)
    panel.scale_max = std::max({panel.scale_max, cost.ranks[rank].memory_bytes,
                                cost.ranks[rank].memory_capacity_bytes / keep});
  svg.Text(panel.left, panel.top - 22,
           "Memory against capacity (hatched: the " + Fmt("%.0f%%", 100 * reserve) + " reserve)",
           "start", 12);
  DrawLegendRow(kMemorySegments, std::size(kMemorySegments), panel.left, panel.top - 6, svg);
  DrawRowLabels(units, shown, panel, -1, svg);
  for (size_t unit = 0; unit < shown.size(); ++unit) {
    const RankCost& rank = cost.ranks[shown[unit]];
    const double y = panel.top + unit * panel.row, height = std::max(1.0, panel.row - 1);
    const double usable = rank.memory_capacity_bytes, full = usable / keep;
    const std::string who =
        "rank " + std::to_string(shown[unit]) + " (" + cluster.device(shown[unit]).name + ")";
    svg.Rect(panel.X(0), y, panel.X(usable) - panel.X(0), height, kLightGrey);
    svg.Rect(panel.X(usable), y, panel.X(full) - panel.X(usable), height, "url(#reserve)",
             who + ": reserve " + FormatBytes(full - usable) + " of " + FormatBytes(full),
             "class=\"reserve\"");
    DrawSegments(MemoryParts(rank), kMemorySegments, panel, y, who, true, svg);
    const bool over = rank.memory_bytes > usable;
    svg.Line(panel.X(usable), y, panel.X(usable), y + height, over ? kOkabeIto[5] : kInk,
             over ? 2.5 : 1.2, "class=\"capacity\"");
  }
}

}  // namespace

std::string LoadSvg(const Plan& plan, const PlanCost& cost, const Cluster& cluster,
                    double memory_reserve) {
  constexpr double kWidth = 1100, kTop = 50, kMaxHeight = 560, kMinRow = 3, kMaxRow = 16;
  const DisplayUnits units = UnitsOf(plan, cluster);
  const double row =
      std::clamp(kMaxHeight / std::max<size_t>(1, units.labels.size()), kMinRow, kMaxRow);
  const double height = kTop + row * units.labels.size() + 20;
  Svg svg(kWidth, height, "load",
          units.by_node ? "Per-node load and memory (each node's busiest rank)"
                        : "Per-rank load and memory");
  svg.Raw(
      "<defs><pattern id=\"reserve\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#EEEEEE\"/>"
      "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#999999\" stroke-width=\"2\"/>"
      "</pattern></defs>\n");
  const Panel time_panel{90, 440, kTop, row, 1};
  const Panel memory_panel{650, 430, kTop, row, 1};
  DrawTimePanel(plan, cost, cluster, units, time_panel, svg);
  DrawMemoryPanel(cost, cluster, units, memory_reserve, memory_panel, svg);
  return svg.Finish();
}

// ---- Strategies

std::string StrategiesSvg(const ReportData& data) {
  BarChart chart;
  chart.title =
      "Predicted tokens/s of every strategy (cost model); orange: the plan shown; "
      "dashed: the ideal";
  chart.css_class = "strategies";
  chart.series = {{"tokens/s", kOkabeIto[4]}};
  chart.format = ValueFormat::kTokensPerSecond;
  chart.reference = data.ideal_tokens_per_second;
  chart.reference_label = "ideal (aggregate compute)";
  chart.bar_width = 70;
  chart.group_gap = 40;
  chart.rotate_labels = false;
  double top = data.ideal_tokens_per_second;
  for (const StrategyRow& row : data.strategies) {
    chart.categories.push_back(row.strategy);
    const bool drawn = row.feasible && row.tokens_per_second > 0;
    chart.values.push_back({drawn ? row.tokens_per_second : NAN});
    const bool shown =
        data.plan && data.plan->strategy == row.strategy && data.plan->config == row.config;
    chart.category_colors.push_back(shown ? kOkabeIto[0] : "");
    top = std::max(top, row.tokens_per_second);
    const double ideal_fraction =
        data.ideal_tokens_per_second > 0 ? row.tokens_per_second / data.ideal_tokens_per_second : 0;
    chart.hover.push_back({row.strategy + " (" + row.config +
                           "): " + Fmt("%.0f", row.tokens_per_second) + " tokens/s, " +
                           Fmt("%.1f%%", 100 * ideal_fraction) + " of ideal"});
  }
  chart.y_max = std::max(1.0, top * 1.1);
  return BarChartSvg(chart);
}

}  // namespace hexiseq::report
