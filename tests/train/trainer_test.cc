// Distributed training against the single-process run of the same model: for plans of every
// shape (ring with zigzag, Ulysses, USP, random plans with zero-token ranks, idle groups, head
// sets that cut a KV group, non-contiguous ranges) on 1-8 in-process ranks, the step-0 loss and
// every parameter gradient equal the 1-rank run within 1e-5 relative, and AdamW loss curves
// stay within 1e-4. Also: every rank ends with the same gradients, recompute full == none, and
// the setup errors (plan/model/seq mismatch, wrong world size, bad data).
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/plan_gen_util.h"
#include "train/train_test_util.h"

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
using hexiseq::testing::WithBatch;

constexpr double kGradientTolerance = 1e-5;
constexpr double kCurveTolerance = 1e-4;
constexpr int kCurveSteps = 20;

TrainOptions TestOptions(RecomputePolicy recompute = RecomputePolicy::kNone) {
  TrainOptions options;
  options.data = "synthetic:recall";
  options.batch = 2;
  options.seed = 5;
  options.recompute = recompute;
  options.optimizer.lr = 3e-3;
  options.optimizer.warmup_steps = 3;
  options.optimizer.total_steps = kCurveSteps;
  options.optimizer.weight_decay = 0.01;
  options.bucket_bytes = 16 << 10;  // several buckets for the tiny model
  return options;
}

const TrainRun& SingleRankRun(int64_t seq_len, int heads, int kv_heads, int steps) {
  static std::map<std::tuple<int64_t, int, int, int>, TrainRun> cache;
  const auto key = std::make_tuple(seq_len, heads, kv_heads, steps);
  if (!cache.contains(key)) {
    cache[key] = RunTraining(RingPlan(1, seq_len, heads, kv_heads, false),
                             TinyLlama(heads, kv_heads), TestOptions(), steps);
  }
  return cache[key];
}

