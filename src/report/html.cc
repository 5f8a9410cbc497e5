// The report page: sections in a fixed order (headline, cluster, plan map, load, timeline,
// strategies), inline SVG figures, inline CSS for a 1280 px screen and an A4 print, no script.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "report/figures.h"
#include "report/svg.h"
#include "report/training.h"
#include "spec/units.h"

namespace hexiseq::report {
namespace {

constexpr const char* kCss = R"css(
body { font-family: sans-serif; color: #222; max-width: 1240px; margin: 0 auto; padding: 0 20px;
       line-height: 1.4; }
h1 { font-size: 22px; margin: 16px 0 4px; }
h2 { font-size: 18px; border-bottom: 1px solid #ccc; padding-bottom: 2px; margin-top: 28px; }
section { margin-bottom: 12px; }
svg { max-width: 100%; height: auto; display: block; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.headline { display: grid; grid-template-columns: repeat(4, 1fr); gap: 8px; }
.headline div { background: #f4f4f4; border-radius: 4px; padding: 6px 10px; }
.headline b { display: block; font-size: 20px; }
.headline span { font-size: 12px; color: #555; }
.banner { background: #fde8d8; border-left: 5px solid #D55E00; padding: 8px 12px; margin: 8px 0; }
.note { font-size: 13px; color: #444; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
th { background: #f0f0f0; }
td.name, th.name { text-align: left; }
.swatch { display: inline-block; width: 10px; height: 10px; border: 1px solid #444; }
.scroll { max-height: 420px; overflow: auto; }
tr.left-out td { color: #888; background: #f4f4f4; }
.left-out b { color: #666; }
@media print {
  @page { size: A4; margin: 12mm; }
  body { max-width: none; padding: 0; font-size: 11px; -webkit-print-color-adjust: exact;
         print-color-adjust: exact; }
  .scroll { max-height: none; overflow: visible; }
  section { break-inside: avoid-page; }
  h2 { break-after: avoid; }
  .headline { grid-template-columns: repeat(4, 1fr); }
}
)css";

std::string Percent(double fraction) { return Fmt("%.1f%%", 100 * fraction); }

std::string Cell(const std::string& text, bool name = false) {
  return std::string(name ? "<td class=\"name\">" : "<td>") + Escape(text) + "</td>";
}

std::string HeaderRow(const std::vector<std::string>& names) {
  std::string out = "<tr>";
  for (size_t i = 0; i < names.size(); ++i)
    out += std::string(i < 2 ? "<th class=\"name\">" : "<th>") + Escape(names[i]) + "</th>";
  return out + "</tr>\n";
}

std::string Tile(const std::string& value, const std::string& label) {
  return "<div><b>" + Escape(value) + "</b><span>" + Escape(label) + "</span></div>";
}

std::string WorkloadText(const ReportData& data) {
  const Workload& w = data.workload;
  return FormatTokens(w.seq_len) + " tokens x batch " + std::to_string(w.batch) + ", recompute " +
         RecomputeName(w.recompute) + ", ZeRO " + std::to_string(w.zero_stage) + ", reserve " +
         Percent(w.memory_reserve);
}

std::string HeadlineSection(const ReportData& data) {
  std::ostringstream html;
  html << "<section id=\"headline\"><h2>Headline</h2>\n<p>Cluster <b>" << Escape(data.cluster.name)
       << "</b> (" << data.cluster.num_ranks() << " GPUs), model <b>" << Escape(data.model.name)
       << "</b> (" << data.model.layers << " layers, " << data.model.heads << " heads, "
       << data.model.kv_heads << " KV heads), " << Escape(WorkloadText(data)) << ".</p>\n";
  if (!data.plan) {
    html << "<div class=\"banner\"><b>No plan fits this workload.</b> "
         << Escape(data.no_plan_reason) << "</div>\n<div class=\"headline\">"
         << Tile(Tps(data.ideal_tokens_per_second), "ideal tokens/s (aggregate compute)")
         << Tile(Fmt("%.2f s", data.planning_seconds), "planning time") << "</div></section>\n";
    return html.str();
  }
  const Plan& plan = *data.plan;
  if (data.time_limit_reached)
    html << "<div class=\"banner\"><b>The time limit was reached.</b> The searches stopped early: "
            "this is the best plan found by then, and strategies not scored say so.</div>\n";
  html << "<p>Plan shown: <b>" << Escape(plan.strategy) << "</b> (" << Escape(plan.config)
       << "), from " << Escape(data.plan_source) << ".</p>\n";
  if (!data.cost.feasible)
    html << "<div class=\"banner\"><b>This plan does not fit memory.</b> "
         << Escape(data.cost.infeasible_reason) << "</div>\n";
  const double speedup = data.best_baseline_seconds > 0 && data.cost.iteration_seconds > 0
                             ? data.best_baseline_seconds / data.cost.iteration_seconds
                             : 0;
  const double simulated = data.simulation ? data.simulation->tokens_per_second : 0;
  html << "<div class=\"headline\">"
       << Tile(Tps(data.cost.tokens_per_second), "tokens/s predicted (cost model)")
       << Tile(Tps(simulated), "tokens/s simulated")
       << Tile(speedup > 0 ? Fmt("%.3fx", speedup) : "-",
               "over the best baseline (" +
                   (data.best_baseline.empty() ? "none fits" : data.best_baseline) + ")")
       << Tile(
              Percent(data.ideal_iteration_seconds / std::max(1e-300, data.cost.iteration_seconds)),
              "of ideal (" + Tps(data.ideal_tokens_per_second) + " tokens/s)")
       << Tile(Duration(data.cost.iteration_seconds), "per iteration (predicted)")
       << Tile(Percent(data.cost.max_memory_fraction), "largest memory use of capacity")
       << Tile(Fmt("%.2f s", data.planning_seconds), data.plan_source == "the hexiseq scheduler"
                                                         ? "planning time"
                                                         : "planning time (scheduler, not shown)")
       << Tile(std::to_string(plan.groups.size()), "all-to-all groups (ring order = list order)")
       << Tile(ReplicasCell(plan), "data-parallel replicas (sequences each)")
       << Tile(plan.left_out.empty() ? "none" : LeftOutCell(plan), "left out")
       << Tile(TrainingCell(plan), "ZeRO stage, recompute") << "</div></section>\n";
  return html.str();
}

std::string ReplicaTable(const ReportData& data) {
  const Plan& plan = *data.plan;
  std::string html = "<table class=\"replicas\">" +
                     HeaderRow({"replica", "devices", "ranks", "groups", "sequences", "busy s"});
  for (const ReplicaSummary& replica : SummarizeReplicas(plan, data.cost))
    html += "<tr>" + Cell(std::to_string(replica.replica), true) +
            Cell(DevicesInWords(replica.ranks, data.cluster), true) +
            Cell(IdRanges(replica.ranks)) + Cell(std::to_string(replica.groups)) +
            Cell(std::to_string(replica.sequences)) + Cell(Fmt("%.3f", replica.busy_seconds)) +
            "</tr>\n";
  return html + "</table>\n";
}

std::string OptionsTable(const std::vector<TrainingOption>& options) {
  std::string html = "<div class=\"scroll\"><table class=\"options\">" +
                     HeaderRow({"configuration", "replicas", "left out", "ZeRO", "recompute",
                                "feasible", "iter s"});
  for (const TrainingOption& option : options)
    html += "<tr>" + Cell(option.name, true) + Cell(std::to_string(option.replicas), true) +
            Cell(std::to_string(option.left_out)) + Cell(std::to_string(option.zero_stage)) +
            Cell(option.recompute) + Cell(option.feasible ? "yes" : "no") +
            Cell(option.feasible ? Fmt("%.3f", option.iteration_seconds) : "-") + "</tr>\n";
  return html + "</table></div>\n";
}

std::string TrainingSection(const ReportData& data) {
  if (!data.plan) return "";
  const Plan& plan = *data.plan;
  std::string html = "<section id=\"training\"><h2>Training configuration</h2>\n<p>ZeRO <b>" +
                     std::to_string(plan.zero_stage) + "</b> (model state sharded over " +
                     std::to_string(data.shard_ranks) + " ranks), recompute <b>" +
                     Escape(plan.recompute) + "</b>, " + ReplicasInWords(plan) +
                     "; the iteration is the slowest replica's busy time plus the exposed "
                     "gradient sync over the ranks that take part.</p>\n" +
                     ReplicaTable(data);
  html += plan.left_out.empty() ? std::string("<p class=\"left-out\">Left out: none.</p>\n")
                                : "<p class=\"left-out\"><b>Left out</b> (grey in the figures): " +
                                      Escape(RanksWord(plan.left_out) + " (" +
                                             DevicesInWords(plan.left_out, data.cluster) + ")") +
                                      ": in no replica, no model state, no gradient sync.</p>\n";
  if (!data.options_recorded)
    return html +
           "<p class=\"note\">The configurations weighed are not recorded for a given plan "
           "(<code>hexiseq plan</code> prints them).</p></section>\n";
  if (data.options.empty())
    return html +
           "<p class=\"note\">The scheduler took the training configuration as given (no "
           "alternatives weighed).</p></section>\n";
  html += "<ul class=\"decision\">\n";
  for (const std::string& line : DecisionLines(data.options))
    html += "<li>" + Escape(line) + "</li>\n";
  return html + "</ul>\n" + OptionsTable(data.options) + "</section>\n";
}

std::string ClusterSection(const ReportData& data) {
  return "<section id=\"cluster\"><h2>Cluster</h2>\n" + ClusterMapSvg(data.cluster) +
         "<p class=\"note\">Hover a GPU for its rank, device, memory and peak.</p></section>\n";
}

// KV heads of `member` that another member of the same group also needs (replicated).
int ReplicatedKvHeads(const Plan& plan, const PlanGroup& group, const PlanMember& member) {
  const std::vector<int> own = KvHeadsOf(member.heads, plan.num_heads, plan.num_kv_heads);
  std::set<int> others;
  for (const PlanMember& other : group.members)
    if (other.rank != member.rank)
      for (const int kv : KvHeadsOf(other.heads, plan.num_heads, plan.num_kv_heads))
        others.insert(kv);
  return static_cast<int>(
      std::count_if(own.begin(), own.end(), [&](int kv) { return others.count(kv) > 0; }));
}

std::string RankTable(const ReportData& data, const DisplayUnits& units) {
  const Plan& plan = *data.plan;
  std::ostringstream html;
  html << "<div class=\"scroll\"><table class=\"ranks\">\n"
       << HeaderRow({"rank", "device", "replica", "group", "tokens", "ranges", "heads", "head ids",
                     "KV heads", "replicated KV", "memory"});
  for (size_t g = 0; g < plan.groups.size(); ++g)
    for (const PlanMember& m : plan.groups[g].members) {
      const RankCost& rc = data.cost.ranks[m.rank];
      html << "<tr><td class=\"name\"><span class=\"swatch\" style=\"background:"
           << units.colors[m.rank] << "\"></span> " << m.rank << "</td>"
           << Cell(data.cluster.device(m.rank).name, true)
           << Cell(std::to_string(plan.groups[g].replica)) << Cell(std::to_string(g))
           << Cell(std::to_string(TotalTokens(m.tokens))) << Cell(std::to_string(m.tokens.size()))
           << Cell(std::to_string(m.heads.size())) << Cell(IdRanges(m.heads))
           << Cell(std::to_string(KvHeadsOf(m.heads, plan.num_heads, plan.num_kv_heads).size()))
           << Cell(std::to_string(ReplicatedKvHeads(plan, plan.groups[g], m)))
           << Cell(Percent(rc.memory_bytes / std::max(1.0, rc.memory_capacity_bytes))) << "</tr>\n";
    }
  for (const int rank : plan.left_out)
    html << "<tr class=\"left-out\"><td class=\"name\"><span class=\"swatch\" "
            "style=\"background:"
         << units.colors[rank] << "\"></span> " << rank << "</td>"
         << Cell(data.cluster.device(rank).name, true) << "<td colspan=\"9\">left out: no model "
         << "state, no gradient sync</td></tr>\n";
  html << "</table></div>\n";
  return html.str();
}

std::string NodeTable(const ReportData& data, const DisplayUnits& units) {
  const Plan& plan = *data.plan;
  std::vector<int> group_of_rank(data.cluster.num_ranks(), -1);
  std::vector<const PlanMember*> member_of_rank(data.cluster.num_ranks(), nullptr);
  for (size_t g = 0; g < plan.groups.size(); ++g)
    for (const PlanMember& m : plan.groups[g].members) {
      group_of_rank[m.rank] = static_cast<int>(g);
      member_of_rank[m.rank] = &m;
    }
  std::ostringstream html;
  html << "<div class=\"scroll\"><table class=\"ranks\">\n"
       << HeaderRow({"node", "device", "ranks", "groups", "tokens", "heads (sum)", "max memory"});
  for (size_t unit = 0; unit < units.ranks.size(); ++unit) {
    const std::vector<int>& ranks = units.ranks[unit];
    std::set<int> groups;
    int64_t tokens = 0;
    size_t heads = 0;
    double memory = 0;
    for (const int rank : ranks) {
      if (group_of_rank[rank] >= 0) groups.insert(group_of_rank[rank]);
      if (member_of_rank[rank]) tokens += TotalTokens(member_of_rank[rank]->tokens);
      if (member_of_rank[rank]) heads += member_of_rank[rank]->heads.size();
      const RankCost& rc = data.cost.ranks[rank];
      memory = std::max(memory, rc.memory_bytes / std::max(1.0, rc.memory_capacity_bytes));
    }
    html << "<tr><td class=\"name\"><span class=\"swatch\" style=\"background:"
         << units.colors[unit] << "\"></span> " << unit << "</td>"
         << Cell(data.cluster.device(ranks.front()).name, true)
         << Cell(std::to_string(ranks.front()) + "-" + std::to_string(ranks.back()))
         << Cell(std::to_string(groups.size())) << Cell(std::to_string(tokens))
         << Cell(std::to_string(heads)) << Cell(Percent(memory)) << "</tr>\n";
  }
  html << "</table></div>\n";
  return html.str();
}

std::string NotDrawn(const char* id, const char* title) {
  return std::string("<section id=\"") + id + "\"><h2>" + title +
         "</h2>\n<p class=\"banner\">Not drawn: no plan fits this workload (see the headline and "
         "the strategies below for each reason).</p></section>\n";
}

std::string PlanMapSection(const ReportData& data) {
  if (!data.plan) return NotDrawn("plan-map", "Plan map");
  const DisplayUnits units = UnitsOf(*data.plan, data.cluster);
  std::string html =
      "<section id=\"plan-map\"><h2>Plan map</h2>\n<p class=\"note\">Inside attention (head "
      "layout) each group computes its token ranges for all heads, split among its members by "
      "head. Two ranges per group are the zigzag head + tail chunks that balance causal work. "
      "Hover a cell for its rank, tokens and heads.";
  if (units.by_node)
    html += " With " + std::to_string(data.cluster.num_ranks()) +
            " ranks, cells and the table show nodes (one colour per node) so the page stays "
            "readable.";
  html += "</p>\n" + PlanMapSvg(*data.plan, data.cluster);
  html += units.by_node ? NodeTable(data, units) : RankTable(data, units);
  return html + "</section>\n";
}

std::string BottleneckText(const ReportData& data) {
  if (data.cost.bottleneck_rank < 0) return "";
  return "Bottleneck (cost model, as <code>hexiseq explain</code>): rank " +
         std::to_string(data.cost.bottleneck_rank) + " (" +
         Escape(data.cluster.device(data.cost.bottleneck_rank).name) +
         "), phase: " + Escape(data.cost.bottleneck_phase) + ".";
}

std::string LoadSection(const ReportData& data) {
  if (!data.plan) return NotDrawn("load", "Per-rank load and memory");
  const bool by_node = data.cluster.num_ranks() > kMaxRanksShownSingly;
  return "<section id=\"load\"><h2>Per-rank load and memory</h2>\n<p class=\"note\">" +
         BottleneckText(data) +
         (by_node ? " One bar per node: the node's busiest rank (time) and its fullest rank "
                    "(memory)."
                  : "") +
         " * marks the bottleneck rank.</p>\n" +
         LoadSvg(*data.plan, data.cost, data.cluster, data.workload.memory_reserve) +
         "</section>\n";
}

std::string TermsTable(const sim::SimResult& simulation) {
  std::string html =
      "<table class=\"terms\">" + HeaderRow({"term", "model s", "simulated s", "difference"});
  for (const sim::SimTerm& t : simulation.terms)
    html += "<tr>" + Cell(t.name, true) + Cell(Fmt("%.4f", t.model_seconds)) +
            Cell(Fmt("%.4f", t.sim_seconds)) + Cell(Fmt("%+.4f", t.sim_seconds - t.model_seconds)) +
            "</tr>\n";
  return html + "</table>\n";
}

std::string TimelineSection(const ReportData& data) {
  if (!data.plan) return NotDrawn("timeline", "Timeline");
  std::string html = "<section id=\"timeline\"><h2>Timeline</h2>\n";
  if (!data.simulation)
    return html + "<p class=\"banner\">No timeline: " + Escape(data.simulation_error) +
           "</p></section>\n";
  const sim::SimTerm* largest = nullptr;
  for (const sim::SimTerm& t : data.simulation->terms)
    if (!largest || t.sim_seconds > largest->sim_seconds) largest = &t;
  html += "<p class=\"note\">" + BottleneckText(data) +
          (largest ? " Largest simulated term of the iteration: " + Escape(largest->name) + " (" +
                         Escape(Duration(largest->sim_seconds)) + ")."
                   : "") +
          " Hover a bar for its operations; bars closer than a pixel are merged.</p>\n";
  html += TimelineSvg(*data.simulation, *data.plan, data.cluster, data.cost.bottleneck_rank);
  return html + TermsTable(*data.simulation) + "</section>\n";
}

std::string CompareTable(const ReportData& data) {
  std::string html =
      "<table class=\"compare\">" +
      HeaderRow({"strategy", "config", "replicas", "left out", "training", "feasible", "iter s",
                 "tokens/s", "vs best baseline", "of ideal", "max mem", "plan s"});
  for (const StrategyRow& r : data.strategies) {
    const bool scored = r.iteration_seconds > 0;
    html += "<tr>" + Cell(r.strategy, true) + Cell(scored ? r.config : "-", true) +
            Cell(r.replicas) + Cell(r.left_out) + Cell(r.training) +
            Cell(!r.applicable ? "n/a"
                 : r.feasible  ? "yes"
                               : "no") +
            Cell(scored ? Fmt("%.3f", r.iteration_seconds) : "-") +
            Cell(scored ? Fmt("%.0f", r.tokens_per_second) : "-") +
            Cell(scored && data.best_baseline_seconds > 0
                     ? Fmt("%.3fx", data.best_baseline_seconds / r.iteration_seconds)
                     : "-") +
            Cell(scored ? Percent(data.ideal_iteration_seconds / r.iteration_seconds) : "-") +
            Cell(scored ? Percent(r.max_memory_fraction) : "-") +
            Cell(Fmt("%.2f", r.planning_seconds)) + "</tr>\n";
  }
  return html + "</table>\n";
}

std::string StrategiesSection(const ReportData& data) {
  std::string html = "<section id=\"strategies\"><h2>Strategies</h2>\n" + StrategiesSvg(data);
  std::string reasons;
  for (const StrategyRow& r : data.strategies)
    if (!r.feasible)
      reasons += "<li><b>" + Escape(r.strategy) + "</b>: " +
                 (!r.applicable                        ? "not applicable: "
                  : r.reason.starts_with("infeasible") ? ""
                                                       : "infeasible: ") +
                 Escape(r.reason) + "</li>\n";
  if (!reasons.empty())
    html += "<p>Not drawn (no feasible plan):</p><ul class=\"infeasible\">\n" + reasons + "</ul>\n";
  return html + CompareTable(data) + "</section>\n";
}

}  // namespace

std::string ReportHtml(const ReportData& data) {
  const std::string title = "HexiSeq report: " + data.cluster.name + ", " + data.model.name + ", " +
                            FormatTokens(data.workload.seq_len) + " tokens";
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
       << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
       << "<title>" << Escape(title) << "</title>\n<style>" << kCss << "</style></head>\n<body>\n"
       << "<h1>" << Escape(title) << "</h1>\n"
       << HeadlineSection(data) << TrainingSection(data) << ClusterSection(data)
       << PlanMapSection(data) << LoadSection(data) << TimelineSection(data)
       << StrategiesSection(data)
       << "<p class=\"note\">Written by <code>hexiseq report</code>. Predictions come from the "
          "analytical cost model, the timeline from the discrete-event simulator.</p>\n"
       << "</body></html>\n";
  return html.str();
}

Result<Figure> ParseFigure(std::string_view name) {
  if (name == "plan-map") return Figure::kPlanMap;
  if (name == "timeline") return Figure::kTimeline;
  if (name == "strategies") return Figure::kStrategies;
  return InvalidArgument("--figure = \"" + std::string(name) +
                         "\": unknown figure (rule: one of plan-map, timeline, strategies)");
}

Result<std::string> FigureSvg(const ReportData& data, Figure figure) {
  constexpr const char* kProlog = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  if (figure == Figure::kStrategies) return kProlog + StrategiesSvg(data);
  if (!data.plan)
    return Infeasible("no plan to draw: " + data.no_plan_reason +
                      " (hint: --figure strategies still shows every strategy's reason)");
  if (figure == Figure::kPlanMap) return kProlog + PlanMapSvg(*data.plan, data.cluster);
  if (!data.simulation) return NotSupported("no timeline: " + data.simulation_error);
  return kProlog +
         TimelineSvg(*data.simulation, *data.plan, data.cluster, data.cost.bottleneck_rank);
}

}  // namespace hexiseq::report
