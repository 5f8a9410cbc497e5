// Gradient synchronisation: the cost model's closed form and the simulator's message-level run of
// the same hierarchical algorithm (ring inside each node, then a ring over the nodes) against the
// textbook formula, on homogeneous and mixed-bandwidth clusters.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "cost/cost_model.h"
#include "sim/engine.h"
#include "sim/graph.h"
#include "sim/simulator.h"
#include "sim_test_util.h"

namespace hexiseq::sim {
namespace {

constexpr double kNsRounding = 1e-5;  // relative: the engine works in integer ns and kB/s

CostModel Model(const Cluster& cluster, const char* name, int zero_stage) {
  Workload workload;
  workload.seq_len = 32768;
  workload.zero_stage = zero_stage;
  return CostModel(cluster, *LoadModel(name), workload);
}

double SimulatedPassSeconds(const CostModel& cost) {
  Engine engine(cost.cluster());
  BuildGradSyncGraph(cost, engine);
  return static_cast<double>(engine.Run().makespan_ns) * 1e-9;
}

// Textbook hierarchical reduce-scatter of M bytes on N nodes of g GPUs, equal links:
// (g - 1) (alpha_intra + M / (g B_intra)) + (N - 1) (alpha_nic + M / (g N B_nic)).
double TextbookPass(double bucket, int nodes, int gpus, double intra, double intra_latency,
                    double nic, double nic_latency) {
  return (gpus - 1) * (intra_latency + bucket / gpus / intra) +
         (nodes - 1) * (nic_latency + bucket / gpus / nodes / nic);
}

Cluster TwoNodesOneSlow() {  // the mixed-bandwidth example: NVLink node + PCIe node, NIC 25 GB/s
  Cluster cluster = simtest::EightGpuNodes({"H100-SXM", "H100-SXM"}, {1, 1}, 25e9);
  cluster.kinds[0].intra_node_bytes_per_second = 450e9;
  cluster.kinds[1].intra_node_bytes_per_second = 32e9;
  cluster.Finalize();
  return cluster;
}

TEST(GradSync, HomogeneousClustersMatchTheTextbookFormula) {
  for (int nodes : {1, 2, 4, 16}) {
    const Cluster cluster = simtest::EightGpuNodes({"A100-SXM-80G"}, {nodes}, 25e9);
    const NodeKind& kind = cluster.kinds[0];
    for (int zero : {1, 3}) {
      const CostModel cost = Model(cluster, "llama3-8b", zero);
      const double expect =
          TextbookPass(cost.GradBucketBytes(), nodes, 8, kind.intra_node_bytes_per_second,
                       kind.latency_seconds, 25e9, cluster.inter_node_latency_seconds);
      EXPECT_NEAR(cost.GradSyncPassSeconds() / expect, 1.0, 1e-12) << nodes << " nodes";
      EXPECT_NEAR(SimulatedPassSeconds(cost) / expect, 1.0, kNsRounding) << nodes << " nodes";
      EXPECT_EQ(cost.GradSyncPasses(), zero >= 3 ? 3 : 2);
    }
  }
}

TEST(GradSync, OneGpuPerNodeIsAFlatRingOverTheNodes) {
  const Cluster cluster =
      simtest::OneGpuPerNode({"H100-SXM", "A100-SXM-80G", "L40S", "H100-SXM"}, 12.5e9);
  const CostModel cost = Model(cluster, "gpt-7b", 3);
  const double expect =
      TextbookPass(cost.GradBucketBytes(), 4, 1, 1, 0, 12.5e9, cluster.inter_node_latency_seconds);
  EXPECT_NEAR(cost.GradSyncPassSeconds() / expect, 1.0, 1e-12);
  EXPECT_NEAR(SimulatedPassSeconds(cost) / expect, 1.0, kNsRounding);
}

// One 8-GPU node at 450 GB/s and one at 32 GB/s, NIC 25 GB/s: the slow node's intra-node ring
// sets phase A; phase B is one step of bucket / 16 over the NICs.
TEST(GradSync, MixedIntraNodeBandwidthIsBoundByTheSlowNode) {
  const Cluster cluster = TwoNodesOneSlow();
  const CostModel cost = Model(cluster, "llama3-8b", 3);
  const double bucket = cost.GradBucketBytes();
  const double expect = 7 * (cluster.kinds[1].latency_seconds + bucket / 8 / 32e9) +
                        1 * (cluster.inter_node_latency_seconds + bucket / 16 / 25e9);
  EXPECT_NEAR(cost.GradSyncPassSeconds() / expect, 1.0, 1e-12);
  EXPECT_NEAR(SimulatedPassSeconds(cost) / expect, 1.0, kNsRounding);
}

// Different NICs and GPU counts per node: a receiving GPU of a smaller node takes several flows
// on its NIC port. The slowest hop sets every step (the model); the simulator pipelines the ring
// and may finish a little earlier where nodes start their steps at different times.
TEST(GradSync, MixedNicsAndNodeSizesAgreeWithinTwoPercent) {
  Cluster cluster = simtest::EightGpuNodes({"H100-SXM", "A100-SXM-80G", "L40S"}, {2, 1, 1}, 50e9);
  cluster.kinds[1].nic_bytes_per_second = 25e9;
  cluster.kinds[2].nic_bytes_per_second = 12.5e9;
  cluster.kinds[2].gpus_per_node = 4;
  cluster.kinds[2].intra_node_bytes_per_second = 32e9;
  cluster.Finalize();
  const CostModel cost = Model(cluster, "gpt-13b", 3);
  const double bucket = cost.GradBucketBytes();
  // Textbook by hand: phase A on the 4-GPU PCIe node; phase B's slowest hop is the A100 node (8
  // GPUs) into the L40S node (4 GPUs, 12.5 GB/s): two flows of bucket / (4 x 8) per NIC port.
  const double intra = std::max(7 * (cluster.kinds[0].latency_seconds + bucket / 8 / 450e9),
                                3 * (cluster.kinds[2].latency_seconds + bucket / 4 / 32e9));
  const double hop = cluster.inter_node_latency_seconds + 2 * (bucket / 4 / 8) / 12.5e9;
  const double expect = intra + 3 * hop;
  EXPECT_NEAR(cost.GradSyncPassSeconds() / expect, 1.0, 1e-12);
  const double simulated = SimulatedPassSeconds(cost);
  EXPECT_NEAR(simulated / expect, 1.0, 0.02);
}

// End to end: the simulator's whole gradient sync equals the model's, per iteration, and the
// passes counted by hand.
TEST(GradSync, SimulatorAndModelChargeTheSameTotal) {
  const Cluster cluster = TwoNodesOneSlow();
  for (int zero : {0, 2, 3}) {
    Workload workload;
    workload.seq_len = 32768;
    workload.batch = 2;
    workload.zero_stage = zero;
    const CostModel cost(cluster, *LoadModel("llama3-8b"), workload);
    std::mt19937_64 rng(7);
    const Plan plan = simtest::RandomPlan(cost, rng, simtest::GroupShape::kWithinNode, 0.1);
    auto sim = Simulate(plan, cost.problem());
    ASSERT_TRUE(sim.has_value()) << sim.error().message;
    EXPECT_NEAR(sim->grad_sync_total_seconds / cost.GradSyncTotalSeconds(), 1.0, kNsRounding)
        << "zero " << zero;
    // Passes of every bucket at batch 2: ZeRO 0 one all-reduce (2); ZeRO 2 a reduce-scatter per
    // sequence and one all-gather (3); ZeRO 3 two all-gathers and a reduce-scatter per sequence.
    const double passes = zero == 0 ? 2 : zero == 2 ? 3 : 6;
    EXPECT_NEAR(
        cost.GradSyncTotalSeconds() / (passes * cost.model().layers * cost.GradSyncPassSeconds()),
        1.0, 1e-12)
        << "zero " << zero;
  }
}

}  // namespace
}  // namespace hexiseq::sim