void ExpectMatchesSingleRank(const Plan& plan, int steps = 0,
                             RecomputePolicy recompute = RecomputePolicy::kNone) {
  SCOPED_TRACE(PlanToJson(plan, -1));
  const TrainRun& single = SingleRankRun(plan.seq_len, plan.num_heads, plan.num_kv_heads, steps);
  ASSERT_EQ(single.error, "");
  const TrainRun run = RunTraining(plan, TinyLlama(plan.num_heads, plan.num_kv_heads),
                                   TestOptions(recompute), steps);
  ASSERT_EQ(run.error, "");
  EXPECT_NEAR(run.loss0, single.loss0, kGradientTolerance * std::abs(single.loss0));
  EXPECT_NEAR(run.recall0, single.recall0, kGradientTolerance * std::abs(single.recall0));
  ASSERT_EQ(run.grads.size(), single.grads.size());
  for (const auto& [name, grad] : single.grads) {
    const double error = RelativeError(run.grads.at(name), grad);
    EXPECT_LE(error, kGradientTolerance) << name;
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

TEST(Trainer, RingZigzagMatchesSingleRank) {
  ExpectMatchesSingleRank(RingPlan(4, 128, 8, 2, true), kCurveSteps);
}

TEST(Trainer, UlyssesMatchesSingleRank) { ExpectMatchesSingleRank(UlyssesPlan(4, 128, 8, 2)); }

TEST(Trainer, UspMatchesSingleRank) {
  ExpectMatchesSingleRank(UspPlan(2, 2, 128, 8, 2), kCurveSteps);
}

TEST(Trainer, UlyssesHeadSetsCuttingKvGroupsMatchSingleRank) {
  // 3 ranks over 8 heads: blocks of 3, 3, 2 heads cut both KV groups of 4.
  ExpectMatchesSingleRank(UlyssesPlan(3, 128, 8, 2), kCurveSteps);
}

TEST(Trainer, RandomPlansOnOneToEightRanksMatchSingleRank) {
  std::mt19937_64 rng(77);
  for (int num_ranks = 1; num_ranks <= 8; ++num_ranks) {
    RandomPlanOptions options;
    options.num_ranks = num_ranks;
    options.seq_len = 97;
    options.idle_group_probability = 0.3;
    options.zero_token_probability = 0.3;
    SCOPED_TRACE("ranks " + std::to_string(num_ranks));
    ExpectMatchesSingleRank(RandomPlan(rng, options), num_ranks == 5 ? kCurveSteps : 0);
    if (HasFatalFailure()) return;
  }
}

TEST(Trainer, FullRecomputeGivesTheSameGradients) {
  ExpectMatchesSingleRank(UspPlan(2, 2, 128, 8, 2), 3, RecomputePolicy::kFull);
}

TEST(Trainer, LossFallsOnRecall) {
  TrainOptions options = TestOptions();
  const TrainRun run = RunTraining(RingPlan(2, 128, 8, 2, true), TinyLlama(), options, 15);
  ASSERT_EQ(run.error, "");
  // Most targets are uniform filler (ln 190 = 5.25 at best), so the total falls by a few tenths.
  EXPECT_LT(run.losses.back(), run.losses.front() - 0.25);
  // Untrained: close to ln(vocab) at the start.
  EXPECT_NEAR(run.losses.front(), std::log(256.0), 0.3);
}

// Rank 0's losses of `steps` steps and its final weights, with the gradient sync overlapped or
// blocking; `overlapped` receives the buckets the last step started during backward.
std::pair<std::vector<double>, std::vector<float>> StepsWithSync(
    const Plan& plan, const ModelSpec& model, bool overlap, RecomputePolicy recompute, int steps,
    int* overlapped, int batch = 2) {
  TrainOptions options = TestOptions(recompute);
  options.overlap_grad_sync = overlap;
  options.batch = batch;
  std::vector<double> losses;
  std::vector<float> weights;
  std::mutex mu;
  runtime::RunInProcess(plan.num_ranks, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(WithBatch(plan, options.batch), model, options, comm);
    ASSERT_TRUE(trainer) << trainer.error().message;
    std::vector<double> mine;
    for (int step = 0; step < steps; ++step) {
      auto report = (*trainer)->Step();
      ASSERT_TRUE(report) << report.error().message;
      mine.push_back(report->loss);
    }
    (*trainer)->GatherWeights();  // collective: ZeRO 3 holds only its own weights
    if (comm.rank() != 0) return;
    std::lock_guard lock(mu);
    losses = mine;
    *overlapped = (*trainer)->grad_sync().buckets_started_in_backward();
    for (const NamedTensorRef& named : NamedParameters((*trainer)->weights())) {
      const at::Tensor flat = named.tensor.detach().contiguous().view(-1);
      weights.insert(weights.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
    }
  });
  return {losses, weights};
}

TEST(Trainer, OverlappedGradientSyncIsBitIdenticalToBlocking) {
  constexpr int kSteps = 4;
  for (const RecomputePolicy recompute : {RecomputePolicy::kNone, RecomputePolicy::kFull}) {
    // The attention backward adds dK/dV contributions in a fixed order, so plans whose sums
    // gather three or more contributions from several ranks (USP 3 x 2 with one KV head: the
    // previous hop's sum and two holders' partials) are bit-identical too.
    const std::pair<Plan, ModelSpec> cases[] = {
        {UlyssesPlan(2, 96, 8, 2), TinyLlama()},
        {UlyssesPlan(4, 128, 8, 2), TinyLlama()},
        {RingPlan(4, 128, 8, 2, true), TinyLlama()},
        {UspPlan(3, 2, 144, 8, 1), TinyLlama(8, 1)},
    };
    for (const auto& [plan, model] : cases) {
      SCOPED_TRACE(PlanToJson(plan, -1));
      int overlapped = 0, blocking_overlapped = 0;
      const auto overlap = StepsWithSync(plan, model, true, recompute, kSteps, &overlapped);
      const auto blocking =
          StepsWithSync(plan, model, false, recompute, kSteps, &blocking_overlapped);
      ASSERT_EQ(overlap.first.size(), static_cast<size_t>(kSteps));
      EXPECT_EQ(overlap.first, blocking.first);  // bit-identical losses
      ASSERT_EQ(overlap.second.size(), blocking.second.size());
      size_t mismatches = 0;
      for (size_t index = 0; index < overlap.second.size(); ++index) {
        mismatches += overlap.second[index] != blocking.second[index];
      }
      EXPECT_EQ(mismatches, 0u) << "weights differ bitwise";
      // The hooks really started buckets before backward ended (all but the last ones).
      EXPECT_GT(overlapped, 0);
      EXPECT_EQ(blocking_overlapped, 0);
    }
  }
}

// Plans the sharded-step tests run at ZeRO 0 and a sharded stage: Ulysses on 4 ranks, and USP
// 3 x 2 with one KV head.
std::vector<std::pair<Plan, ModelSpec>> ShardingCases() {
  return {{UlyssesPlan(4, 128, 8, 2), TinyLlama()}, {UspPlan(3, 2, 144, 8, 1), TinyLlama(8, 1)}};
}

// At ZeRO 1 a step reduce-scatters the gradients of its two sequences once to their parameters'
// owners and all-gathers the weights after the update, waited for by the next forward: the same
// sums, so the same bits as unsharded, overlapped or not; after a step each rank holds the
// gradients of its own parameters only.
TEST(Trainer, ShardedStepsReduceScatterToOwnersBitIdenticallyToUnsharded) {
  constexpr int kSteps = 3;
  for (const auto& [plan, model] : ShardingCases()) {
    Plan unsharded = plan, sharded = plan;
    unsharded.zero_stage = 0;
    sharded.zero_stage = 1;
    SCOPED_TRACE(PlanToJson(sharded, -1));
    int started = 0;
    const auto reference =
        StepsWithSync(unsharded, model, true, RecomputePolicy::kNone, kSteps, &started);
    for (const bool overlap : {true, false}) {
      const auto ours =
          StepsWithSync(sharded, model, overlap, RecomputePolicy::kNone, kSteps, &started);
      EXPECT_EQ(ours.first, reference.first) << "losses, overlap " << overlap;
      EXPECT_TRUE(ours.second == reference.second) << "weights differ bitwise, overlap " << overlap;
    }
  }
  const Plan plan = [] {
    Plan sharded = UlyssesPlan(3, 96, 6, 3);
    sharded.zero_stage = 1;
    return sharded;
  }();
  const TrainOptions options = TestOptions();
  runtime::RunInProcess(plan.num_ranks, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(WithBatch(plan, options.batch), TinyLlama(6, 3), options, comm);
    ASSERT_TRUE(trainer) << trainer.error().message;
    ASSERT_TRUE((*trainer)->optimizer_sharded());
    // The step leaves the others' weights to the next forward (or to weights()): until then a
    // parameter this rank does not own keeps its old value.
    const std::vector<NamedTensorRef> params = NamedParameters((*trainer)->weights());
    std::vector<at::Tensor> before;
    for (const NamedTensorRef& named : params) before.push_back(named.tensor.clone());
    ASSERT_TRUE((*trainer)->Step());
    for (size_t index = 0; index < params.size(); ++index) {
      if (!(*trainer)->optimizer().owns(index)) {
        EXPECT_TRUE(at::equal(params[index].tensor, before[index])) << params[index].name;
      }
    }
    (*trainer)->weights();
    for (size_t index = 0; index < params.size(); ++index) {
      EXPECT_FALSE(at::equal(params[index].tensor, before[index])) << params[index].name;
    }
    int owned = 0, held = 0;
    for (size_t index = 0; index < params.size(); ++index) {
      owned += (*trainer)->optimizer().owns(index);
      held += params[index].tensor.grad().defined();
      EXPECT_EQ(params[index].tensor.grad().defined(), (*trainer)->optimizer().owns(index))
          << params[index].name;
    }
    EXPECT_GT(owned, 0);
    EXPECT_LT(owned, static_cast<int>(params.size()));
    EXPECT_EQ(held, owned);
  });
}

// Steps of `sharded` against `unsharded` at one and two sequences per step, with and without
// full recompute, overlapped and blocking: bit-identical at one, within `tolerance` at two.
void ExpectShardedMatchesUnsharded(const Plan& unsharded, const Plan& sharded,
                                   const ModelSpec& model, double tolerance) {
  constexpr int kSteps = 3;
  SCOPED_TRACE(PlanToJson(sharded, -1));
  for (const RecomputePolicy recompute : {RecomputePolicy::kNone, RecomputePolicy::kFull}) {
    int started = 0;
    for (const int batch : {1, 2}) {
      const auto reference =
          StepsWithSync(unsharded, model, true, recompute, kSteps, &started, batch);
      for (const bool overlap : {true, false}) {
        const auto ours =
            StepsWithSync(sharded, model, overlap, recompute, kSteps, &started, batch);
        ASSERT_EQ(ours.first.size(), reference.first.size());
        ASSERT_EQ(ours.second.size(), reference.second.size());
        if (batch == 1) {
          EXPECT_EQ(ours.first, reference.first) << "losses, overlap " << overlap;
          EXPECT_TRUE(ours.second == reference.second) << "weights differ bitwise";
          continue;
        }
        for (size_t step = 0; step < ours.first.size(); ++step)
          EXPECT_NEAR(ours.first[step], reference.first[step], tolerance);
        double worst = 0;
        for (size_t index = 0; index < ours.second.size(); ++index)
          worst = std::max(
              worst, std::abs(static_cast<double>(ours.second[index]) - reference.second[index]));
        EXPECT_LT(worst, tolerance) << "weights, overlap " << overlap;
      }
    }
  }
}

// ZeRO 2 and 3 reduce-scatter each sequence's gradients after its backward (ZeRO 3 also gathers
// every layer's weights before its forward and again before its backward): with one sequence per
// step the sums are the all-reduce's, so losses and weights are bit-identical to ZeRO 0; with
// two, each owner adds the second sequence's sum to the first's (another order of the same
// additions). Full recompute and blocking sync take the same path.
TEST(Trainer, ZeroThreeGathersWeightsPerPassAndMatchesUnsharded) {
  constexpr double kTwoSequenceTolerance = 1e-5;
  for (const auto& [plan, model] : ShardingCases()) {
    for (const int stage : {2, 3}) {
      Plan unsharded = plan, sharded = plan;
      unsharded.zero_stage = 0;
      sharded.zero_stage = stage;
      ExpectShardedMatchesUnsharded(unsharded, sharded, model, kTwoSequenceTolerance);
    }
  }
}

// Gradient reductions per step of two sequences: one at ZeRO 0-1 (whole gradients accumulate),
// one per sequence at ZeRO 2-3 (each owner accumulates its shard).
TEST(Trainer, ReductionsPerStepFollowTheZeroStage) {
  constexpr int kSteps = 2;
  const TrainOptions options = TestOptions();
  ASSERT_EQ(options.batch, 2);
  for (const int stage : {0, 1, 2, 3}) {
    Plan plan = UlyssesPlan(4, 128, 8, 2);
    plan.zero_stage = stage;
    runtime::RunInProcess(plan.num_ranks, [&](runtime::Comm& comm) {
      auto trainer = Trainer::Create(WithBatch(plan, options.batch), TinyLlama(), options, comm);
      ASSERT_TRUE(trainer) << trainer.error().message;
      EXPECT_EQ((*trainer)->grads_sharded(), stage >= 2);
      for (int step = 0; step < kSteps; ++step) ASSERT_TRUE((*trainer)->Step());
      const int per_step = stage >= 2 ? options.batch : 1;
      EXPECT_EQ((*trainer)->grad_sync().passes(), kSteps * per_step) << "zero " << stage;
    });
  }
}

// Between steps a ZeRO-3 rank holds only the weights it owns (the others are NaN) and its own
// parameters' gradients; GatherWeights brings every weight back.
TEST(Trainer, ZeroThreeHoldsOnlyItsOwnWeightsBetweenSteps) {
  Plan plan = UlyssesPlan(3, 96, 6, 3);
  plan.zero_stage = 3;
  const TrainOptions options = TestOptions();
  runtime::RunInProcess(plan.num_ranks, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(WithBatch(plan, options.batch), TinyLlama(6, 3), options, comm);
    ASSERT_TRUE(trainer) << trainer.error().message;
    ASSERT_TRUE((*trainer)->weights_sharded());
    ASSERT_TRUE((*trainer)->Step());
    const std::vector<NamedTensorRef> params = NamedParameters((*trainer)->weights());
    int owned = 0;
    for (size_t index = 0; index < params.size(); ++index) {
      const bool owns = (*trainer)->optimizer().owns(index);
      owned += owns;
      EXPECT_EQ(at::isnan(params[index].tensor).all().item<bool>(), !owns) << params[index].name;
      EXPECT_EQ(params[index].tensor.grad().defined(), owns) << params[index].name;
    }
    EXPECT_GT(owned, 0);
    EXPECT_LT(owned, static_cast<int>(params.size()));
    (*trainer)->GatherWeights();
    for (const NamedTensorRef& named : params)
      EXPECT_TRUE(at::isfinite(named.tensor).all().item<bool>()) << named.name;
    ASSERT_TRUE((*trainer)->Step());  // and training goes on from there
  });
}

