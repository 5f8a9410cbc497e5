// The simulator on plans with data-parallel replicas and left-out ranks: a hand-computed case, the
// gradient sync over the participating ranks against the textbook hierarchical ring, agreement
// with the cost model term by term, each replica simulated as if alone (no shared resource), a
// left-out rank that changes nothing for the others, and replicas that contend for a shared NIC.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

#include "sim/engine.h"
#include "sim/graph.h"
#include "sim/simulator.h"
#include "sim_test_util.h"

namespace hexiseq::sim {
namespace {

constexpr double kNsRounding = 1e-5;  // relative: the engine works in integer ns and kB/s

Workload MakeWorkload(int64_t seq, int batch, int zero_stage, Recompute recompute) {
  Workload workload;
  workload.seq_len = seq;
  workload.batch = batch;
  workload.zero_stage = zero_stage;
  workload.recompute = recompute;
  return workload;
}

std::vector<int> Iota(int first, int count) {
  std::vector<int> ranks(count);
  std::iota(ranks.begin(), ranks.end(), first);
  return ranks;
}

// A random plan for `part` (a cluster shaped like the world ranks `world_ranks` of a larger one),
// with `sequences` sequences, as a one-replica plan over `num_ranks` world ranks.
Plan RandomPart(const Cluster& part, const ModelSpec& model, Workload workload, int sequences,
                const std::vector<int>& world_ranks, int num_ranks, std::mt19937_64& rng,
                simtest::GroupShape shape = simtest::GroupShape::kAny) {
  workload.batch = sequences;
  const CostModel part_cost(part, model, workload);
  const Plan plan = simtest::RandomPlan(part_cost, rng, shape, 0.15, /*equal_blocks=*/true);
  return EmbedPlan(plan, world_ranks, num_ranks);
}

// One GPU per node: an H100 replica with 3 sequences, an A100 replica with 1, an L40S left out.
// Each replica computes alone (closed form, as Simulator.OneRankIsItsComputeInClosedForm); the
// gradient sync is one ring step over the two participating nodes: half a bucket each way per
// pass, two passes (ZeRO-1: an all-reduce), overlapped with the slowest replica but its last;
// then the optimizer step over half of the state on each.
TEST(Replicas, TwoSingleGpuReplicasAndALeftOutRankHandComputed) {
  const double nic = 10e9;
  const Cluster cluster = simtest::OneGpuPerNode({"H100-SXM", "A100-SXM-80G", "L40S"}, nic);
  const ModelSpec model = *LoadModel("llama3-8b");
  const int64_t seq = 8192;
  const Workload workload = MakeWorkload(seq, 4, 1, Recompute::kFull);
  const CostModel cost(cluster, model, workload);
  std::mt19937_64 rng(11);
  const Plan plan = MergeReplicas(
      {RandomPart(simtest::SingleNode("H100-SXM", 1), model, workload, 3, {0}, 3, rng),
       RandomPart(simtest::SingleNode("A100-SXM-80G", 1), model, workload, 1, {1}, 3, rng)});
  ASSERT_EQ(plan.left_out, std::vector<int>{2});
  auto sim = Simulate(plan, cost.problem());
  ASSERT_TRUE(sim.has_value()) << sim.error().message;

  const double s = static_cast<double>(seq);
  // One layer's forward linear layers and attention, one sequence.
  auto linear = [&](int rank) {
    return 2 * s * model.LayerGemmParams() / cluster.device(rank).GemmFlops();
  };
  auto attention = [&](int rank) {
    return 4.0 * model.head_dim * model.heads * (s * (s + 1) / 2) /
           cluster.device(rank).AttentionFlops();
  };
  auto per_sequence = [&](int rank) {  // full recompute: linear x 4, attention x 4.5, head x 3
    const double head = 3 * 2 * s * model.vocab * model.hidden / cluster.device(rank).GemmFlops();
    return model.layers * (4 * linear(rank) + 4.5 * attention(rank)) + head;
  };
  // The sync hides behind the slowest replica's last backward only (ZeRO-1): its recompute
  // (linear x 1, attention x 1) and backward (linear x 2, attention x 2.5), every layer.
  auto last_backward = [&](int rank) {
    return model.layers * (3 * linear(rank) + 3.5 * attention(rank));
  };
  const double busy_fast = 3 * per_sequence(0), busy_slow = 1 * per_sequence(1);
  const double busy = std::max(busy_fast, busy_slow);
  const double window = last_backward(busy_fast > busy_slow ? 0 : 1);
  const double bucket = model.TotalParams() * 2 / model.layers;
  const double pass = cluster.Latency(0, 1) + bucket / 2 / std::min(cluster.Bandwidth(0, 1), nic);
  // ZeRO-1's second pass, the weight all-gather, hides behind the next forward of one sequence
  // (linear x 1, attention x 1), which the faster replica (the H100's) finishes first; the sync
  // is each pass's exposure over its own window, or both over the backward's if that is less.
  const double forward = model.layers * (linear(0) + attention(0));
  ASSERT_LT(forward, model.layers * (linear(1) + attention(1)));
  const double split =
      std::max(pass, model.layers * pass - window) + std::max(pass, model.layers * pass - forward);
  const double sync = std::min(split, std::max(2 * pass, model.layers * 2 * pass - window));

  ASSERT_EQ(sim->replicas.size(), 2u);
  EXPECT_NEAR(sim->replicas[0].busy_seconds / busy_fast, 1.0, kNsRounding);
  EXPECT_NEAR(sim->replicas[1].busy_seconds / busy_slow, 1.0, kNsRounding);
  EXPECT_EQ(sim->slowest_replica, busy_fast > busy_slow ? 0 : 1);
  EXPECT_NEAR(sim->grad_bucket_seconds / (2 * pass), 1.0, kNsRounding);
  EXPECT_NEAR(sim->grad_sync_exposed_seconds / sync, 1.0, kNsRounding);
  // Then the optimizer step: ZeRO-1 over the 2 participants, 28 bytes per parameter at the
  // slower participant's HBM bandwidth (the A100's).
  const double optimizer = 28 * model.TotalParams() / 2 / cluster.device(1).hbm_bytes_per_second;
  EXPECT_NEAR(sim->optimizer_seconds / optimizer, 1.0, 1e-12);
  EXPECT_NEAR(sim->iteration_seconds / (busy + sync + optimizer), 1.0, kNsRounding);
  EXPECT_NEAR(sim->tokens_per_second / (4 * s / (busy + sync + optimizer)), 1.0, kNsRounding);
  EXPECT_EQ(sim->ranks[0].replica, 0);
  EXPECT_EQ(sim->ranks[1].replica, 1);
  EXPECT_EQ(sim->ranks[2].replica, -1);
  EXPECT_FALSE(sim->ranks[2].active);
  EXPECT_EQ(sim->ranks[2].busy_seconds, 0);
  EXPECT_EQ(sim->ranks[2].comm_seconds, 0);
  EXPECT_EQ(sim->ranks[2].idle_seconds, sim->iteration_seconds);
  EXPECT_EQ(sim->left_out, std::vector<int>{2});
  // The cost model scores the same plan the same way.
  EXPECT_NEAR(sim->iteration_seconds / cost.Evaluate(plan).iteration_seconds, 1.0, 1e-3);
}

double SimulatedPassSeconds(const CostModel& cost, const std::vector<int>& participants) {
  Engine engine(cost.cluster());
  BuildGradSyncGraph(cost, participants, engine);
  return static_cast<double>(engine.Run().makespan_ns) * 1e-9;
}

// Three 8-GPU nodes, NIC 25 GB/s: rank 15 of node 1 and all of node 2 left out. By hand: the
// rings inside nodes 0 (8 GPUs) and 1 (7 GPUs), then one step between the two nodes, where GPU 0
// of node 1 receives two flows of bucket / 16 (from GPUs 0 and 7 of node 0) and node 0's GPUs
// one flow of bucket / 14 each.
TEST(Replicas, GradSyncRunsOverTheParticipatingRanksOnly) {
  const Cluster cluster = simtest::EightGpuNodes({"H100-SXM", "A100-SXM-80G"}, {1, 2}, 25e9);
  const CostModel cost(cluster, *LoadModel("gpt-7b"), MakeWorkload(32768, 1, 3, Recompute::kFull));
  std::vector<int> participants = Iota(0, 15);  // ranks 0-14
  const double bucket = cost.GradBucketBytes();
  const NodeKind& h100 = cluster.kinds[0];
  const NodeKind& a100 = cluster.kinds[1];
  const double intra =
      std::max(7 * (h100.latency_seconds + bucket / 8 / h100.intra_node_bytes_per_second),
               6 * (a100.latency_seconds + bucket / 7 / a100.intra_node_bytes_per_second));
  const double hop =
      cluster.inter_node_latency_seconds + std::max(2 * (bucket / 16), bucket / 14) / 25e9;
  EXPECT_NEAR(SimulatedPassSeconds(cost, participants) / (intra + hop), 1.0, kNsRounding);
  // The cost model's hierarchical closed form over the same participants.
  EXPECT_NEAR(cost.GradSyncPassSeconds({8, 7, 0}) / (intra + hop), 1.0, 1e-12);
  // Node 1 left out entirely: the ring over the nodes skips it (nodes 0 and 2, one step of
  // bucket / 16 per GPU).
  std::vector<int> outer = Iota(0, 8);
  for (int rank : Iota(16, 8)) outer.push_back(rank);
  const double outer_expect =
      std::max(7 * (h100.latency_seconds + bucket / 8 / h100.intra_node_bytes_per_second),
               7 * (a100.latency_seconds + bucket / 8 / a100.intra_node_bytes_per_second)) +
      cluster.inter_node_latency_seconds + bucket / 16 / 25e9;
  EXPECT_NEAR(SimulatedPassSeconds(cost, outer) / outer_expect, 1.0, kNsRounding);
  // One participant, or none: nothing to synchronise.
  EXPECT_EQ(SimulatedPassSeconds(cost, {5}), 0);
}

struct ReplicaCase {
  Cluster cluster;
  ModelSpec model;
  Workload workload;
  Plan plan;
};

// Two 8-GPU nodes: an H100 replica on ranks 0-6 (rank 7 left out) and an A100 replica on ranks
// 8-15, with different sequences; random in-node layouts (contention-free: every rank has its
// own ports).
ReplicaCase TwoNodeReplicas(int zero_stage, uint64_t seed, int64_t seq = 65536, double nic = 25e9) {
  ReplicaCase c;
  c.cluster = simtest::EightGpuNodes({"H100-SXM", "A100-SXM-80G"}, {1, 1}, nic);
  c.model = *LoadModel("llama3-8b");
  c.workload = MakeWorkload(seq, 7, zero_stage, Recompute::kFull);
  std::mt19937_64 rng(seed);
  const int h100_sequences = 4 + static_cast<int>(rng() % 2);  // 4 or 5 of 7
  c.plan = MergeReplicas({RandomPart(simtest::SingleNode("H100-SXM", 7), c.model, c.workload,
                                     h100_sequences, Iota(0, 7), 16, rng),
                          RandomPart(simtest::SingleNode("A100-SXM-80G", 8), c.model, c.workload,
                                     7 - h100_sequences, Iota(8, 8), 16, rng)});
  c.plan.zero_stage = zero_stage;
  return c;
}

// The model's busy time of one replica: its plan scored alone with its sequences, sharded over
// every participant (as the cost model scores replicas).
double ModelReplicaBusy(const ReplicaCase& c, int replica) {
  Workload workload = c.workload;
  workload.batch = ReplicaSequences(c.plan, replica);
  workload.shard_ranks = static_cast<int>(ParticipatingRanks(c.plan).size());
  const PlanCost part =
      CostModel(c.cluster, c.model, workload).Evaluate(ReplicaPlan(c.plan, replica));
  return part.iteration_seconds - part.grad_sync_seconds;
}

// Each term of the slowest replica within 5% of the model's, every replica's busy time and the
// iteration within 2% (contention-free layouts agree within a fraction of a percent; the
// per-plan bound of Fidelity.ContentionFreeRandomPlansAgreeWithin5PercentAndRankTheSame is 10%),
// the gradient sync's total exactly (the same hierarchical algorithm over the same participants;
// under ZeRO-3 one round per sequence of the replica with the most). Seed 4 is short sequences
// over a slow NIC, where the sync is exposed beyond the slowest replica's compute.
TEST(Replicas, ReplicaPlansAgreeWithTheCostModelTermByTerm) {
  for (int zero_stage : {1, 3}) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const ReplicaCase c = seed < 4 ? TwoNodeReplicas(zero_stage, seed)
                                     : TwoNodeReplicas(zero_stage, seed, 8192, 5e9);
      SCOPED_TRACE("zero " + std::to_string(zero_stage) + " seed " + std::to_string(seed));
      const CostModel cost(c.cluster, c.model, c.workload);
      auto sim = Simulate(c.plan, cost.problem());
      ASSERT_TRUE(sim.has_value()) << sim.error().message;
      const PlanCost model = cost.Evaluate(c.plan);
      ASSERT_TRUE(model.feasible) << model.infeasible_reason;
      if (std::getenv("HEXISEQ_FIDELITY_VERBOSE")) {
        std::printf("zero %d seed %d: sequences %d/%d, iteration model %.4f sim %.4f s", zero_stage,
                    static_cast<int>(seed), c.plan.replica_sequences[0],
                    c.plan.replica_sequences[1], model.iteration_seconds, sim->iteration_seconds);
        for (const SimTerm& t : sim->terms)
          std::printf(" | %s %.4f/%.4f", t.name.c_str(), t.model_seconds, t.sim_seconds);
        std::printf("\n");
      }
      EXPECT_NEAR(sim->iteration_seconds / model.iteration_seconds, 1.0, 0.02);
      for (int replica = 0; replica < 2; ++replica)
        EXPECT_NEAR(sim->replicas[replica].busy_seconds / ModelReplicaBusy(c, replica), 1.0, 0.02)
            << "replica " << replica;
      for (const SimTerm& term : sim->terms)
        EXPECT_NEAR(term.sim_seconds, term.model_seconds, 0.05 * term.model_seconds) << term.name;
      EXPECT_NEAR(sim->grad_sync_total_seconds / cost.GradSyncTotalSeconds(c.plan), 1.0,
                  kNsRounding);
      const int most = std::max(c.plan.replica_sequences[0], c.plan.replica_sequences[1]);
      EXPECT_NEAR(sim->grad_sync_total_seconds /
                      ((zero_stage >= 3 ? most : 1) * c.model.layers * sim->grad_bucket_seconds),
                  1.0, 1e-12);
      // ZeRO-3 hides the sync behind the slowest replica's busy time but one bucket per sequence
      // of the replica with the most; ZeRO-1 from the moment the
      // last replica starts its last backward (recompute and backward passes of one sequence) to
      // the slowest replica's end, and its all-gather pass behind the shortest forward of one
      // sequence, where that exposes less than both passes in the backward window.
      const SimReplica& slowest = sim->replicas[sim->slowest_replica];
      double last_opening = 0, forward = slowest.busy_seconds;
      for (const SimReplica& replica : sim->replicas) {
        EXPECT_LT(replica.backward_seconds, replica.busy_seconds / replica.sequences);
        EXPECT_GT(replica.forward_seconds, 0);
        EXPECT_LT(replica.forward_seconds + replica.backward_seconds,
                  replica.busy_seconds / replica.sequences);
        last_opening = std::max(last_opening, replica.busy_seconds - replica.backward_seconds);
        forward = std::min(forward, replica.forward_seconds);
      }
      const double window =
          zero_stage >= 3 ? slowest.busy_seconds : slowest.busy_seconds - last_opening;
      const double bucket = sim->grad_bucket_seconds, total = sim->grad_sync_total_seconds;
      // ZeRO 3: one bucket exposed per sequence of the replica with the most
      double exposed = std::max(zero_stage >= 3 ? most * bucket : bucket, total - window);
      if (zero_stage < 3)
        exposed = std::min(exposed, std::max(bucket / 2, total / 2 - window) +
                                        std::max(bucket / 2, total / 2 - forward));
      EXPECT_NEAR(sim->grad_sync_exposed_seconds, exposed, 1e-12);
      EXPECT_FALSE(sim->ranks[7].active);
      EXPECT_EQ(sim->ranks[7].busy_seconds, 0);
      EXPECT_EQ(model.ranks[7].compute_seconds(), 0);
    }
  }
}

