// The timeline figure: a Gantt chart of the simulator's explicit layer (forward, recompute,
// backward), one row per shown rank with a compute lane (linear, attention) and a communication
// lane (all-to-all, ring sends). Operations closer than one pixel are merged into one bar whose
// hover text gives the count and busy time, so the size is bounded by rows x pixels, not by
// the number of simulated operations.
#include <algorithm>
#include <map>
#include <set>

#include "report/figures.h"
#include "report/svg.h"

namespace hexiseq::report {
namespace {

enum class Lane { kCompute, kComm };
enum class Kind { kLinear, kAttention, kAllToAll, kRing, kNone };

struct KindStyle {
  const char* name;
  const char* color;
  Lane lane;
};
constexpr KindStyle kKinds[] = {{"linear", kOkabeIto[4], Lane::kCompute},
                                {"attention", kOkabeIto[1], Lane::kCompute},
                                {"all-to-all", kOkabeIto[0], Lane::kComm},
                                {"ring send", kOkabeIto[2], Lane::kComm}};

Kind KindOf(const sim::Op& op) {
  using sim::OpLabel;
  switch (op.label) {
    case OpLabel::kLinearPre:
    case OpLabel::kLinearPost:
    case OpLabel::kRecomputeMlp:
      return Kind::kLinear;
    case OpLabel::kAttention:
      return Kind::kAttention;
    case OpLabel::kAllToAllQkv:
    case OpLabel::kAllToAllO:
      return Kind::kAllToAll;
    case OpLabel::kRingKv:
    case OpLabel::kReplicaKv:
    case OpLabel::kRingDkv:
    case OpLabel::kReplicaDkv:
      return Kind::kRing;
    default:
      return Kind::kNone;
  }
}

constexpr double kLeft = 130, kPlotWidth = 940, kTop = 62, kRowHeight = 24;
constexpr double kComputeLaneHeight = 12, kCommLaneHeight = 8;

struct Bar {
  int64_t start_ns = 0, end_ns = 0, busy_ns = 0;
  int ops = 0;
};

struct BarKey {
  int row;
  Kind kind;
  sim::Pass pass;
  auto operator<=>(const BarKey&) const = default;
};

// Merges each (row, kind, pass)'s intervals that are closer than `min_gap_ns`.
std::map<BarKey, std::vector<Bar>> MergedBars(const sim::Timeline& timeline,
                                              const std::vector<int>& row_of_rank,
                                              int64_t min_gap_ns) {
  std::map<BarKey, std::vector<Bar>> intervals;
  for (size_t id = 0; id < timeline.layer_ops.size(); ++id) {
    const sim::Op& op = timeline.layer_ops[id];
    const sim::OpTiming& timing = timeline.layer_timings[id];
    const Kind kind = KindOf(op);
    if (kind == Kind::kNone || timing.start_ns < 0 || row_of_rank[op.rank] < 0) continue;
    if (op.kind == sim::OpKind::kMessage && (op.bytes <= 0 || op.rank == op.peer)) continue;
    const int64_t busy = timing.end_ns - timing.start_ns;
    intervals[{row_of_rank[op.rank], kind, op.pass}].push_back(
        {timing.start_ns, timing.end_ns, busy, 1});
  }
  for (auto& [key, bars] : intervals) {
    std::sort(bars.begin(), bars.end(),
              [](const Bar& a, const Bar& b) { return a.start_ns < b.start_ns; });
    std::vector<Bar> merged;
    for (const Bar& bar : bars) {
      if (!merged.empty() && bar.start_ns - merged.back().end_ns < min_gap_ns) {
        merged.back().end_ns = std::max(merged.back().end_ns, bar.end_ns);
        merged.back().busy_ns += bar.busy_ns;
        merged.back().ops += bar.ops;
      } else {
        merged.push_back(bar);
      }
    }
    bars = std::move(merged);
  }
  return intervals;
}

struct TimeScale {
  int64_t makespan_ns;
  double X(int64_t ns) const { return kLeft + kPlotWidth * ns / std::max<int64_t>(1, makespan_ns); }
};

void DrawPassBands(const sim::Timeline& timeline, const TimeScale& scale, double bottom, Svg& svg) {
  std::map<sim::Pass, std::pair<int64_t, int64_t>> extent;
  for (size_t id = 0; id < timeline.layer_ops.size(); ++id) {
    const sim::OpTiming& timing = timeline.layer_timings[id];
    if (timing.start_ns < 0) continue;
    auto [it, inserted] =
        extent.try_emplace(timeline.layer_ops[id].pass, timing.start_ns, timing.end_ns);
    it->second.first = std::min(it->second.first, timing.start_ns);
    it->second.second = std::max(it->second.second, timing.end_ns);
  }
  int band = 0;
  for (const auto& [pass, span] : extent) {
    const double x0 = scale.X(span.first), x1 = scale.X(span.second);
    svg.Rect(x0, kTop - 14, x1 - x0, bottom - kTop + 14, band++ % 2 ? "#F4F4F4" : "#FAFAFA",
             std::string(sim::PassName(pass)) + ": " + Duration(span.first * 1e-9) + " to " +
                 Duration(span.second * 1e-9),
             "class=\"pass\"");
    svg.Text((x0 + x1) / 2, kTop - 4, sim::PassName(pass), "middle", 10);
  }
}

void DrawTimeAxis(const TimeScale& scale, double bottom, Svg& svg) {
  const double makespan = scale.makespan_ns * 1e-9;
  const double step = NiceStep(makespan, 8);
  for (double t = 0; t <= makespan * (1 + 1e-9); t += step) {
    const double x = scale.X(static_cast<int64_t>(t * 1e9));
    svg.Line(x, bottom, x, bottom + 4, kInk);
    svg.Text(x, bottom + 15, Duration(t), "middle", 9);
  }
  svg.Text(kLeft + kPlotWidth / 2, bottom + 30, "simulated time within one layer", "middle");
}

void DrawRows(const std::vector<int>& ranks, const Cluster& cluster, int bottleneck_rank,
              Svg& svg) {
  for (size_t row = 0; row < ranks.size(); ++row) {
    const double y = kTop + row * kRowHeight;
    const bool bottleneck = ranks[row] == bottleneck_rank;
    svg.Text(kLeft - 6, y + 14,
             "rank " + std::to_string(ranks[row]) + " " + cluster.device(ranks[row]).name +
                 (bottleneck ? " *" : ""),
             "end", 9, bottleneck ? "font-weight=\"bold\"" : "");
    svg.Line(kLeft, y + kRowHeight - 1, kLeft + kPlotWidth, y + kRowHeight - 1, "#E0E0E0");
  }
}

void DrawBars(const std::map<BarKey, std::vector<Bar>>& bars, const std::vector<int>& ranks,
              const TimeScale& scale, Svg& svg) {
  for (const auto& [key, list] : bars) {
    const KindStyle& style = kKinds[static_cast<int>(key.kind)];
    const bool compute = style.lane == Lane::kCompute;
    const double y = kTop + key.row * kRowHeight + (compute ? 2 : 3 + kComputeLaneHeight);
    const double height = compute ? kComputeLaneHeight : kCommLaneHeight;
    for (const Bar& bar : list) {
      const std::string title =
          "rank " + std::to_string(ranks[key.row]) + ": " + sim::PassName(key.pass) + " " +
          style.name + ", " + std::to_string(bar.ops) + (bar.ops == 1 ? " op" : " ops") + ", " +
          Duration(bar.busy_ns * 1e-9) + " busy, " + Duration(bar.start_ns * 1e-9) + " to " +
          Duration(bar.end_ns * 1e-9);
      svg.Rect(scale.X(bar.start_ns), y, std::max(0.5, scale.X(bar.end_ns) - scale.X(bar.start_ns)),
               height, style.color, title, "class=\"op\"");
    }
  }
}

void DrawLegend(double y, Svg& svg) {
  double x = kLeft;
  for (const KindStyle& style : kKinds) {
    svg.Rect(x, y - 9, 10, 10, style.color);
    svg.Text(x + 13, y,
             std::string(style.name) +
                 (style.lane == Lane::kCompute ? " (compute lane)" : " (comm lane)"),
             "start", 10);
    x += 160;
  }
}

}  // namespace

std::vector<int> TimelineRanks(const Plan& plan, int num_ranks, int bottleneck_rank) {
  std::vector<int> ranks;
  if (num_ranks <= kMaxTimelineRows) {
    for (int rank = 0; rank < num_ranks; ++rank) ranks.push_back(rank);
    return ranks;
  }
  std::set<int> chosen;
  if (bottleneck_rank >= 0) chosen.insert(bottleneck_rank);
  for (const PlanGroup& group : plan.groups) {
    const bool has_bottleneck =
        std::find(group.ranks.begin(), group.ranks.end(), bottleneck_rank) != group.ranks.end();
    for (const int rank : group.ranks)
      if (has_bottleneck && static_cast<int>(chosen.size()) < kMaxTimelineRows / 2)
        chosen.insert(rank);
  }
  for (const PlanGroup& group : plan.groups)
    if (!group.tokens.empty() && !group.ranks.empty() &&
        static_cast<int>(chosen.size()) < kMaxTimelineRows)
      chosen.insert(group.ranks.front());
  return {chosen.begin(), chosen.end()};
}

std::string TimelineSvg(const sim::SimResult& simulation, const Plan& plan, const Cluster& cluster,
                        int bottleneck_rank) {
  const sim::Timeline& timeline = simulation.timeline;
  const std::vector<int> ranks = TimelineRanks(plan, cluster.num_ranks(), bottleneck_rank);
  std::vector<int> row_of_rank(cluster.num_ranks(), -1);
  for (size_t row = 0; row < ranks.size(); ++row) row_of_rank[ranks[row]] = static_cast<int>(row);
  const TimeScale scale{std::max<int64_t>(1, timeline.layer_makespan_ns)};
  const double bottom = kTop + ranks.size() * kRowHeight;
  Svg svg(kLeft + kPlotWidth + 20, bottom + 62, "timeline",
          "Simulated timeline of one layer, " + std::to_string(ranks.size()) + " of " +
              std::to_string(cluster.num_ranks()) + " ranks");
  svg.Text(10, 16,
           "Simulated layer (forward, recompute, backward): " +
               Duration(timeline.layer_makespan_ns * 1e-9) + "; " + std::to_string(ranks.size()) +
               " of " + std::to_string(cluster.num_ranks()) + " ranks shown; * = bottleneck rank",
           "start", 12);
  DrawPassBands(timeline, scale, bottom, svg);
  DrawRows(ranks, cluster, bottleneck_rank, svg);
  const int64_t pixel_ns =
      std::max<int64_t>(1, scale.makespan_ns / static_cast<int64_t>(kPlotWidth));
  DrawBars(MergedBars(timeline, row_of_rank, pixel_ns), ranks, scale, svg);
  DrawTimeAxis(scale, bottom, svg);
  DrawLegend(bottom + 52, svg);
  return svg.Finish();
}

}  // namespace hexiseq::report
