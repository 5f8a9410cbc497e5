// Sub-cluster views (links, latencies and kinds the world's), replica plans mapped back to world
// ranks, and the baselines' data-parallel degrees.
#include "sched/subcluster.h"

#include <gtest/gtest.h>

#include <random>

#include "sched/data_parallel.h"
#include "sched/sched_test_util.h"
#include "sched/scheduler.h"

namespace hexiseq {
namespace {

using sched_test::Device;
using sched_test::Model;

// A random cluster with a `links:` override between its first two kinds.
Cluster LinkedRandomCluster(std::mt19937_64& rng, int ranks) {
  Cluster cluster = sched_test::RandomSmallCluster(rng, ranks);
  if (cluster.kinds.size() >= 2) cluster.links.push_back({0, 1, 60e9});
  if (cluster.kinds.size() >= 3) cluster.links.push_back({2, 2, 3e9});
  cluster.Finalize();
  return cluster;
}

std::vector<int> RandomSubset(std::mt19937_64& rng, int ranks) {
  std::vector<int> subset;
  std::bernoulli_distribution keep(0.6);
  for (int rank = 0; rank < ranks; ++rank)
    if (keep(rng)) subset.push_back(rank);
  if (subset.empty()) subset.push_back(ranks - 1);
  return subset;
}

TEST(SubCluster, LinksLatenciesAndDevicesAreTheWorlds) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const Cluster world = LinkedRandomCluster(rng, 4 + trial % 12);
    const std::vector<int> subset = RandomSubset(rng, world.num_ranks());
    const SubCluster sub = MakeSubCluster(world, subset);
    ASSERT_EQ(sub.cluster.num_ranks(), static_cast<int>(subset.size()));
    EXPECT_EQ(sub.world_ranks, subset);
    for (int a = 0; a < sub.cluster.num_ranks(); ++a) {
      const int wa = subset[a];
      EXPECT_EQ(sub.cluster.device(a), world.device(wa)) << "trial " << trial;
      EXPECT_EQ(sub.cluster.NicPortBandwidth(sub.cluster.ranks[a].kind),
                world.NicPortBandwidth(world.ranks[wa].kind));
      for (int b = 0; b < sub.cluster.num_ranks(); ++b) {
        const int wb = subset[b];
        EXPECT_EQ(sub.cluster.Bandwidth(a, b), world.Bandwidth(wa, wb)) << a << "," << b;
        EXPECT_EQ(sub.cluster.Latency(a, b), world.Latency(wa, wb));
        EXPECT_EQ(sub.cluster.SameNode(a, b), world.SameNode(wa, wb));
      }
    }
  }
}

TEST(SubCluster, ScheduledReplicaMapsBackToWorldRanks) {
  std::mt19937_64 rng(9);
  const ModelSpec model = Model("llama3-8b");
  for (int trial = 0; trial < 4; ++trial) {
    const Cluster world = LinkedRandomCluster(rng, 6 + 2 * trial);
    const SubCluster sub = MakeSubCluster(world, RandomSubset(rng, world.num_ranks()));
    Workload workload;
    workload.seq_len = 32768;
    workload.shard_ranks = sub.cluster.num_ranks();  // the same sharding on both sides
    const CostModel world_model(world, model, workload);
    const CostModel sub_model = ReplicaCostModel(world_model, sub, 1, workload.shard_ranks);
    ScheduleOptions options;
    options.explain_infeasible = false;
    auto scheduled = Schedule(sub_model.problem(), options);
    const StrategyResult one = scheduled ? *scheduled : RingOneReplica(sub_model);
    const Plan plan = AssembleReplicas(world_model, {{&sub, one.plan, 1}}, "hexiseq");
    ASSERT_TRUE(Validate(plan, world, model)) << Validate(plan, world, model).error().message;
    for (const PlanGroup& group : plan.groups)
      for (const PlanMember& member : group.members) {
        EXPECT_EQ(member.node, world.ranks[member.rank].node);
        EXPECT_EQ(member.device, world.device(member.rank).name);
      }
    std::vector<int> expected_left_out;
    for (int rank = 0; rank < world.num_ranks(); ++rank)
      if (!std::binary_search(sub.world_ranks.begin(), sub.world_ranks.end(), rank))
        expected_left_out.push_back(rank);
    for (int rank : one.plan.left_out) expected_left_out.push_back(sub.world_ranks[rank]);
    std::sort(expected_left_out.begin(), expected_left_out.end());
    EXPECT_EQ(plan.left_out, expected_left_out);
    // The replica alone costs on the world what it cost on its sub-cluster (same links, same
    // sharding, the same nodes in the gradient sync), plus the optimizer step, which the replica's
    // own model leaves to the whole plan (over the plan's participants, the ranks left out of
    // the replica's own plan included in neither).
    const PlanCost world_cost = world_model.Evaluate(plan);
    EXPECT_EQ(one.cost.optimizer_seconds, 0);
    EXPECT_EQ(world_cost.optimizer_seconds, world_model.OptimizerStepSeconds(plan));
    EXPECT_GT(world_cost.optimizer_seconds, 0);
    EXPECT_NEAR(world_cost.iteration_seconds - world_cost.optimizer_seconds,
                one.cost.iteration_seconds, 1e-9 * one.cost.iteration_seconds);
  }
}