// Without a shared resource (one NIC per GPU), a replica runs in the combined simulation exactly
// as alone: the same layer time and per-rank figures, to the last bit.
TEST(Replicas, EachReplicaIsSimulatedAsIfAlone) {
  const ReplicaCase c = TwoNodeReplicas(1, 7);
  const CostModel cost(c.cluster, c.model, c.workload);
  auto together = Simulate(c.plan, cost.problem());
  ASSERT_TRUE(together.has_value()) << together.error().message;
  for (int replica = 0; replica < 2; ++replica) {
    Workload workload = c.workload;
    workload.batch = ReplicaSequences(c.plan, replica);
    workload.shard_ranks = cost.ShardRanks(c.plan);  // ZeRO as together
    workload.charge_optimizer_step = false;          // the whole plan charges it
    const CostModel alone_cost(c.cluster, c.model, workload);
    auto alone = Simulate(ReplicaPlan(c.plan, replica), alone_cost.problem());
    ASSERT_TRUE(alone.has_value()) << alone.error().message;
    EXPECT_EQ(together->replicas[replica].layer_seconds, alone->layer_seconds);
    EXPECT_EQ(together->replicas[replica].head_seconds, alone->head_seconds);
    EXPECT_EQ(together->replicas[replica].busy_seconds, alone->replicas[0].busy_seconds);
    for (int rank : together->replicas[replica].ranks) {
      const double optimizer = cost.OptimizerStepSeconds(c.plan, rank);
      EXPECT_GT(optimizer, 0);
      EXPECT_NEAR(together->ranks[rank].busy_seconds - optimizer, alone->ranks[rank].busy_seconds,
                  1e-12 * alone->ranks[rank].busy_seconds)
          << rank;
    }
  }
}

