// The simulator end to end: closed form on one rank, byte-identical output, JSON and trace
// formats, bad input.
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "sched/baselines.h"
#include "sim/trace.h"
#include "sim_test_util.h"

namespace hexiseq::sim {
namespace {

CostModel Model(const Cluster& cluster, const char* name, int64_t seq, Recompute rec, int batch) {
  Workload w;
  w.seq_len = seq;
  w.batch = batch;
  w.recompute = rec;
  return CostModel(cluster, *LoadModel(name), w);
}

TEST(Simulator, OneRankIsItsComputeInClosedForm) {
  const Cluster cluster = simtest::SingleNode("A100-SXM-80G", 1);
  const CostModel cost = Model(cluster, "llama3-8b", 8192, Recompute::kFull, 2);
  std::mt19937_64 rng(1);
  const Plan plan = simtest::RandomPlan(cost, rng, simtest::GroupShape::kAny, 0);
  auto sim = Simulate(plan, cost.problem());
  ASSERT_TRUE(sim.has_value()) << sim.error().message;
  const ModelSpec& m = cost.model();
  const DeviceSpec& dev = cluster.device(0);
  const double s = 8192;
  const double lin = 2 * s * m.LayerGemmParams() / dev.GemmFlops();
  const double attn = 4.0 * m.head_dim * m.heads * (s * (s + 1) / 2) / dev.AttentionFlops();
  const double head = 3 * 2 * s * m.vocab * m.hidden / dev.GemmFlops();
  // Then one optimizer step: 28 bytes of traffic per parameter at the device's HBM bandwidth.
  const double optimizer = 28 * m.TotalParams() / dev.hbm_bytes_per_second;
  const double expect = 2 * (m.layers * (4 * lin + 4.5 * attn) + head) + optimizer;
  EXPECT_NEAR(sim->iteration_seconds / expect, 1.0, 1e-5);
  EXPECT_NEAR(sim->iteration_seconds / cost.Evaluate(plan).iteration_seconds, 1.0, 1e-3);
  EXPECT_NEAR(sim->ranks[0].idle_seconds, 0, 1e-6);
}

TEST(Simulator, SameInputGivesByteIdenticalOutput) {
  const Cluster cluster = simtest::EightGpuNodes({"H100-SXM", "A100-SXM-80G"}, {1, 1}, 25e9);
  const CostModel cost = Model(cluster, "llama3-8b", 65536, Recompute::kFull, 1);
  std::mt19937_64 rng(3);
  const Plan plan = simtest::RandomPlan(cost, rng, simtest::GroupShape::kAny, 0.2);
  SimOptions options;
  options.keep_timeline = true;
  auto a = Simulate(plan, cost.problem(), options);
  auto b = Simulate(plan, cost.problem(), options);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(SimResultToJson(*a), SimResultToJson(*b));
  EXPECT_EQ(ChromeTraceJson(*a, cluster), ChromeTraceJson(*b, cluster));
}

TEST(Simulator, JsonAndTraceHaveTheDocumentedShape) {
  const Cluster cluster = simtest::EightGpuNodes({"H100-SXM"}, {2}, 25e9);
  const CostModel cost = Model(cluster, "gpt-3b", 32768, Recompute::kFull, 1);
  std::mt19937_64 rng(5);
  const Plan plan = simtest::RandomPlan(cost, rng, simtest::GroupShape::kWithinNode, 0.1);
  SimOptions options;
  options.keep_timeline = true;
  auto sim = Simulate(plan, cost.problem(), options);
  ASSERT_TRUE(sim.has_value());
  const auto j = nlohmann::json::parse(SimResultToJson(*sim));
  EXPECT_GT(j["iteration_seconds"].get<double>(), 0);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0);
  ASSERT_EQ(j["ranks"].size(), 16u);
  EXPECT_TRUE(j["ranks"][0].contains("busy_seconds"));
  EXPECT_TRUE(j["ranks"][0].contains("exposed_comm_seconds"));

