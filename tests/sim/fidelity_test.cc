// Fidelity of the simulator against the analytical cost model on contention-free configurations
// (one node; one GPU per node; groups inside nodes with one ring flow per node pair): iteration
// times agree within 5% on random valid plans and the two rank plans in the same order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

#include "sched/baselines.h"
#include "sim/simulator.h"
#include "sim_test_util.h"

namespace hexiseq::sim {
namespace {

using simtest::GroupShape;

struct FidelityCase {
  const char* name;
  Cluster cluster;
  const char* model;
  int64_t seq;
  Recompute recompute;
  GroupShape shape;
};

struct FidelityStats {
  double max_error = 0, mean_error = 0, tau = 0;
  std::string worst_term;
};

FidelityStats RunCase(const FidelityCase& c, int plans, uint64_t seed, bool equal_blocks,
                      double spread) {
  auto model = LoadModel(c.model);
  EXPECT_TRUE(model.has_value());
  Workload w;
  w.seq_len = c.seq;
  w.batch = 2;
  w.recompute = c.recompute;
  CostModel cost(c.cluster, *model, w);
  std::mt19937_64 rng(seed);
  std::vector<double> modelled, simulated;
  FidelityStats stats;
  double worst = -1;
  for (int i = 0; i < plans; ++i) {
    const Plan plan = simtest::RandomPlan(cost, rng, c.shape, spread, equal_blocks);
    auto sim = Simulate(plan, cost.problem());
    EXPECT_TRUE(sim.has_value()) << (sim ? "" : sim.error().message);
    if (!sim) continue;
    const double predicted = cost.Evaluate(plan).iteration_seconds;
    const double error = sim->iteration_seconds / predicted - 1;
    if (std::getenv("HEXISEQ_FIDELITY_VERBOSE")) {
      std::printf("  plan %d: %zu groups err %+.2f%%", i, plan.groups.size(), 100 * error);
      for (const SimTerm& t : sim->terms)
        std::printf(" | %s %.3f/%.3f", t.name.c_str(), t.model_seconds, t.sim_seconds);
      std::printf("\n");
    }
    modelled.push_back(predicted);
    simulated.push_back(sim->iteration_seconds);
    stats.mean_error += std::abs(error) / plans;
    if (std::abs(error) > worst) {
      worst = std::abs(error);
      stats.max_error = error;
      const SimTerm* term = LargestDisagreement(*sim);
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s (model %.4f s, sim %.4f s)", term->name.c_str(),
                    term->model_seconds, term->sim_seconds);
      stats.worst_term = buf;
    }
  }
  stats.tau = KendallTau(modelled, simulated);
  std::printf(
      "%s %-34s plans %2d  mean |err| %5.2f%%  max err %+6.2f%%  tau %.3f  "
      "largest term gap: %s\n",
      equal_blocks ? "equal-blocks" : "any-blocks  ", c.name, plans, 100 * stats.mean_error,
      100 * stats.max_error, stats.tau, stats.worst_term.c_str());
  return stats;
}

// Contention-free: one node, or one GPU per node (every message has its own ports).
std::vector<FidelityCase> ContentionFreeCases() {
  using simtest::OneGpuPerNode;
  using simtest::SingleNode;
  return {
      {"1 node 8xH100 gpt-7b 64K full", SingleNode("H100-SXM", 8), "gpt-7b", 65536,
       Recompute::kFull, GroupShape::kAny},
      {"1 node 4xA100 llama3-8b 128K none", SingleNode("A100-SXM-80G", 4), "llama3-8b", 131072,
       Recompute::kNone, GroupShape::kAny},
      {"1 node 8xL40S llama3-8b 32K sel", SingleNode("L40S", 8), "llama3-8b", 32768,
       Recompute::kSelective, GroupShape::kAny},
      {"6 nodes x1 H100/A100/L40S 7b 128K",
       OneGpuPerNode({"H100-SXM", "A100-SXM-80G", "L40S", "H100-SXM", "A100-SXM-80G", "L40S"},
                     25e9),
       "gpt-7b", 131072, Recompute::kFull, GroupShape::kAny},
      {"8 nodes x1 H100/A100 llama3-8b 256K",
       OneGpuPerNode({"H100-SXM", "H100-SXM", "H100-SXM", "A100-SXM-80G", "A100-SXM-80G",
                      "A100-SXM-80G", "A100-SXM-80G", "H100-SXM"},
                     25e9),
       "llama3-8b", 262144, Recompute::kFull, GroupShape::kAny},
  };
}

// Random plans whose groups hold equal token counts (equal sub-ring blocks) and whose member
// shares stray up to 15% from compute-proportional, as a planner's candidates do. The mean error
// is within 5%; single plans may differ by up to 10% where the model adds the slowest member's
// GEMMs and the most loaded member's all-to-all (sum of maxima) while the simulator overlaps one
// member's transfers with another's GEMMs (the model is then pessimistic: "local" term).
TEST(Fidelity, ContentionFreeRandomPlansAgreeWithin5PercentAndRankTheSame) {
  int seed = 1;
  for (const FidelityCase& c : ContentionFreeCases()) {
    const FidelityStats stats = RunCase(c, 24, seed++, /*equal_blocks=*/true, 0.15);
    EXPECT_LE(stats.mean_error, 0.05) << c.name << ": " << stats.worst_term;
    EXPECT_LE(std::abs(stats.max_error), 0.10) << c.name << ": " << stats.worst_term;
    EXPECT_GE(stats.tau, 0.8) << c.name;
  }
}

// A calibrated rate curve (steep, so that a rank read at the wrong size is far off): the model and
// the simulator read each rank's rates at the same shard (CostModel::LinearRate, AttentionRate),
// so they agree as closely as without one, on plans whose shares stray far from even.
TEST(Fidelity, RateCurvesAreReadAtTheSameShardsByModelAndSimulator) {
  constexpr int64_t kSeq = 65536;
  FidelityCase c{"1 node 4xH100 curve llama3-8b 64K",
                 simtest::SingleNode("H100-SXM", 4),
                 "llama3-8b",
                 kSeq,
                 Recompute::kFull,
                 GroupShape::kAny};
  // GEMMs from 0.3x at S / 8 to 1x at S / 2, attention from 0.2x at S / 4: small shards are slow
  // enough to be the bottleneck (the members' and groups' shares are not sized for the curve).
  c.cluster.kinds[0].device.rate_curve = {
      {kSeq / 8.0, kSeq / 4.0, kSeq / 2.0}, {0.3, 0.6, 1.0}, {0.2, 0.2, 1.0}};
  const FidelityStats stats = RunCase(c, 24, 11, /*equal_blocks=*/true, 0.6);
  EXPECT_LE(stats.mean_error, 0.05) << c.name << ": " << stats.worst_term;
  EXPECT_LE(std::abs(stats.max_error), 0.10) << c.name << ": " << stats.worst_term;
  EXPECT_GE(stats.tau, 0.8) << c.name;
}

// Where the two models legitimately part (reported, bounded): sub-ring blocks of unequal size
// travel store-and-forward, so the chain takes about (steps - 1) x the largest block's hop, which
// the analytical ring term (each primary's total bytes / bandwidth) does not see; and groups of
// 8-GPU nodes whose KV heads have different primaries, whose per-segment chains idle behind the
// most loaded primary. The simulator is then slower and the ring term is responsible, or, on the
// 32 GB/s PCIe node, the local term: uneven all-to-all flows share a PCIe port fairly, so the
// busiest port idles while one long flow waits on another port (the model charges port load /
// bandwidth). The recompute term counts too: under full recompute it repeats the forward ring.
TEST(Fidelity, UnequalBlocksAndMultiPrimaryRingsAreAttributedToTheRingTerm) {
  std::vector<FidelityCase> cases = ContentionFreeCases();
  cases.push_back({"2+2 nodes x8 H100/A100 13b 256K in-node",
                   simtest::EightGpuNodes({"H100-SXM", "A100-SXM-80G"}, {2, 2}, 25e9), "gpt-13b",
                   262144, Recompute::kFull, GroupShape::kWithinNode});
  int seed = 100;
  for (const FidelityCase& c : cases) {
    const FidelityStats stats = RunCase(c, 8, seed++, /*equal_blocks=*/false, 0.3);
    EXPECT_LE(std::abs(stats.max_error), 0.6) << c.name;
    if (stats.max_error > 0.05) {
      // Full recompute repeats the forward, ring phase included, as its own term.
      const bool ring = stats.worst_term.find("ring attention") != std::string::npos ||
                        stats.worst_term.find("recompute") != std::string::npos;
      const bool local = stats.worst_term.find("local") != std::string::npos;
      EXPECT_TRUE(ring || local) << c.name << ": " << stats.worst_term;
    }
  }
}

// Two groups (USP: heads across a node's 8 GPUs, a 2-group ring across two nodes) over a slow
// NIC: the K/V block arrives while each group computes its
// own block, but the dK/dV sum of the other group's block can only leave once that block is
// computed. The backward ring is then every block's compute plus that one return; the model must
// not also count the return in the port traffic that precedes the last block.
TEST(Fidelity, TwoGroupRingBackwardEndsWithTheLastReturn) {
  const Cluster cluster = simtest::EightGpuNodes({"H200", "H100-SXM"}, {1, 1}, 12.5e9);
  Workload w;
  w.seq_len = 131072;
  const CostModel cost(cluster, *LoadModel("gpt-7b"), w);
  const StrategyResult ring = UspBaseline(cost.problem());
  ASSERT_TRUE(ring.feasible());
  auto sim = Simulate(ring.plan, cost.problem());
  ASSERT_TRUE(sim.has_value()) << sim.error().message;
  for (const SimTerm& term : sim->terms) {
    if (term.name == "ring attention") {
      EXPECT_NEAR(term.model_seconds / term.sim_seconds, 1.0, 0.01);
    }
  }
  EXPECT_NEAR(ring.cost.iteration_seconds / sim->iteration_seconds, 1.0, 0.01);
}

// A contiguous (not zigzag) ring of four GPUs on two nodes, equal quarters: the first quarter's
// block is needed by every other group and reaches the last one over NVLink, the NIC and NVLink
// again (store and forward), while the last group's work on it is the largest. The ring phase is
// set by that chain, layer after layer (each group starts a layer when it has finished the
// previous one), and the cost model must charge what the simulator simulates: the hops the
// block takes (not an average over every ring link), at their own speeds.
TEST(Fidelity, ContiguousRingIsBoundByTheFirstBlocksChain) {
  const Cluster cluster = MakeCluster({simtest::Device("H100-SXM")}, {2}, 2, 12.5e9);
  const ModelSpec model = *LoadModel("llama3-8b");
  Workload w;
  w.seq_len = 65536;
  const CostModel cost(cluster, model, w);
  Plan plan;
  plan.seq_len = w.seq_len;
  plan.num_heads = model.heads;
  plan.num_kv_heads = model.kv_heads;
  plan.num_ranks = cluster.num_ranks();
  std::vector<int> heads(model.heads);
  for (int head = 0; head < model.heads; ++head) heads[head] = head;
  const int64_t quarter = w.seq_len / 4;
  for (int rank = 0; rank < 4; ++rank) {
    const Ranges tokens = {{rank * quarter, (rank + 1) * quarter}};
    plan.groups.push_back({{rank}, tokens, {{rank, "", cluster.ranks[rank].node, tokens, heads}}});
  }
  ASSERT_TRUE(Validate(plan, cluster, model)) << Validate(plan, cluster, model).error().message;
  auto sim = Simulate(plan, cost.problem());
  ASSERT_TRUE(sim.has_value()) << sim.error().message;
  const PlanCost predicted = cost.Evaluate(plan);
  // The chain recurrence and the simulator agree to rounding here; averaging the chain over
  // every ring link (the cost model's earlier chain term) was 2% low on the ring term.
  EXPECT_NEAR(predicted.iteration_seconds / sim->iteration_seconds, 1.0, 0.005);
  for (const SimTerm& term : sim->terms) {
    if (term.name == "ring attention") {
      EXPECT_NEAR(term.model_seconds / term.sim_seconds, 1.0, 0.01);
    }
  }
}

// Full recompute: each layer's recompute forward follows the previous layer's backward, which
// leaves the groups skewed (a dK/dV sum returns to its owner last). One replica of a planner's
// 2-replica plan for 8 GPUs (two H100s as one head-parallel group, two A100s alone with unequal
// blocks; gpt-7b, 256K): the A100s wait on the H100 pair's blocks in both passes. Chaining forward
// layers with forward layers and backward with backward (the cost model's earlier ring floor)
// was 1.8% low on the iteration; the recompute-backward alternation is what the simulator runs.
TEST(Fidelity, FullRecomputeChainsEachBackwardIntoTheNextRecompute) {
  const Cluster cluster =
      MakeCluster({simtest::Device("H100-SXM"), simtest::Device("A100-SXM-80G")}, {1, 1}, 2, 25e9);
  const ModelSpec model = *LoadModel("gpt-7b");
  Workload w;
  w.seq_len = 262144;
  w.batch = 1;
  w.recompute = Recompute::kFull;
  w.shard_ranks = 8;  // ZeRO 3 over both replicas' ranks, as in the 2-replica plan
  const CostModel cost(cluster, model, w);
  std::vector<int> all_heads(model.heads), low(model.heads / 2), high(model.heads / 2);
  std::iota(all_heads.begin(), all_heads.end(), 0);
  std::iota(low.begin(), low.end(), 0);
  std::iota(high.begin(), high.end(), model.heads / 2);
  Plan plan;
  plan.seq_len = w.seq_len;
  plan.batch = 1;
  plan.num_heads = model.heads;
  plan.num_kv_heads = model.kv_heads;
  plan.num_ranks = cluster.num_ranks();
  auto member = [&](int rank, Ranges tokens, std::vector<int> heads) {
    return PlanMember{rank, "", cluster.ranks[rank].node, std::move(tokens), std::move(heads)};
  };
  const Ranges first_a100 = {{0, 15966}, {237255, 262144}}, second_a100 = {{209527, 237255}};
  plan.groups.push_back({{2}, first_a100, {member(2, first_a100, all_heads)}});
  plan.groups.push_back({{3}, second_a100, {member(3, second_a100, all_heads)}});
  plan.groups.push_back({{0, 1},
                         {{15966, 209527}},
                         {member(0, {{15966, 112747}}, low), member(1, {{112747, 209527}}, high)}});
  ASSERT_TRUE(Validate(plan, cluster, model)) << Validate(plan, cluster, model).error().message;
  SimOptions options;
  options.explicit_layers = model.layers;
  auto sim = Simulate(plan, cost.problem(), options);
  ASSERT_TRUE(sim.has_value()) << sim.error().message;
  const PlanCost predicted = cost.Evaluate(plan);
  EXPECT_TRUE(predicted.feasible) << predicted.infeasible_reason;
  EXPECT_NEAR(predicted.iteration_seconds / sim->iteration_seconds, 1.0, 0.01);
}

// Ulysses over four 8-GPU nodes of unequal speed (L4s among H100s, H200s and H800s), the busiest
// NIC ports on the fast H100s: the fast members finish their ring (and their linear layers) early
// and their all-to-all pieces to each other travel while the L4s still compute. The cost model
// must charge only what is left after the last member is ready, as the simulator does. The model
// is 5.4% high on this local phase and 3.0% on the iteration (its ports take pieces one after
// another where the simulator shares them); charging each exchange in full after the slowest
// member (the model's earlier local term) was 14.6% and 8.1% high.
TEST(Fidelity, StaggeredMembersOverlapTheirAllToAll) {
  Cluster cluster = simtest::EightGpuNodes({"H100-SXM", "L4", "H800", "H200"}, {1, 1, 1, 1}, 0);
  const double nics[] = {12.5e9, 50e9, 50e9, 25e9};
  for (size_t kind = 0; kind < cluster.kinds.size(); ++kind)
    cluster.kinds[kind].nic_bytes_per_second = nics[kind];
  cluster.Finalize();
  Workload w;
  w.seq_len = 32768;
  const CostModel cost(cluster, *LoadModel("gpt-7b"), w);
  const StrategyResult ulysses = UlyssesBaseline(cost.problem());
  ASSERT_TRUE(ulysses.feasible());
  auto sim = Simulate(ulysses.plan, cost.problem());
  ASSERT_TRUE(sim.has_value()) << sim.error().message;
  for (const SimTerm& term : sim->terms) {
    if (term.name == "local (linear + all-to-all)") {
      EXPECT_NEAR(term.model_seconds / term.sim_seconds, 1.0, 0.07);
    }
  }
  EXPECT_NEAR(ulysses.cost.iteration_seconds / sim->iteration_seconds, 1.0, 0.04);
}

}  // namespace
}  // namespace hexiseq::sim