// A 7-GPU plan, alone on a 7-GPU node and with an 8th GPU left out: every figure of the 7 ranks
// is the same to the last bit (the left-out GPU sends, receives and synchronises nothing).
TEST(Replicas, ALeftOutRankChangesNothingForTheOthers) {
  const ModelSpec model = *LoadModel("gpt-7b");
  const Workload workload = MakeWorkload(65536, 2, 3, Recompute::kSelective);
  const Cluster seven = simtest::SingleNode("H100-SXM", 7);
  const Cluster eight = simtest::SingleNode("H100-SXM", 8);
  std::mt19937_64 rng(5);
  const Plan plan =
      simtest::RandomPlan(CostModel(seven, model, workload), rng, simtest::GroupShape::kAny, 0.2);
  const Plan with_left_out = EmbedPlan(plan, Iota(0, 7), 8);
  SimOptions options;
  options.keep_timeline = true;
  auto alone = Simulate(plan, Problem{seven, model, workload}, options);
  auto embedded = Simulate(with_left_out, Problem{eight, model, workload}, options);
  ASSERT_TRUE(alone && embedded);
  EXPECT_EQ(embedded->iteration_seconds, alone->iteration_seconds);
  EXPECT_EQ(embedded->layer_seconds, alone->layer_seconds);
  EXPECT_EQ(embedded->grad_sync_total_seconds, alone->grad_sync_total_seconds);
  for (int rank = 0; rank < 7; ++rank) {
    EXPECT_EQ(embedded->ranks[rank].busy_seconds, alone->ranks[rank].busy_seconds);
    EXPECT_EQ(embedded->ranks[rank].comm_seconds, alone->ranks[rank].comm_seconds);
    EXPECT_EQ(embedded->ranks[rank].exposed_comm_seconds, alone->ranks[rank].exposed_comm_seconds);
  }
  ASSERT_EQ(embedded->timeline.layer_timings.size(), alone->timeline.layer_timings.size());
  for (size_t op = 0; op < alone->timeline.layer_timings.size(); ++op) {
    EXPECT_EQ(embedded->timeline.layer_timings[op].start_ns,
              alone->timeline.layer_timings[op].start_ns);
    EXPECT_EQ(embedded->timeline.layer_timings[op].end_ns,
              alone->timeline.layer_timings[op].end_ns);
  }
  for (const Op& op : embedded->timeline.sync_ops) EXPECT_TRUE(op.rank != 7 && op.peer != 7);
  EXPECT_FALSE(embedded->ranks[7].active);
  EXPECT_EQ(embedded->ranks[7].replica, -1);
  EXPECT_EQ(embedded->ranks[7].busy_seconds, 0);
}

