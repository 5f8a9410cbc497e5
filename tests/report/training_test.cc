// The training configuration in words (report/training.h) and where the report shows it: a
// hand-made two-replica plan with a left-out rank (the plan map's bands, the grey left-out rank,
// the tables), the decision lines from hand-made options, and docs/evaluation.md's table of
// every strategy's configuration.
#include "report/training.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "report/evaluation.h"
#include "report/figures.h"
#include "report/report.h"
#include "report/report_test_util.h"
#include "report/svg.h"

namespace hexiseq::report {
namespace {

using reporttest::Count;
using reporttest::Fills;

// The y and height of the first plan-map cell whose hover title starts with `who`.
std::pair<double, double> CellBox(const std::string& svg, const std::string& who) {
  const size_t title = svg.find("<title>" + who);
  EXPECT_NE(title, std::string::npos) << who;
  if (title == std::string::npos) return {0, 0};
  const size_t rect = svg.rfind("<rect", title);
  auto attribute = [&](const std::string& name) {
    const size_t at = svg.find(" " + name + "=\"", rect) + name.size() + 3;
    return std::stod(svg.substr(at, svg.find('"', at) - at));
  };
  return {attribute("y"), attribute("height")};
}

CostModel BatchOfThree(const Cluster& cluster) {
  Workload workload;
  workload.seq_len = 100;
  workload.batch = 3;
  return CostModel(cluster, reporttest::Tiny(), workload);
}

TEST(TrainingWords, RangesAndDevices) {
  EXPECT_EQ(IdRanges({}), "-");
  EXPECT_EQ(IdRanges({0, 1, 2, 3, 5, 8, 9}), "0-3,5,8-9");
  EXPECT_EQ(RanksWord({7}), "rank 7");
  EXPECT_EQ(RanksWord({4, 5, 7}), "ranks 4-5,7");
  const Cluster two = reporttest::TwoByTwo();
  EXPECT_EQ(DevicesInWords({0, 1, 2}, two), "2 x H100-SXM on node 0 + 1 x A100-SXM-80G on node 1");
  EXPECT_EQ(DevicesInWords({3}, two), "1 x A100-SXM-80G on node 1");
  // 4 nodes of 8: nodes 0-1 H100, nodes 2-3 A100; runs of nodes of one type merge.
  const Cluster big = reporttest::EightGpuNodes(4);
  std::vector<int> all(32);
  for (int rank = 0; rank < 32; ++rank) all[rank] = rank;
  EXPECT_EQ(DevicesInWords(all, big),
            "16 x H100-SXM on nodes 0-1 + 16 x A100-SXM-80G on nodes 2-3");
  EXPECT_EQ(DevicesInWords({0, 16}, big), "1 x H100-SXM on node 0 + 1 x A100-SXM-80G on node 2");
}

TEST(TrainingWords, CellsOfOneAndTwoReplicas) {
  const Plan one = reporttest::TwoGroupPlan();
  EXPECT_EQ(ReplicasCell(one), "dp 1");
  EXPECT_EQ(LeftOutCell(one), "-");
  EXPECT_EQ(TrainingCell(one), "zero 3, full");
  EXPECT_EQ(ReplicasInWords(one), "1 data-parallel replica, the whole batch of 1 sequence");
  EXPECT_EQ(ReplicasInWords(reporttest::TwoReplicaPlan()),
            "2 data-parallel replicas, batch 3 split 2 + 1");
  Plan two = reporttest::TwoReplicaPlan();
  EXPECT_EQ(ReplicasCell(two), "dp 2 (2+1)");
  EXPECT_EQ(LeftOutCell(two), "rank 3");
  two.replica_sequences = {2, 2};
  two.batch = 4;
  EXPECT_EQ(ReplicasCell(two), "dp 2 (2 each)");
  Plan many = two;  // nine replicas, unequal: the split as a range
  many.replica_sequences = {3, 1, 1, 1, 1, 1, 1, 1, 2};
  EXPECT_EQ(ReplicasCell(many), "dp 9 (1-3 each)");
  many.replica_sequences.pop_back();
  EXPECT_EQ(ReplicasCell(many), "dp 8 (3+1+1+1+1+1+1+1)");
  two.zero_stage = 1;
  two.recompute = "selective";
  EXPECT_EQ(TrainingCell(two), "zero 1, selective");
  two.left_out = {0, 1, 2, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21};  // the list is cut, not the count
  EXPECT_EQ(LeftOutCell(two), "13 ranks: 0-3,5,7,9,11,13,15,17...");
}

// Each replica's busy time is that replica scored alone (batch = its sequences, ZeRO sharded over
// every participant); the iteration is the slowest of them plus the exposed gradient sync.
TEST(TrainingWords, ReplicaBusyTimesAreEachReplicaScoredAlone) {
  const Cluster cluster = reporttest::TwoByTwo();
  const Plan plan = reporttest::TwoReplicaPlan();
  ASSERT_TRUE(Validate(plan, cluster, reporttest::Tiny()).has_value());
  const CostModel model = BatchOfThree(cluster);
  const PlanCost cost = model.Evaluate(plan);
  const std::vector<ReplicaSummary> replicas = SummarizeReplicas(plan, cost);
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_EQ(replicas[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(replicas[1].ranks, (std::vector<int>{2}));
  EXPECT_EQ(replicas[0].sequences, 2);
  EXPECT_EQ(replicas[1].sequences, 1);
  EXPECT_EQ(replicas[0].groups, 1);
  double slowest = 0;
  for (const ReplicaSummary& replica : replicas) {
    Workload alone = model.workload();
    alone.batch = replica.sequences;
    alone.shard_ranks = 3;
    const PlanCost part =
        CostModel(cluster, reporttest::Tiny(), alone).Evaluate(ReplicaPlan(plan, replica.replica));
    EXPECT_NEAR(replica.busy_seconds,
                part.iteration_seconds - part.grad_sync_seconds - part.optimizer_seconds, 1e-12);
    EXPECT_GT(replica.busy_seconds, 0);
    slowest = std::max(slowest, replica.busy_seconds);
  }
  EXPECT_NEAR(cost.iteration_seconds, slowest + cost.grad_sync_seconds + cost.optimizer_seconds,
              1e-12);
  // One replica: its busy time is the iteration without the exposed sync and the optimizer step.
  const Plan one = reporttest::TwoGroupPlan();
  const PlanCost one_cost = model.Evaluate(one);
  ASSERT_EQ(one_cost.replica_busy_seconds.size(), 1u);
  EXPECT_NEAR(one_cost.replica_busy_seconds[0],
              one_cost.iteration_seconds - one_cost.grad_sync_seconds - one_cost.optimizer_seconds,
              1e-12);
}

TrainingOption Option(const std::string& name, int replicas, int left_out, double seconds,
                      bool feasible = true) {
  return {name, replicas, left_out, 1, "selective", seconds, feasible};
}

TEST(TrainingWords, DecisionLinesSayWhatLeavingOutGainedAndTheRunnerUp) {
  EXPECT_TRUE(DecisionLines({}).empty());
  const std::vector<TrainingOption> options = {Option("2 replicas, 1 left out", 2, 1, 1.0),
                                               Option("3 replicas", 3, 0, 1.25),
                                               Option("1 replica", 1, 0, 2.0)};
  const std::vector<std::string> lines = DecisionLines(options);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "chosen: 2 replicas, 1 left out: 1.000 s/iteration (3 configurations weighed)");
  EXPECT_EQ(lines[1],
            "leaving 1 rank out: 1.000 s/iteration vs 1.250 s for the best with every rank (3 "
            "replicas), 1.250x faster");
  EXPECT_EQ(lines[2], "runner-up: 3 replicas: 1.250 s/iteration (+25.0%)");
  // The runner-up does not fit, nor does any option with every rank.
  const std::vector<TrainingOption> tight = {Option("1 left out", 1, 1, 3.0),
                                             Option("every rank", 1, 0, 0, false)};
  const std::vector<std::string> tight_lines = DecisionLines(tight);
  EXPECT_EQ(tight_lines[1],
            "leaving 1 rank out: 3.000 s/iteration; no configuration weighed with every rank fits");
  EXPECT_EQ(tight_lines[2], "runner-up: every rank: does not fit");
  const std::vector<std::string> single = DecisionLines({Option("every rank", 1, 0, 2.0)});
  EXPECT_EQ(single[1], "left out: nobody (the chosen configuration uses every rank)");
  EXPECT_EQ(single[2], "runner-up: none (one configuration weighed)");
}

class TwoReplicaReport : public ::testing::Test {
 protected:
  void SetUp() override {
    ReportOptions options;
    options.simulate = SimulatePolicy::kNever;
    auto data = BuildReport(model_.problem(), plan_, options);
    ASSERT_TRUE(data.has_value()) << data.error().message;
    data_ = *data;
    html_ = ReportHtml(data_);
  }
  Cluster cluster_ = reporttest::TwoByTwo();
  Plan plan_ = reporttest::TwoReplicaPlan();
  CostModel model_ = BatchOfThree(cluster_);
  ReportData data_;
  std::string html_;
};

TEST_F(TwoReplicaReport, PlanMapHasOneBandPerReplica) {
  const std::string svg = PlanMapSvg(plan_, cluster_);
  EXPECT_EQ(Count(svg, "class=\"replica-band\""), 2);
  EXPECT_NE(svg.find("replica 0: 2 of 3 sequences, ranks 0-1 (2 x H100-SXM on node 0)"),
            std::string::npos)
      << svg;
  EXPECT_NE(svg.find("replica 1: 1 of 3 sequences, rank 2 (1 x A100-SXM-80G on node 1)"),
            std::string::npos);
  // Three ranks hold heads; the left-out rank has no cell and is grey in the legend.
  const std::set<std::string> cells = Fills(svg, "class=\"cell\"");
  EXPECT_EQ(cells.size(), 3u);
  EXPECT_EQ(cells.count(kGrey), 0u);
  EXPECT_NE(svg.find("rank 3 (left out)"), std::string::npos);
  EXPECT_NE(svg.find("left out (grey): rank 3 (1 x A100-SXM-80G on node 1)"), std::string::npos);
  // Each band's group outline carries ring position #0 (rings restart in every replica).
  EXPECT_EQ(Count(svg, ">#0</text>"), 2);
  EXPECT_EQ(Count(svg, ">#1</text>"), 0);
  // The replica-1 band lies below the whole replica-0 band (heads 0-1 rank 0, 2-3 rank 1).
  const auto [rank0_y, rank0_height] = CellBox(svg, "rank 0 ");
  const auto [rank1_y, rank1_height] = CellBox(svg, "rank 1 ");
  const auto [rank2_y, rank2_height] = CellBox(svg, "rank 2 ");
  EXPECT_NEAR(rank1_y, rank0_y + rank0_height, 1e-9);
  EXPECT_GT(rank2_y, rank1_y + rank1_height);
  EXPECT_NEAR(rank2_height, rank0_height + rank1_height, 1e-9) << "equal band heights";
  const DisplayUnits units = UnitsOf(plan_, cluster_);
  EXPECT_EQ(units.colors[3], kGrey);
  EXPECT_EQ(units.labels[3], "rank 3 (left out)");
}

TEST_F(TwoReplicaReport, PageShowsReplicasLeftOutAndTrainingConfiguration) {
  EXPECT_NE(html_.find("<section id=\"training\">"), std::string::npos);
  EXPECT_EQ(Count(html_, "class=\"replica-band\""), 2);
  EXPECT_NE(html_.find("<b>dp 2 (2+1)</b>"), std::string::npos) << "headline tile";
  EXPECT_NE(html_.find("<b>rank 3</b><span>left out</span>"), std::string::npos);
  EXPECT_NE(html_.find("<b>zero 3, full</b>"), std::string::npos);
  EXPECT_EQ(Count(html_, "<tr class=\"left-out\">"), 1) << "the rank table's left-out row";
  EXPECT_NE(html_.find("(model state sharded over 3 ranks)"), std::string::npos);
  EXPECT_NE(html_.find("not recorded for a given plan"), std::string::npos);
  // The replica table: one row per replica with its sequences and busy time.
  EXPECT_NE(html_.find("<td>" + Fmt("%.3f", data_.cost.replica_busy_seconds[1]) + "</td>"),
            std::string::npos);
  // The strategies table has the training columns for every strategy.
  EXPECT_NE(html_.find("<th>replicas</th><th>left out</th><th>training</th>"), std::string::npos);
  for (const StrategyRow& row : data_.strategies) {
    if (row.iteration_seconds > 0) {
      EXPECT_EQ(row.replicas.substr(0, 3), "dp ") << row.strategy;
    }
  }
}

TEST(TrainingReport, OneReplicaPlanMapHasNoBands) {
  const std::string svg = PlanMapSvg(reporttest::TwoGroupPlan(), reporttest::TwoByTwo());
  EXPECT_EQ(Count(svg, "replica-band"), 0);
  EXPECT_EQ(Count(svg, "left out"), 0);
}

// Ten one-rank replicas on 16 ranks, six left out: eight bands drawn, the other two counted.
TEST(TrainingReport, AtMostEightBandsAndTheRestCounted) {
  const Cluster cluster = reporttest::EightGpuNodes(2);
  const auto model = reporttest::Model(cluster, reporttest::Tiny(), 100);
  Plan plan = EmptyPlan(*model, "hand-made");
  constexpr int kReplicas = 10;
  for (int rank = 0; rank < kReplicas; ++rank) {
    AddGroup(plan, cluster, {rank}, {{0, 100}}, {{{0, 100}}}, {{0, 1, 2, 3}});
    plan.groups.back().replica = rank;
    plan.replica_sequences.push_back(1);
  }
  plan.batch = kReplicas;
  plan.left_out = {10, 11, 12, 13, 14, 15};
  ASSERT_TRUE(Validate(plan, cluster, reporttest::Tiny()).has_value());
  const std::string svg = PlanMapSvg(plan, cluster);
  EXPECT_EQ(Count(svg, "class=\"replica-band\""), 8);
  EXPECT_NE(svg.find("+ 2 more replicas, not drawn"), std::string::npos);
  EXPECT_EQ(Fills(svg, "class=\"cell\"").size(), 8u) << "only the drawn replicas' ranks";
  EXPECT_NE(svg.find("left out (grey): ranks 10-15 (6 x A100-SXM-80G on node 1)"),
            std::string::npos);
  EXPECT_EQ(Count(svg, "(left out)</text>"), 6) << "six grey legend entries";
}

TEST(TrainingReport, EvaluationTableShowsEveryStrategysConfiguration) {
  ScenarioOutcome outcome;
  outcome.scenario.name = "mixed@128K";
  outcome.scenario.group = "b";
  outcome.table = "default";
  outcome.num_ranks = 32;
  outcome.ideal_tps = 1000;
  for (const char* name : {"ring", "ulysses", "usp", "hetero-ring", "subset", "hexiseq"}) {
    StrategyOutcome strategy;
    strategy.strategy = name;
    strategy.applicable = strategy.feasible = true;
    strategy.sim_tps = strategy.model_tps = 500;
    strategy.replicas = "dp 4";
    strategy.training = "zero 1, selective";
    outcome.strategies.push_back(strategy);
  }
  outcome.strategies[1].feasible = false;
  outcome.strategies[5].replicas = "dp 2 (5+3)";
  outcome.strategies[5].left_out = "4 x L40S on node 3";
  const std::string md =
      EvaluationMarkdown({outcome}, {EvalTable{"default", "", "catalog"}}, "cmd", "header", "");
  EXPECT_NE(md.find("## Training configuration of every strategy"), std::string::npos);
  EXPECT_NE(md.find("| mixed@128K | dp 4, zero 1, selective | - | dp 4, zero 1, selective | dp 4, "
                    "zero 1, selective | dp 4, zero 1, selective | dp 2 (5+3), zero 1, "
                    "selective, left out: 4 x L40S on node 3 |"),
            std::string::npos)
      << md;
}

}  // namespace
}  // namespace hexiseq::report
