// Training with data-parallel replicas and left-out ranks against the single-process run of the
// whole batch: plans whose replicas have different shapes (ring, Ulysses, USP, random layouts),
// interleaved world ranks and left-out ranks anywhere give the step-0 loss and every gradient of
// one rank within 1e-5 relative and AdamW loss curves within 1e-4 (float sums in another order).
// Also: the batch split, the local replica plan, left-out ranks getting no trainer, and the
// errors (--batch against the plan, a partial batch with several replicas).
#include "runtime/replicas.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <random>

#include "runtime/plan_gen_util.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace hexiseq::train {
namespace {

using hexiseq::testing::RandomPlan;
using hexiseq::testing::RandomPlanOptions;
using hexiseq::testing::RelativeError;
using hexiseq::testing::RingPlan;
using hexiseq::testing::RunTraining;
using hexiseq::testing::TinyLlama;
using hexiseq::testing::TrainRun;
using hexiseq::testing::UlyssesPlan;
using hexiseq::testing::UspPlan;

constexpr double kGradientTolerance = 1e-5;
constexpr double kCurveTolerance = 1e-4;
constexpr int kCurveSteps = 6;
constexpr int64_t kSeq = 96;

TrainOptions ReplicaOptions(int batch) {
  TrainOptions options;
  options.data = "synthetic:recall";
  options.batch = batch;
  options.seed = 9;
  options.recompute = RecomputePolicy::kNone;
  options.optimizer.lr = 3e-3;
  options.optimizer.warmup_steps = 2;
  options.optimizer.total_steps = kCurveSteps;
  options.optimizer.weight_decay = 0.01;
  options.bucket_bytes = 16 << 10;
  return options;
}

// One plan from one-replica `parts`: part p becomes replica p with `sequences[p]`; world ranks
// are handed out in `order` (a permutation of the participants' slots, so replicas interleave),
// skipping the ranks in `left_out`.
Plan CombineReplicas(const std::vector<Plan>& parts, const std::vector<int>& sequences,
                     const std::vector<int>& left_out, const std::vector<int>& order) {
  Plan plan = parts[0];
  plan.groups.clear();
  plan.left_out = left_out;
  plan.replica_sequences = sequences;
  plan.batch = std::accumulate(sequences.begin(), sequences.end(), 0);
  int participants = 0;
  for (const Plan& part : parts) participants += part.num_ranks;
  plan.num_ranks = participants + static_cast<int>(left_out.size());
  std::vector<int> world_ranks;  // slot -> world rank
  for (int rank = 0; rank < plan.num_ranks; ++rank) {
    if (!std::binary_search(left_out.begin(), left_out.end(), rank)) world_ranks.push_back(rank);
  }
  int first_slot = 0;
  for (size_t replica = 0; replica < parts.size(); ++replica) {
    for (PlanGroup group : parts[replica].groups) {
      group.replica = static_cast<int>(replica);
      for (int& rank : group.ranks) rank = world_ranks[order[first_slot + rank]];
      for (PlanMember& member : group.members) {
        member.rank = world_ranks[order[first_slot + member.rank]];
      }
      plan.groups.push_back(group);
    }
    first_slot += parts[replica].num_ranks;
  }
  return plan;
}

std::vector<int> Identity(int size) {
  std::vector<int> order(size);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

const TrainRun& SingleRankRun(int batch) {
  static std::map<int, TrainRun> cache;
  if (!cache.contains(batch)) {
    cache[batch] = RunTraining(RingPlan(1, kSeq, 8, 2, false), TinyLlama(), ReplicaOptions(batch),
                               kCurveSteps);
  }
  return cache[batch];
}

void ExpectMatchesSingleRank(const Plan& plan) {
  SCOPED_TRACE(PlanToJson(plan, -1));
  ASSERT_TRUE(ValidateStructure(plan)) << ValidateStructure(plan).error().message;
  const TrainRun& single = SingleRankRun(plan.batch);
  ASSERT_EQ(single.error, "");
  const TrainRun run = RunTraining(plan, TinyLlama(), ReplicaOptions(plan.batch), kCurveSteps);
  ASSERT_EQ(run.error, "");
  EXPECT_NEAR(run.loss0, single.loss0, kGradientTolerance * std::abs(single.loss0));
  EXPECT_NEAR(run.recall0, single.recall0, kGradientTolerance * std::abs(single.recall0));
  ASSERT_EQ(run.grads.size(), single.grads.size());
  for (const auto& [name, grad] : single.grads) {
    EXPECT_LE(RelativeError(run.grads.at(name), grad), kGradientTolerance) << name;
  }
  for (size_t index = 0; index < run.grads_max_rank_diff.size(); ++index) {
    EXPECT_EQ(run.grads_max_rank_diff[index], 0.0f) << "parameter " << index << " differs by rank";
  }
  ASSERT_EQ(run.losses.size(), single.losses.size());
  for (size_t step = 0; step < run.losses.size(); ++step) {
    EXPECT_NEAR(run.losses[step], single.losses[step], kCurveTolerance * single.losses[step])
        << "step " << step;
  }
}

TEST(Replicas, SequenceBlocksFollowTheReplicaOrder) {
  const Plan plan = CombineReplicas(
      {UspPlan(1, 2, kSeq, 8, 2), RingPlan(1, kSeq, 8, 2, false), UlyssesPlan(2, kSeq, 8, 2)},
      {3, 1, 2}, {}, Identity(5));
  const std::vector<std::pair<int, int>> expected = {{0, 3}, {3, 1}, {4, 2}};
  for (int replica = 0; replica < 3; ++replica) {
    const runtime::SequenceBlock block = runtime::ReplicaSequenceBlock(plan, replica);
    EXPECT_EQ(std::make_pair(block.first, block.count), expected[replica]) << replica;
  }
}

TEST(Replicas, LocalReplicaRenumbersRanksInWorldOrder) {
  // Replica 0 on world ranks 4 and 1 (in its own member order), replica 1 on 3, rank 0 and 2 out.
  const Plan plan = CombineReplicas({UlyssesPlan(2, kSeq, 8, 2), RingPlan(1, kSeq, 8, 2, false)},
                                    {1, 1}, {0, 2}, {2, 0, 1});
  EXPECT_EQ(runtime::ReplicaOf(plan, 4), 0);
  EXPECT_EQ(runtime::ReplicaOf(plan, 3), 1);
  EXPECT_EQ(runtime::ReplicaOf(plan, 2), -1);
  const runtime::LocalReplica local = runtime::MakeLocalReplica(plan, 0);
  EXPECT_EQ(local.world_ranks, (std::vector<int>{1, 4}));
  EXPECT_EQ(local.plan.num_ranks, 2);
  EXPECT_TRUE(local.plan.left_out.empty());
  EXPECT_EQ(local.plan.groups[0].ranks, (std::vector<int>{1, 0}));  // world 4, 1
  EXPECT_TRUE(ValidateStructure(local.plan)) << ValidateStructure(local.plan).error().message;
}

TEST(Replicas, TwoReplicasOfDifferentShapesMatchSingleRank) {
  // 3 ranks in a CP x HP layout with 3 sequences, 1 rank alone with 1 (the test in tests/mpi).
  ExpectMatchesSingleRank(CombineReplicas(
      {UspPlan(2, 2, kSeq, 8, 2), RingPlan(1, kSeq, 8, 2, false)}, {3, 1}, {}, Identity(5)));
}

TEST(Replicas, InterleavedReplicasAndLeftOutRanksMatchSingleRank) {
  ExpectMatchesSingleRank(CombineReplicas(
      {RingPlan(2, kSeq, 8, 2, true), UlyssesPlan(3, kSeq, 8, 2), RingPlan(1, kSeq, 8, 2, false)},
      {2, 1, 2}, {1, 4}, {0, 3, 1, 5, 2, 4}));
}

// ZeRO 2 and 3 with replicas of 3 and 1 sequences (and interleaved replicas with left-out
// ranks): the replica with fewer sequences joins the others' reduce-scatters (and at ZeRO 3 weight
// gathers) in idle rounds, so no collective is left unmatched and every gradient is the whole
// batch's.
TEST(Replicas, ZeroThreeReplicasWithUnequalSequencesMatchSingleRank) {
  for (Plan plan : {CombineReplicas({UspPlan(2, 2, kSeq, 8, 2), RingPlan(1, kSeq, 8, 2, false)},
                                    {3, 1}, {}, Identity(5)),
                    CombineReplicas({RingPlan(2, kSeq, 8, 2, true), UlyssesPlan(3, kSeq, 8, 2),
                                     RingPlan(1, kSeq, 8, 2, false)},
                                    {2, 1, 2}, {1, 4}, {0, 3, 1, 5, 2, 4})}) {
    for (const int stage : {2, 3}) {
      plan.zero_stage = stage;
      SCOPED_TRACE("zero " + std::to_string(stage));
      ExpectMatchesSingleRank(plan);
    }
  }
}

TEST(Replicas, OneReplicaWithALeftOutRankMatchesSingleRank) {
  ExpectMatchesSingleRank(CombineReplicas({UspPlan(1, 3, kSeq, 8, 2)}, {2}, {0}, Identity(3)));
}

TEST(Replicas, RandomReplicaPlansMatchSingleRank) {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<Plan> parts;
    std::vector<int> sequences;
    int participants = 0;
    const int replicas = 2 + trial % 2;
    for (int replica = 0; replica < replicas; ++replica) {
      RandomPlanOptions options;
      options.num_ranks = 1 + static_cast<int>(rng() % 3);
      options.seq_len = kSeq;
      options.idle_group_probability = 0.2;
      options.zero_token_probability = 0.2;
      parts.push_back(RandomPlan(rng, options));
      sequences.push_back(1 + static_cast<int>(rng() % 2));
      participants += options.num_ranks;
    }
    std::vector<int> order = Identity(participants);
    std::shuffle(order.begin(), order.end(), rng);
    const std::vector<int> left_out = {static_cast<int>(rng() % (participants + 1))};
    SCOPED_TRACE("trial " + std::to_string(trial));
    ExpectMatchesSingleRank(CombineReplicas(parts, sequences, left_out, order));
    if (HasFatalFailure()) return;
  }
}

// Every rank's outcome of Trainer::Create: its error, "left out", or "trainer".
std::vector<std::string> CreateOutcomes(const Plan& plan, const TrainOptions& options) {
  std::vector<std::string> outcomes(plan.num_ranks);
  std::mutex mu;
  runtime::RunInProcess(plan.num_ranks, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(plan, TinyLlama(), options, comm);
    std::lock_guard lock(mu);
    outcomes[comm.rank()] = !trainer ? trainer.error().message : *trainer ? "trainer" : "left out";
  });
  return outcomes;
}

