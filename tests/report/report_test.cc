// The report's drawing code on small hand-made plans (element counts, coordinates computed by
// hand from the plan's geometry), escaping of user strings, bad input, and the page's bounds on
// large clusters (1024 ranks, 1M tokens: size and time).
#include "report/report.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "report/charts.h"
#include "report/figures.h"
#include "report/report_test_util.h"
#include "report/svg.h"
#include "sched/baselines.h"

namespace hexiseq::report {

// Rows of the training options table: a header and one per option weighed, when recorded.
inline int OptionRows(const ReportData& data) {
  return data.options_recorded && !data.options.empty() ? 1 + static_cast<int>(data.options.size())
                                                        : 0;
}

namespace {

using reporttest::Count;
using reporttest::Fills;

TEST(Escape, EveryHtmlSpecialCharacter) {
  EXPECT_EQ(Escape("<a&b>\"c'"), "&lt;a&amp;b&gt;&quot;c&#39;");
  EXPECT_EQ(Escape("plain text 1.5"), "plain text 1.5");
  EXPECT_EQ(Escape(""), "");
}

TEST(Svg, TextAndTitlesAreEscaped) {
  Svg svg(100, 50, "x", "a <label>");
  svg.Rect(1, 2, 3, 4, "#000000", "hover <&>");
  svg.Text(5, 6, "t<e>x&t");
  const std::string out = svg.Finish();
  EXPECT_NE(out.find("aria-label=\"a &lt;label&gt;\""), std::string::npos) << out;
  EXPECT_NE(out.find("<title>hover &lt;&amp;&gt;</title>"), std::string::npos) << out;
  EXPECT_NE(out.find(">t&lt;e&gt;x&amp;t</text>"), std::string::npos) << out;
  EXPECT_EQ(out.find("<label>"), std::string::npos);
}

TEST(Svg, LightenMovesTowardsWhiteOrBlack) {
  EXPECT_EQ(Lighten("#000000", 1.0), "#FFFFFF");
  EXPECT_EQ(Lighten("#FFFFFF", -1.0), "#000000");
  EXPECT_EQ(Lighten("#804020", 0.0), "#804020");
  EXPECT_EQ(Lighten("#000000", 0.5), "#808080");
}

TEST(BarChart, BarsSitOnTheAxisAtTheirValue) {
  BarChart chart;
  chart.categories = {"a", "b"};
  chart.series = {{"s1", "#111111"}, {"s2", "#222222"}};
  chart.values = {{0.5, NAN}, {1.0, 2.0}};  // NaN: no bar; 2.0 clipped to the top
  const std::string svg = BarChartSvg(chart);
  EXPECT_EQ(Count(svg, "class=\"bar\""), 3);
  // Value 0.5 of y_max 1 on a 220-unit axis: height 110, top at 40 + 220 - 110 = 150; the first
  // bar of the first group starts at left + gap / 2 = 65.
  EXPECT_NE(svg.find("<rect x=\"65.0\" y=\"150.0\" width=\"5.0\" height=\"110.0\""),
            std::string::npos)
      << svg;
  // The clipped bar reaches the top of the axis (y = 40) and says its true value.
  EXPECT_NE(svg.find("y=\"40.0\" width=\"5.0\" height=\"220.0\" fill=\"#222222\""),
            std::string::npos);
  EXPECT_NE(svg.find("b s2: 200.0%"), std::string::npos);
}

TEST(BarChart, CategoryColourOverridesTheSeries) {
  BarChart chart;
  chart.categories = {"a", "b", "c"};
  chart.series = {{"s", "#111111"}};
  chart.values = {{0.2}, {0.4}, {0.6}};
  chart.category_colors = {"", "#ABCDEF"};
  const std::string svg = BarChartSvg(chart);
  EXPECT_EQ(Fills(svg, "class=\"bar\""), (std::set<std::string>{"#111111", "#ABCDEF"}));
  EXPECT_EQ(Count(svg, "fill=\"#ABCDEF\""), 1);
}

TEST(BarChart, ReferenceLineAtItsValue) {
  BarChart chart;
  chart.categories = {"x"};
  chart.series = {{"s", "#111111"}};
  chart.values = {{100}};
  chart.format = ValueFormat::kTokensPerSecond;
  chart.y_max = 200;
  chart.reference = 150;
  chart.reference_label = "ideal";
  const std::string svg = BarChartSvg(chart);
  // 150 of 200 on 220 units: 165 above the bottom (260): y = 95.
  EXPECT_NE(svg.find("y1=\"95.0\" x2="), std::string::npos) << svg;
  EXPECT_NE(svg.find("class=\"reference\""), std::string::npos);
}

class TwoGroups : public ::testing::Test {
 protected:
  Cluster cluster_ = reporttest::TwoByTwo();
  Plan plan_ = reporttest::TwoGroupPlan();
};

TEST_F(TwoGroups, PlanIsValid) {
  auto valid = Validate(plan_, cluster_, reporttest::Tiny());
  ASSERT_TRUE(valid.has_value()) << valid.error().message;
}

TEST_F(TwoGroups, PlanMapHasOneCellPerRangeAndHeadRun) {
  const std::string svg = PlanMapSvg(plan_, cluster_);
  // Group 0: 2 ranges x 2 members; group 1: 1 range x 2 members.
  EXPECT_EQ(Count(svg, "class=\"cell\""), 6);
  EXPECT_EQ(Count(svg, "class=\"group-outline\""), 3);
  EXPECT_EQ(Fills(svg, "class=\"cell\"").size(), 4u) << "one colour per rank";
  // Ring positions label each range of each group: #0 twice (head + tail), #1 once.
  EXPECT_EQ(Count(svg, ">#0</text>"), 2);
  EXPECT_EQ(Count(svg, ">#1</text>"), 1);
}

TEST_F(TwoGroups, PlanMapCoordinatesFollowTokensAndHeads) {
  const std::string svg = PlanMapSvg(plan_, cluster_);
  // 4 heads -> rows of min(420 / 4, 14) = 14 units; x = 70 + 1000 * token / 100.
  // Rank 3: group 1's range [25, 75), head 3 -> x 320, width 500, y 40 + 3 * 14 = 82.
  EXPECT_NE(svg.find("<rect x=\"320.0\" y=\"82.0\" width=\"500.0\" height=\"14.0\""),
            std::string::npos)
      << svg;
  // Rank 2: same range, heads 0-2 -> y 40, height 42.
  EXPECT_NE(svg.find("<rect x=\"320.0\" y=\"40.0\" width=\"500.0\" height=\"42.0\""),
            std::string::npos);
  // Rank 1: group 0's tail [75, 100), heads 2-3 -> x 820, width 250, y 68, height 28.
  EXPECT_NE(svg.find("<rect x=\"820.0\" y=\"68.0\" width=\"250.0\" height=\"28.0\""),
            std::string::npos);
  // Group 0's head-chunk outline spans all heads: x 70, width 250, height 56.
  EXPECT_NE(svg.find("<rect x=\"70.0\" y=\"40.0\" width=\"250.0\" height=\"56.0\" fill=\"none\""),
            std::string::npos);
  // Rank 3 computes its group's tokens for its heads (head layout), not only its shard.
  EXPECT_NE(svg.find("rank 3 A100-SXM-80G, group 1 (ring position 1): tokens [25, 75)"),
            std::string::npos);
}

TEST_F(TwoGroups, UnitsAreRanksWithDistinctColours) {
  const DisplayUnits units = UnitsOf(plan_, cluster_);
  EXPECT_FALSE(units.by_node);
  ASSERT_EQ(units.colors.size(), 4u);
  EXPECT_EQ(std::set<std::string>(units.colors.begin(), units.colors.end()).size(), 4u);
  // Members of one group differ in hue: Okabe-Ito orange then sky blue.
  EXPECT_EQ(units.colors[0], kOkabeIto[0]);
  EXPECT_EQ(units.colors[1], kOkabeIto[1]);
}

TEST_F(TwoGroups, ReportHasEverySectionAndTimeline) {
  const auto model = reporttest::Model(cluster_, reporttest::Tiny(), 100);
  auto data = BuildReport(model->problem(), plan_);
  ASSERT_TRUE(data.has_value()) << data.error().message;
  ASSERT_TRUE(data->simulation.has_value()) << data->simulation_error;
  const std::string html = ReportHtml(*data);
  for (const char* id : {"headline", "cluster", "plan-map", "load", "timeline", "strategies"})
    EXPECT_NE(html.find(std::string("<section id=\"") + id + "\">"), std::string::npos) << id;
  EXPECT_EQ(Count(html, "class=\"gpu\""), 4);
  EXPECT_EQ(Count(html, "class=\"cell\""), 6);
  EXPECT_EQ(html.find("<script"), std::string::npos) << "no script";
  EXPECT_EQ(html.find("http://") == std::string::npos ||
                html.find("http://") == html.find("http://www.w3.org/2000/svg"),
            true)
      << "no fetch: the only URL is the SVG namespace";
  // Timeline: 4 rows, passes labelled, bars present.
  const std::string timeline = *FigureSvg(*data, Figure::kTimeline);
  EXPECT_EQ(Count(timeline, "text-anchor=\"end\" font-size=\"9.0\""), 4) << "one label per rank";
  EXPECT_GT(Count(timeline, "class=\"op\""), 4);
  EXPECT_NE(timeline.find(">fwd</text>"), std::string::npos);
  EXPECT_NE(timeline.find(">bwd</text>"), std::string::npos);
  // Load: one time row (5 segments at most) and one memory row per rank.
  const std::string load = LoadSvg(plan_, data->cost, cluster_, 0.1);
  EXPECT_EQ(Count(load, "class=\"reserve\""), 4);
  EXPECT_EQ(Count(load, "class=\"capacity\""), 4);
}

TEST(Report, UserStringsAreEscapedEverywhere) {
  const std::string evil = "<b>x&y\"z'</b>";
  const Cluster cluster = reporttest::TwoByTwo(evil);
  ASSERT_EQ(cluster.name, evil);
  ModelSpec model = reporttest::Tiny();
  model.name = "<script>alert(1)</script>";
  const auto cost = reporttest::Model(cluster, model, 100);
  auto data = BuildReport(cost->problem(), std::nullopt);
  ASSERT_TRUE(data.has_value()) << data.error().message;
  const std::string html = ReportHtml(*data);
  EXPECT_EQ(html.find(evil), std::string::npos);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;b&gt;x&amp;y&quot;z&#39;&lt;/b&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
}

TEST(Report, GivenPlanMustValidate) {
  const Cluster cluster = reporttest::TwoByTwo();
  const auto model = reporttest::Model(cluster, reporttest::Tiny(), 100);
  Plan plan = reporttest::TwoGroupPlan();
  plan.groups[1].members[1].heads = {};  // head 3 missing in group 1
  auto data = BuildReport(model->problem(), plan);
  ASSERT_FALSE(data.has_value());
  EXPECT_EQ(data.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(data.error().message.find("head"), std::string::npos) << data.error().message;
}

TEST(Report, InfeasibleWorkloadExplainsAndDrawsNoPlan) {
  const Cluster cluster = reporttest::OneGpu();
  auto model = LoadModel("llama3-70b");
  ASSERT_TRUE(model.has_value());
  const auto cost = reporttest::Model(cluster, *model, 1 << 20);
  auto data = BuildReport(cost->problem(), std::nullopt);
  ASSERT_TRUE(data.has_value()) << data.error().message;
  EXPECT_FALSE(data->plan.has_value());
  EXPECT_NE(data->no_plan_reason.find("rank 0"), std::string::npos) << data->no_plan_reason;
  const std::string html = ReportHtml(*data);
  EXPECT_NE(html.find("No plan fits this workload."), std::string::npos);
  EXPECT_EQ(Count(html, "Not drawn: no plan fits"), 3);
  EXPECT_EQ(Count(html, "class=\"cell\""), 0);
  EXPECT_EQ(Count(html, "class=\"bar\""), 0) << "no strategy fits, no bar";
  EXPECT_GE(Count(html, "<li><b>"), 5) << "every strategy's reason listed";
  auto figure = FigureSvg(*data, Figure::kPlanMap);
  ASSERT_FALSE(figure.has_value());
  EXPECT_EQ(figure.error().code, ErrorCode::kInfeasible);
  EXPECT_TRUE(FigureSvg(*data, Figure::kStrategies).has_value());
}

TEST(Report, GivenPlanThatDoesNotFitIsDrawnAndFlagged) {
  const Cluster cluster = reporttest::TwoByTwo();
  auto model = LoadModel("llama3-70b");
  ASSERT_TRUE(model.has_value());
  const auto cost = reporttest::Model(cluster, *model, 1 << 20);
  const StrategyResult ring = RingBaseline(cost->problem());
  ASSERT_TRUE(ring.applicable);
  ASSERT_FALSE(ring.cost.feasible) << "4 GPUs cannot hold llama3-70b at 1M tokens";
  auto data = BuildReport(cost->problem(), ring.plan, {.simulate = SimulatePolicy::kNever});
  ASSERT_TRUE(data.has_value()) << data.error().message;
  const std::string html = ReportHtml(*data);
  EXPECT_NE(html.find("This plan does not fit memory."), std::string::npos);
  size_t ranges = 0;  // one-rank groups holding all heads: one cell per token range
  for (const PlanGroup& group : ring.plan.groups) ranges += group.tokens.size();
  EXPECT_EQ(Count(html, "class=\"cell\""), static_cast<int>(ranges));
  EXPECT_GE(ranges, 7u) << "zigzag: head and tail chunks (the middle two may merge)";
  // Every rank is over its usable capacity: its capacity line is drawn in vermillion.
  EXPECT_EQ(Count(html, std::string("stroke=\"") + kOkabeIto[5] +
                            "\" stroke-width=\"2.5\" "
                            "class=\"capacity\""),
            4);
  EXPECT_NE(html.find("No timeline: not simulated (--simulate never)"), std::string::npos);
}

TEST(Report, OneGpuHasOneCellColour) {
  const Cluster cluster = reporttest::OneGpu();
  const auto cost = reporttest::Model(cluster, reporttest::Tiny(), 4096);
  auto data = BuildReport(cost->problem(), std::nullopt);
  ASSERT_TRUE(data.has_value()) << data.error().message;
  ASSERT_TRUE(data->plan.has_value()) << data->no_plan_reason;
  const std::string svg = *FigureSvg(*data, Figure::kPlanMap);
  EXPECT_EQ(Fills(svg, "class=\"cell\"").size(), 1u);
  EXPECT_TRUE(svg.starts_with("<?xml"));
}

TEST(Report, ParseFigureNamesTheFlag) {
  EXPECT_EQ(*ParseFigure("plan-map"), Figure::kPlanMap);
  EXPECT_EQ(*ParseFigure("timeline"), Figure::kTimeline);
  EXPECT_EQ(*ParseFigure("strategies"), Figure::kStrategies);
  auto bad = ParseFigure("gantt");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.error().message.find("--figure = \"gantt\""), std::string::npos);
}

TEST(Report, TimelineRanksKeepTheBottleneckGroup) {
  Plan plan;
  for (int group = 0; group < 64; ++group) {
    PlanGroup g;
    g.tokens = {{group, group + 1}};
    for (int member = 0; member < 8; ++member) g.ranks.push_back(8 * group + member);
    plan.groups.push_back(g);
  }
  const std::vector<int> ranks = TimelineRanks(plan, 512, 301);
  EXPECT_LE(static_cast<int>(ranks.size()), kMaxTimelineRows);
  for (int rank = 296; rank < 304; ++rank)
    EXPECT_TRUE(std::count(ranks.begin(), ranks.end(), rank)) << rank;
  EXPECT_TRUE(std::is_sorted(ranks.begin(), ranks.end()));
  EXPECT_EQ(TimelineRanks(plan, 8, 3).size(), 8u);
}

// 1024 ranks at 1M tokens: one entry per node, bounded size, a few seconds.
TEST(Report, LargeClusterIsBoundedAndFast) {
  const Cluster cluster = reporttest::EightGpuNodes(128);
  ASSERT_EQ(cluster.num_ranks(), 1024);
  auto model = LoadModel("llama3-70b");
  ASSERT_TRUE(model.has_value());
  const auto cost = reporttest::Model(cluster, *model, 1 << 20);
  const auto start = std::chrono::steady_clock::now();
  auto data = BuildReport(cost->problem(), std::nullopt);
  ASSERT_TRUE(data.has_value()) << data.error().message;
  const std::string html = ReportHtml(*data);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
#ifdef __SANITIZE_ADDRESS__
  // scripts/sanitize's -O1 build with ASan+UBSan takes 12-13 s here: a bound on blow-ups only.
  constexpr double kMaxSeconds = 60;
#else
  constexpr double kMaxSeconds = 5;
#endif
  constexpr size_t kMaxBytes = 5 << 20;
  EXPECT_LE(seconds, kMaxSeconds);
  EXPECT_LE(html.size(), kMaxBytes);
  ASSERT_TRUE(data->plan.has_value());
  EXPECT_LE(Fills(html, "class=\"cell\"").size(), 128u) << "one colour per node";
  EXPECT_EQ(Count(html, "class=\"gpu\""), 2 * 3 * 8) << "3 nodes drawn per kind, then +N more";
  EXPECT_NE(html.find("+ 61 more H100-SXM nodes"), std::string::npos);
  EXPECT_NE(html.find("No timeline: not simulated: 1024 ranks"), std::string::npos);
  // One table row per node (and the replica and compare tables), not per rank.
  EXPECT_EQ(Count(html, "<tr>"), 1 + 128 + 1 + NumReplicas(*data->plan) + 1 +
                                     static_cast<int>(data->strategies.size()) + OptionRows(*data));
  std::printf("1024 ranks, 1M tokens: %.2f s, %zu bytes\n", seconds, html.size());
}

}  // namespace
}  // namespace hexiseq::report

