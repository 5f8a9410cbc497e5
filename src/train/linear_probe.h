// The trainer's linear phase as calibrate's GEMM-rate probe (calibrate::LinearProbe). One sequence
// of `tokens` rows runs through the trainer's whole model (LlamaShardModel: embedding, every
// layer's projections, norms, RoPE and MLP, the LM head and the loss) over a one-rank attention,
// forward then backward, timed as `train` times its linear phase: the wall time of each pass,
// padded by --slowdown as train pads it, minus the attention layers' own time. Its FLOPs are what
// the cost model charges for that work (GEMMs and LM head), so the rate calibrate writes out makes
// the cost model's linear time the time the trainer takes, non-GEMM work included.
#pragma once

#include <cstdint>

#include "calibrate/calibrate.h"
#include "spec/model.h"

namespace hexiseq::train {

inline constexpr const char* kTrainerProbeName =
    "the trainer's linear phase (libtorch: embedding, every layer's GEMMs, norms, RoPE and MLP, "
    "LM head, loss)";

// REQUIRES: tokens >= 1, repeats >= 1. Runs on the calling thread only (no collective).
calibrate::RatePoint TimeTrainerLinearPhase(const ModelSpec& model, Recompute recompute,
                                            int64_t tokens, int repeats);

inline constexpr const char* kTrainerOptimizerProbeName =
    "the trainer's optimizer step (libtorch: gradient clipping, then AdamW over every parameter)";

// The trainer's optimizer step as calibrate's optimizer probe (calibrate::OptimizerProbe): the
// model's weights with gradients, timed as `train` runs the step's end: the gradient norm and
// clipping, then the AdamW update inside a --slowdown compute region. Median seconds over the
// runs; `params` is the trainer's parameter count. REQUIRES: repeats >= 1.
calibrate::OptimizerPoint TimeTrainerOptimizerStep(const ModelSpec& model, int repeats);

}  // namespace hexiseq::train
