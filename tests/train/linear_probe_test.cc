// calibrate's trainer probes: the linear one charges the cost model's FLOPs for one sequence's
// linear phase and times the trainer's own passes, padded by --slowdown as train pads them; the
// optimizer one times the trainer's optimizer step over every parameter.
#include "train/linear_probe.h"

#include <gtest/gtest.h>

#include "cost/cost_model.h"
#include "runtime/slowdown.h"
#include "train/train_test_util.h"

namespace hexiseq::train {
namespace {

using hexiseq::testing::TinyLlama;

TEST(LinearProbe, ChargesTheCostModelsLinearPhaseFlops) {
  const ModelSpec model = TinyLlama(8, 2);
  for (Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
    const calibrate::RatePoint point = TimeTrainerLinearPhase(model, recompute, 64, 1);
    EXPECT_EQ(point.tokens, 64);
    EXPECT_DOUBLE_EQ(point.flops, LinearPhaseFlops(model, recompute, 64));
    EXPECT_GT(point.seconds, 0);
  }
}

// Spin padding is exact: a rank slowed 4x takes about 4x as long; other processes on the machine
// move the ratio a little, so the bound is loose.
TEST(LinearProbe, SlowdownPadsTheTimedPasses) {
  constexpr double kFactor = 4;
  constexpr double kMinRatio = 2.5;
  const ModelSpec model = TinyLlama(8, 2);
  const double plain = TimeTrainerLinearPhase(model, Recompute::kNone, 128, 3).seconds;
  runtime::SetPadMode(runtime::PadMode::kSpin);
  runtime::SetComputeSlowdown(kFactor);
  const double slowed = TimeTrainerLinearPhase(model, Recompute::kNone, 128, 3).seconds;
  runtime::SetComputeSlowdown(1);
  EXPECT_GT(slowed / plain, kMinRatio) << "plain " << plain << " s, slowed " << slowed << " s";
}

// The optimizer probe counts the trainer's parameters (the cost model's TotalParams, which the
// optimizer step is charged for) and times the step, its update padded by --slowdown.
TEST(OptimizerProbe, CountsTheModelsParametersAndPadsTheUpdate) {
  constexpr double kFactor = 4;
  constexpr double kMinRatio = 2;  // clipping's norm is not padded, as in train
  const ModelSpec model = TinyLlama(8, 2);
  const calibrate::OptimizerPoint plain = TimeTrainerOptimizerStep(model, 3);
  EXPECT_DOUBLE_EQ(plain.params, model.TotalParams());
  EXPECT_GT(plain.seconds, 0);
  runtime::SetPadMode(runtime::PadMode::kSpin);
  runtime::SetComputeSlowdown(kFactor);
  const double slowed = TimeTrainerOptimizerStep(model, 3).seconds;
  runtime::SetComputeSlowdown(1);
  EXPECT_GT(slowed / plain.seconds, kMinRatio)
      << "plain " << plain.seconds << " s, slowed " << slowed << " s";
}

}  // namespace
}  // namespace hexiseq::train