// By default the trainer's buckets are the cost model's (ModelSpec::GradBucketParams: one layer's
// share of all parameters), so the sync it runs is the one the model and the simulator charge:
// as many buckets as layers, or one more where the parameter tensors do not pack exactly, and
// every parameter in one of them.
TEST(Trainer, DefaultGradientBucketsAreTheCostModelsBuckets) {
  const ModelSpec model = TinyLlama();
  TrainOptions options = TestOptions();
  options.bucket_bytes = 0;
  const Plan plan = UlyssesPlan(2, 96, 8, 2);
  runtime::RunInProcess(plan.num_ranks, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(WithBatch(plan, options.batch), model, options, comm);
    ASSERT_TRUE(trainer) << trainer.error().message;
    int64_t elements = 0;
    for (const NamedTensorRef& named : NamedParameters((*trainer)->weights()))
      elements += named.tensor.numel();
    EXPECT_EQ(static_cast<double>(elements), model.TotalParams());
    const int buckets = (*trainer)->grad_sync().num_buckets();
    EXPECT_GE(buckets, model.layers);
    EXPECT_LE(buckets, model.layers + 1);
  });
}

std::string SetupError(const Plan& plan, const ModelSpec& model, const TrainOptions& options,
                       int world_size) {
  std::string first;
  std::mutex mu;
  runtime::RunInProcess(world_size, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(WithBatch(plan, options.batch), model, options, comm);
    std::lock_guard lock(mu);
    if (!trainer && (comm.rank() == 0)) first = trainer.error().message;
    if (trainer && comm.rank() == 0) first = "no error";
  });
  return first;
}