TEST(Replicas, LeftOutRanksGetNoTrainer) {
  const Plan plan =
      CombineReplicas({UlyssesPlan(2, kSeq, 8, 2)}, {2}, {1}, Identity(2));  // ranks 0, 2
  EXPECT_EQ(CreateOutcomes(plan, ReplicaOptions(0)),
            (std::vector<std::string>{"trainer", "left out", "trainer"}));
}

TEST(ReplicaErrors, BatchFlagMustEqualThePlansBatchOnEveryRank) {
  const Plan plan = CombineReplicas({UspPlan(1, 2, kSeq, 8, 2), RingPlan(1, kSeq, 8, 2, false)},
                                    {3, 1}, {3}, Identity(3));
  for (const std::string& outcome : CreateOutcomes(plan, ReplicaOptions(2))) {
    EXPECT_NE(outcome.find("--batch = 2 but the plan has batch = 4 (rule: a step trains the "
                           "plan's batch, split over its 2 replica(s)"),
              std::string::npos)
        << outcome;
    EXPECT_NE(outcome.find("hint: leave --batch out"), std::string::npos) << outcome;
  }
}

TEST(ReplicaErrors, GradientsOfAPartialBatchNeedOneReplica) {
  const Plan plan = CombineReplicas(
      {RingPlan(1, kSeq, 8, 2, false), RingPlan(1, kSeq, 8, 2, false)}, {1, 1}, {}, Identity(2));
  std::vector<std::string> errors(2);
  runtime::RunInProcess(2, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(plan, TinyLlama(), ReplicaOptions(0), comm);
    ASSERT_TRUE(trainer && *trainer);
    const std::vector<Sequence> one = {(*trainer)->data().Get(0)};
    auto loss = (*trainer)->ComputeGradients(one);
    errors[comm.rank()] = loss ? "no error" : loss.error().message;
  });
  for (const std::string& error : errors) {
    EXPECT_NE(error.find("1 sequences given but the plan has batch = 2"), std::string::npos)
        << error;
  }
}

}  // namespace
}  // namespace hexiseq::train
