#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "plan/plan.h"
#include "sched/plan_state.h"
#include "sched/sched_test_util.h"
#include "sched/strategies.h"
#include "spec/spec_input.h"

namespace hexiseq {
namespace {

using sched_test::Device;
using sched_test::Model;

Workload Work(int64_t seq, Recompute recompute = Recompute::kFull, int zero = 3) {
  Workload w;
  w.seq_len = seq;
  w.recompute = recompute;
  w.zero_stage = zero;
  return w;
}

double BestBaselineSeconds(const CostModel& model) {
  double best = 1e300;
  for (const StrategyResult& r : AllBaselines(model.problem()))
    if (r.feasible()) best = std::min(best, r.cost.iteration_seconds);
  return best;
}

// Random moves, half of them kept: the incremental score equals a full evaluation. At batch 4
// (ZeRO-3: 4 sync rounds, mostly hidden) the exposed sync is the model's one bucket.
void CheckIncrementalScore(int batch) {
  Cluster cluster =
      MakeCluster({Device("H100-SXM"), Device("A100-SXM-80G"), Device("L40S")}, {1, 1, 1}, 4, 25e9);
  Workload workload = Work(131072);
  workload.batch = batch;
  CostModel model(cluster, Model("llama3-8b"), workload);
  sched_internal::Layout layout;
  for (int node = 0; node < 3; ++node) {
    sched_internal::GroupLayout g;
    for (int r = 0; r < 4; ++r) g.ranks.push_back(node * 4 + r);
    g.front = g.back = 131072 / 6;
    g.tokens = sched_internal::TokensByGemm(model, g.ranks, g.total());
    g.heads = sched_internal::HeadsByAttention(model, g.ranks);
    layout.push_back(g);
  }
  layout[2].back += 131072 - 6 * (131072 / 6);
  layout[2].tokens = sched_internal::TokensByGemm(model, layout[2].ranks, layout[2].total());
  sched_internal::PlanState state(model, layout);
  std::mt19937_64 rng(7);
  for (int step = 0; step < 300; ++step) {
    sched_internal::Move move;
    move.kind = static_cast<sched_internal::Move::Kind>(rng() % 4);
    move.group = rng() % 3;
    move.other_group = rng() % 3;
    move.from = rng() % 4;
    move.to = rng() % 4;
    const bool heads =
        move.kind == sched_internal::Move::kHeads || move.kind == sched_internal::Move::kTrade;
    move.amount = heads ? 1 + rng() % 2 : 1 + rng() % 5000;
    move.front = static_cast<int64_t>(rng() % 3000) - 1000;
    move.back = static_cast<int64_t>(rng() % 3000) - 1000;
    move.tokens = 1 + rng() % 5000;  // kTrade
    bool legal = false;
    const sched_internal::Objective tried = state.Try(move, legal);
    // Half the legal trials are kept: a rejected trial must leave nothing behind (the next
    // trial's incremental score reads the restored state).
    if (legal && rng() % 2 == 0) {
      ASSERT_TRUE(state.Apply(move));
      EXPECT_EQ(tried.primary, state.score().primary);
    }
    ASSERT_TRUE(Validate(state.plan(), cluster, model.model()))
        << "batch " << batch << " step " << step;
    const PlanCost full = model.Evaluate(state.plan());
    ASSERT_NEAR(state.IterationSeconds(), full.iteration_seconds, 1e-9 * full.iteration_seconds)
        << "batch " << batch << " step " << step;
    ASSERT_EQ(state.score().feasible, full.feasible) << "batch " << batch << " step " << step;
  }
}

TEST(PlanState, IncrementalScoreMatchesFullEvaluation) {
  CheckIncrementalScore(1);
  CheckIncrementalScore(4);
}

TEST(PlanState, LayoutRoundTripsThroughPlan) {
  Cluster cluster = MakeCluster({Device("H100-SXM"), Device("A100-SXM-80G")}, {1, 1}, 4, 25e9);
  CostModel model(cluster, Model("llama3-8b"), Work(65536));
  const StrategyResult ring = RingBaseline(model.problem());
  sched_internal::Layout layout;
  ASSERT_TRUE(sched_internal::LayoutFromPlan(ring.plan, layout));
  const Plan rebuilt =
      sched_internal::BuildPlan(model, layout, ring.plan.strategy, ring.plan.config);
  EXPECT_NEAR(model.Evaluate(rebuilt).iteration_seconds, ring.cost.iteration_seconds,
              1e-12 * ring.cost.iteration_seconds);
}

TEST(Schedule, ValidAndNeverWorseThanBaselinesOnRandomClusters) {
  std::mt19937_64 rng(2024);
  const char* models[] = {"llama3-8b", "llama2-7b", "llama3.2-3b", "gpt-3b", "llama2-13b"};
  for (int trial = 0; trial < 12; ++trial) {
    const int ranks = 2 + static_cast<int>(rng() % 23);
    Cluster cluster = sched_test::RandomSmallCluster(rng, ranks);
    const ModelSpec spec = Model(models[rng() % 5]);
    const int64_t seq = int64_t{1} << (14 + rng() % 5);
    CostModel model(cluster, spec, Work(seq));
    auto result = Schedule(model.problem());
    const double baseline = BestBaselineSeconds(model);
    if (!result) {
      EXPECT_EQ(result.error().code, ErrorCode::kInfeasible);
      EXPECT_EQ(baseline, 1e300) << "a baseline fits but the scheduler found nothing";
      continue;
    }
    ASSERT_TRUE(Validate(result->plan, cluster, spec)) << "trial " << trial;
    EXPECT_EQ(result->strategy, "hexiseq");
    const PlanCost cost = model.Evaluate(result->plan);
    EXPECT_TRUE(cost.feasible);
    EXPECT_LE(cost.iteration_seconds, baseline * (1 + 1e-12)) << "trial " << trial;
  }
}

TEST(Schedule, HomogeneousWithinOnePercentOfBestBaseline) {
  for (const char* device : {"H100-SXM", "A100-SXM-80G"}) {
    Cluster cluster = MakeCluster({Device(device)}, {4}, 8, 25e9);
    CostModel model(cluster, Model("llama3-8b"), Work(262144));
    auto result = Schedule(model.problem());
    ASSERT_TRUE(result);
    const double baseline = BestBaselineSeconds(model);
    EXPECT_LE(result->cost.iteration_seconds, baseline * 1.01);
    EXPECT_GE(result->cost.iteration_seconds, baseline * 0.5);  // sanity: same cost model
  }
}

TEST(Schedule, DeterministicAcrossRunsAndThreads) {
  Cluster cluster = sched_test::MixedCluster(64);
  CostModel model(cluster, Model("llama3-8b"), Work(262144));
  auto a = Schedule(model.problem());
  auto b = Schedule(model.problem());
  ScheduleOptions two;
  two.threads = 2;
  auto c = Schedule(model.problem(), two);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(PlanToJson(a->plan), PlanToJson(b->plan));
  EXPECT_EQ(PlanToJson(a->plan), PlanToJson(c->plan));
}

// With replicas and --zero/--recompute auto (the replica search beside the one-replica search,
// replica plans and baselines on several threads): the same plan and options on 1 and 3 threads.
TEST(Schedule, AutoWithReplicasDeterministicAcrossThreads) {
  Workload workload = Work(32768);
  workload.batch = 8;
  CostModel model(sched_test::MixedCluster(64), Model("llama3-8b"), workload);
  ScheduleOptions one, three;
  one.zero_auto = one.recompute_auto = three.zero_auto = three.recompute_auto = true;
  three.threads = 3;
  auto a = RunStrategy(model.problem(), "hexiseq", one);
  auto b = RunStrategy(model.problem(), "hexiseq", three);
  ASSERT_TRUE(a && b);
  EXPECT_GT(NumReplicas(a->plan), 1);
  EXPECT_EQ(PlanToJson(a->plan), PlanToJson(b->plan));
  ASSERT_EQ(a->options_considered.size(), b->options_considered.size());
  for (size_t row = 0; row < a->options_considered.size(); ++row) {
    EXPECT_EQ(a->options_considered[row].name, b->options_considered[row].name);
    EXPECT_EQ(a->options_considered[row].iteration_seconds,
              b->options_considered[row].iteration_seconds);
  }
}

TEST(Schedule, ReportsProgressAndCandidates) {
  Cluster cluster = sched_test::MixedCluster(32);
  CostModel model(cluster, Model("llama3-8b"), Work(131072));
  std::vector<double> seen;
  std::vector<CandidateRecord> table;
  ScheduleOptions options;
  options.progress = [&](double f) { seen.push_back(f); };
  options.candidates = &table;
  ASSERT_TRUE(Schedule(model.problem(), options));
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 1.0);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_GT(table.size(), 5u);
}

TEST(Schedule, RejectsBadOptions) {
  Cluster cluster = MakeCluster({Device("H100-SXM")}, {1}, 2, 25e9);
  CostModel model(cluster, Model("llama3-8b"), Work(8192));
  ScheduleOptions options;
  options.threads = 0;
  auto r = Schedule(model.problem(), options);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(r.error().message.find("--threads"), std::string::npos);
}

TEST(Schedule, TimeLimitStillReturnsAValidPlan) {
  Cluster cluster = sched_test::MixedCluster(128);
  CostModel model(cluster, Model("llama3-70b"), Work(1 << 20));
  ScheduleOptions options;
  options.deadline = *Deadline::FromTimeLimit(0.01);
  auto r = Schedule(model.problem(), options);
  ASSERT_TRUE(r);
  EXPECT_TRUE(Validate(r->plan, cluster, model.model()));
  EXPECT_TRUE(options.deadline.CutShort());
}

// One-GPU nodes of five device types, each node a kind of its own (distinct NICs) or the same
// GPUs written as five kinds. The scheduler's size passes move the kinds of one device type
// together and a ring's chain traffic costs O(log groups) per group, so 2000 distinct kinds cost
// about what the five kinds cost (before the size passes: 12x at 400 kinds, 75x at 1000;
// docs/limits.md). A ratio of two planning times measured in one run.
TEST(Schedule, DistinctKindsPlanAsFastAsFewKinds) {
  constexpr int kGpus = 2000;
  constexpr double kMaxRatio = 3.0;
  const char* types[] = {"H100-SXM", "A100-SXM-80G", "A800", "L40S", "H20"};
  Cluster distinct;
  distinct.name = "distinct";
  for (int gpu = 0; gpu < kGpus; ++gpu) {
    NodeKind kind;
    kind.device = Device(types[gpu % 5]);
    kind.count = 1;
    kind.gpus_per_node = 1;
    kind.intra_node_bytes_per_second = 300e9;
    kind.nic_bytes_per_second = 12.5e9 + gpu * 0.01e9;
    kind.latency_seconds = 3e-6;
    distinct.kinds.push_back(kind);
  }
  distinct.Finalize();
  std::vector<DeviceSpec> devices;
  for (const char* type : types) devices.push_back(Device(type));
  const Cluster few = MakeCluster(devices, std::vector<int>(5, kGpus / 5), 1, 25e9);
  ASSERT_EQ(distinct.kinds.size(), static_cast<size_t>(kGpus));
  ASSERT_EQ(few.num_ranks(), kGpus);
  auto seconds = [](const Cluster& cluster) {
    const CostModel model(cluster, Model("gpt-3b"), Work(int64_t{128} << 10));
    const auto start = std::chrono::steady_clock::now();
    auto result = Schedule(model.problem());
    EXPECT_TRUE(result && result->feasible() && Validate(result->plan, cluster, model.model()));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double few_seconds = seconds(few);
  const double distinct_seconds = seconds(distinct);
  EXPECT_LT(distinct_seconds, kMaxRatio * few_seconds)
      << distinct_seconds << " s for " << kGpus << " kinds, " << few_seconds << " s for 5";
}

TEST(Infeasible, ExplainsRankNeedAndSmallestChange) {
  Cluster cluster = MakeCluster({Device("A100-40G")}, {1}, 8, 25e9);
  CostModel model(cluster, Model("llama3-8b"), Work(int64_t{128} << 10, Recompute::kNone));
  auto r = Schedule(model.problem());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kInfeasible);
  const std::string& m = r.error().message;
  EXPECT_NE(m.find("rank "), std::string::npos) << m;
  EXPECT_NE(m.find("A100-40G"), std::string::npos) << m;
  EXPECT_NE(m.find("needs"), std::string::npos) << m;
  EXPECT_NE(m.find("has"), std::string::npos) << m;
  EXPECT_NE(m.find("with --recompute full it fits"), std::string::npos) << m;
  EXPECT_NE(m.find("GiB more per A100-40G"), std::string::npos) << m;
  EXPECT_NE(m.find("a shorter --seq of at most"), std::string::npos) << m;
}

TEST(Infeasible, EmptyWhenItFits) {
  Cluster cluster = MakeCluster({Device("H100-SXM")}, {1}, 8, 25e9);
  CostModel model(cluster, Model("llama3-8b"), Work(65536));
  EXPECT_EQ(ExplainInfeasible(model.problem()), "");
}

}  // namespace
}  // namespace hexiseq