TEST(TrainerErrors, PlanForOtherHeads) {
  const std::string error =
      SetupError(RingPlan(2, 64, 4, 2, false), TinyLlama(8, 2), TestOptions(), 2);
  EXPECT_NE(error.find("plan: num_heads = 4, num_kv_heads = 2 but model tiny-test has heads = 8"),
            std::string::npos)
      << error;
}

TEST(TrainerErrors, SeqDiffersFromPlan) {
  TrainOptions options = TestOptions();
  options.seq_len = 100;
  const std::string error = SetupError(RingPlan(2, 64, 8, 2, false), TinyLlama(), options, 2);
  EXPECT_NE(error.find("--seq = 100 but the plan has seq_len = 64"), std::string::npos) << error;
}

TEST(TrainerErrors, WrongWorldSize) {
  const std::string error = SetupError(RingPlan(4, 64, 8, 2, false), TinyLlama(), TestOptions(), 3);
  EXPECT_NE(error.find("num_ranks = 4 but 3 processes are running"), std::string::npos) << error;
}

TEST(TrainerErrors, ByteDataNeedsByteVocab) {
  ModelSpec model = TinyLlama();
  model.vocab = 100;
  TrainOptions options = TestOptions();
  options.data = "/etc/hostname";
  const std::string error = SetupError(RingPlan(1, 64, 8, 2, false), model, options, 1);
  EXPECT_NE(error.find("model vocab = 100: too small for byte-level tokens"), std::string::npos)
      << error;
}

TEST(TrainerErrors, MissingDataFile) {
  TrainOptions options = TestOptions();
  options.data = "/nonexistent/data.bin";
  const std::string error = SetupError(RingPlan(2, 64, 8, 2, false), TinyLlama(), options, 2);
  EXPECT_NE(error.find("/nonexistent/data.bin: cannot read the --data file: No such file"),
            std::string::npos)
      << error;
}

TEST(TrainerErrors, BadLearningRate) {
  TrainOptions options = TestOptions();
  options.optimizer.lr = -1;
  const std::string error = SetupError(RingPlan(1, 64, 8, 2, false), TinyLlama(), options, 1);
  EXPECT_NE(error.find("--lr = -1: out of range"), std::string::npos) << error;
}

}  // namespace
}  // namespace hexiseq::train