TEST(DataParallel, EvenBatchSplitSumsToTheBatch) {
  EXPECT_EQ(EvenBatchSplit(7, 3), (std::vector<int>{3, 2, 2}));
  EXPECT_EQ(EvenBatchSplit(8, 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(EvenBatchSplit(1, 1), (std::vector<int>{1}));
}

TEST(DataParallel, BatchOfOneIsOneReplica) {
  const Cluster world = MakeCluster({Device("H100-SXM")}, {2}, 8, 25e9);
  Workload workload;
  workload.seq_len = 32768;
  const CostModel model(world, Model("llama3-8b"), workload);
  const StrategyResult ring = RingBaseline(model.problem());
  EXPECT_EQ(NumReplicas(ring.plan), 1);
  EXPECT_EQ(ring.plan, RingOneReplica(model).plan);
}

TEST(DataParallel, ReplicasPartitionTheRanksAndBeatOneReplicaAtShortSequences) {
  const Cluster world = MakeCluster({Device("H100-SXM")}, {4}, 8, 25e9);
  Workload workload;
  workload.seq_len = 8192;
  workload.batch = 8;
  workload.zero_stage = 1;
  const CostModel model(world, Model("llama3-8b"), workload);
  for (const StrategyResult& result :
       {RingBaseline(model.problem()), UspBaseline(model.problem())}) {
    ASSERT_TRUE(result.feasible()) << result.reason;
    ASSERT_TRUE(Validate(result.plan, world, model.model()));
    EXPECT_GT(NumReplicas(result.plan), 1) << result.config;
    int sequences = 0;
    for (int replica = 0; replica < NumReplicas(result.plan); ++replica)
      sequences += ReplicaSequences(result.plan, replica);
    EXPECT_EQ(sequences, 8);
    EXPECT_EQ(ParticipatingRanks(result.plan).size(), 32u);
    const StrategyResult one =
        DataParallelAt(model, ParticipatingRanks(result.plan), 1, result.strategy,
                       result.strategy == "ring" ? RingOneReplica : UspOneReplica);
    EXPECT_LT(result.cost.iteration_seconds, one.cost.iteration_seconds);
  }
}

TEST(DataParallel, SubsetLeavesTheSlowerTypesOut) {
  const Cluster world = MakeCluster({Device("H100-SXM"), Device("A100-40G")}, {1, 1}, 8, 1e9);
  Workload workload;
  workload.seq_len = 131072;
  const CostModel model(world, Model("llama3-8b"), workload);
  const StrategyResult subset = SubsetBaseline(model.problem());
  ASSERT_TRUE(subset.feasible()) << subset.reason;
  EXPECT_EQ(subset.plan.left_out, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  ASSERT_TRUE(Validate(subset.plan, world, model.model()));
}

}  // namespace
}  // namespace hexiseq