  const auto trace = nlohmann::json::parse(ChromeTraceJson(*sim, cluster));
  int complete = 0, comm = 0, names = 0;
  for (const auto& ev : trace["traceEvents"]) {
    if (ev["ph"] == "M") {
      ++names;
      continue;
    }
    ASSERT_EQ(ev["ph"], "X");
    EXPECT_TRUE(ev["ts"].is_number() && ev["dur"].is_number());
    EXPECT_GE(ev["dur"].get<double>(), 0);
    EXPECT_LT(ev["pid"].get<int>(), 2);  // one process per node
    ++complete;
    if (ev["cat"] == "comm") ++comm;
  }
  EXPECT_GT(complete, 100);
  EXPECT_GT(comm, 10);
  EXPECT_GT(names, 16);
}

TEST(Simulator, MoreExplicitLayersChangeLittle) {
  const Cluster cluster = simtest::OneGpuPerNode({"H100-SXM", "A100-SXM-80G", "H100-SXM"}, 25e9);
  const CostModel cost = Model(cluster, "llama3-8b", 65536, Recompute::kFull, 1);
  std::mt19937_64 rng(9);
  const Plan plan = simtest::RandomPlan(cost, rng, simtest::GroupShape::kAny, 0.1, true);
  SimOptions one, four;
  four.explicit_layers = 4;
  auto a = Simulate(plan, cost.problem(), one);
  auto b = Simulate(plan, cost.problem(), four);
  ASSERT_TRUE(a && b);
  EXPECT_LE(b->iteration_seconds, a->iteration_seconds * 1.001);  // pipelining across layers
  EXPECT_GE(b->iteration_seconds, a->iteration_seconds * 0.95);
}

// The iteration's first layer starts on every rank at once; every later one starts on a rank when
// its previous layer ends there. On a speed-proportional ring of one H200 node and two L4 nodes
// the H200 ranks' large blocks queue behind each other on the slow L4 links when everyone starts
// together, so the first forward takes longer than the others. One explicit layer (with the extra
// forward that measures the staggered start) must give the iteration that simulating every layer
// gives, which is the reference.
TEST(Simulator, OneExplicitLayerIsEveryLayerSimulated) {
  const Cluster cluster = simtest::EightGpuNodes({"H200", "L4"}, {1, 2}, 25e9);
  ModelSpec model = *LoadModel("llama3-8b");
  model.layers = 6;
  Workload w;
  w.seq_len = 65536;
  const CostModel cost(cluster, model, w);
  const StrategyResult ring = HeteroRingBaseline(cost.problem());
  ASSERT_TRUE(ring.feasible());
  SimOptions every_layer;
  every_layer.explicit_layers = model.layers;
  every_layer.keep_timeline = true;
  auto one = Simulate(ring.plan, cost.problem());
  auto all = Simulate(ring.plan, cost.problem(), every_layer);
  ASSERT_TRUE(one && all);
  EXPECT_NEAR(one->iteration_seconds / all->iteration_seconds, 1.0, 0.005);
  // The case is one where the start matters: the first forward ends well after 1/L of the
  // forwards.
  std::vector<int64_t> forward_end(model.layers, 0);
  for (size_t id = 0; id < all->timeline.layer_ops.size(); ++id) {
    const Op& op = all->timeline.layer_ops[id];
    if (op.pass == Pass::kForward)
      forward_end[op.layer] =
          std::max(forward_end[op.layer], all->timeline.layer_timings[id].end_ns);
  }
  const double first = static_cast<double>(forward_end[0]);
  const double later = static_cast<double>(forward_end[1] - forward_end[0]);
  EXPECT_GT(first, 1.2 * later);
}

TEST(Simulator, BadInputIsAnErrorNotACrash) {
  const Cluster cluster = simtest::SingleNode("H100-SXM", 2);
  const CostModel cost = Model(cluster, "gpt-3b", 4096, Recompute::kFull, 1);
  std::mt19937_64 rng(2);
  Plan plan = simtest::RandomPlan(cost, rng, simtest::GroupShape::kAny, 0.1);
  SimOptions options;
  options.explicit_layers = 0;
  auto bad_options = Simulate(plan, cost.problem(), options);
  ASSERT_FALSE(bad_options.has_value());
  EXPECT_EQ(bad_options.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(bad_options.error().message.find("explicit_layers = 0"), std::string::npos);
  plan.groups[0].tokens[0].end -= 1;  // tokens no longer partition [0, S)
  auto bad_plan = Simulate(plan, cost.problem());
  ASSERT_FALSE(bad_plan.has_value());
  EXPECT_EQ(bad_plan.error().code, ErrorCode::kInvalidArgument);
}

TEST(Simulator, KendallTau) {
  EXPECT_DOUBLE_EQ(KendallTau({1, 2, 3}, {10, 20, 30}), 1.0);
  EXPECT_DOUBLE_EQ(KendallTau({1, 2, 3}, {30, 20, 10}), -1.0);
  EXPECT_NEAR(KendallTau({1, 2, 3, 4}, {1, 2, 4, 3}), 4.0 / 6, 1e-12);
}

}  // namespace
}  // namespace hexiseq::sim