// Two replicas, each spanning both nodes (sub-rings across the NICs), with each node's GPUs
// sharing one NIC: in one engine the replicas contend for the pools, so each is slower than alone;
// with a NIC per GPU they do not meet and each runs exactly as alone.
TEST(Replicas, ReplicasSharingANicPoolContend) {
  const Cluster cluster = simtest::EightGpuNodes({"H100-SXM"}, {2}, 25e9);
  const ModelSpec model = *LoadModel("llama3-8b");
  const Workload workload = MakeWorkload(131072, 2, 1, Recompute::kFull);
  const Cluster half = MakeCluster({simtest::Device("H100-SXM")}, {2}, 4, 25e9);
  std::mt19937_64 rng(3);
  std::vector<int> first = Iota(0, 4), second = Iota(4, 4);
  for (int rank : Iota(8, 4)) first.push_back(rank);
  for (int rank : Iota(12, 4)) second.push_back(rank);
  const Plan plan = MergeReplicas(
      {RandomPart(half, model, workload, 1, first, 16, rng, simtest::GroupShape::kWithinNode),
       RandomPart(half, model, workload, 1, second, 16, rng, simtest::GroupShape::kWithinNode)});
  const CostModel cost(cluster, model, workload);
  Workload one = workload;
  one.batch = 1;
  const CostModel alone_cost(cluster, model, one);
  for (int nics : {0, 1}) {
    SimOptions options;
    options.nics_per_node = nics;
    auto together = Simulate(plan, cost.problem(), options);
    auto alone = Simulate(ReplicaPlan(plan, 0), alone_cost.problem(), options);
    ASSERT_TRUE(together && alone);
    if (nics == 0)
      EXPECT_EQ(together->replicas[0].layer_seconds, alone->layer_seconds);
    else
      EXPECT_GT(together->replicas[0].layer_seconds, 1.01 * alone->layer_seconds);
  }
}

}  // namespace
}  // namespace hexiseq::sim