namespace hexiseq::report {
namespace {

// Every bundled example cluster gives a complete page: every rank's cells in the plan map (one
// colour per rank with heads), a timeline, every strategy in the table.
TEST(Report, EveryExampleCluster) {
  const std::string source = HEXISEQ_SOURCE_PATH;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(source + "/examples/clusters"))
    if (entry.path().extension() == ".yaml") files.push_back(entry.path().string());
  ASSERT_GE(files.size(), 4u);
  auto model = LoadModel("llama3-8b");
  ASSERT_TRUE(model.has_value());
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    auto cluster = LoadCluster(file, DeviceCatalog());
    ASSERT_TRUE(cluster.has_value()) << cluster.error().message;
    const auto cost = reporttest::Model(*cluster, *model, 64 << 10);
    auto data = BuildReport(cost->problem(), std::nullopt);
    ASSERT_TRUE(data.has_value()) << data.error().message;
    ASSERT_TRUE(data->plan.has_value()) << data->no_plan_reason;
    ASSERT_TRUE(data->simulation.has_value()) << data->simulation_error;
    size_t ranks_with_heads = 0;
    for (const PlanGroup& group : data->plan->groups)
      for (const PlanMember& member : group.members)
        ranks_with_heads += !member.heads.empty() && !group.tokens.empty();
    const std::string html = ReportHtml(*data);
    EXPECT_EQ(Fills(html, "class=\"cell\"").size(), ranks_with_heads);
    EXPECT_EQ(Count(html, "class=\"gpu\""), cluster->num_ranks());
    EXPECT_GT(Count(html, "class=\"op\""), 0);
    EXPECT_EQ(Count(html, "link override: "), static_cast<int>(cluster->links.size()));
    EXPECT_EQ(Fills(html, "class=\"bar\"").count(kOkabeIto[0]), 1u) << "the plan shown stands out";
    constexpr int kHeaderRows = 4;  // replica table, rank table, simulated terms, compare table
    EXPECT_EQ(Count(html, "<tr>"),
              kHeaderRows + NumReplicas(*data->plan) + cluster->num_ranks() -
                  static_cast<int>(data->plan->left_out.size()) +  // <tr class="left-out">
                  static_cast<int>(data->simulation->terms.size() + data->strategies.size()) +
                  OptionRows(*data))
        << NumReplicas(*data->plan) << " replicas, " << data->simulation->terms.size() << " terms, "
        << data->strategies.size() << " strategies, " << data->options.size() << " options";
  }
}

}  // namespace
}  // namespace hexiseq::report
