// Training checkpoints and initial weights in safetensors with Hugging Face Llama names.
// A checkpoint directory DIR holds one sub-directory per saved step, DIR/step-<k>/ with
// model.safetensors (weights), optimizer.safetensors (AdamW moments, "exp_avg.<name>" and
// "exp_avg_sq.<name>") and state.json (step, data position, seed, optimizer step count, plan
// hash, ranks, sequence length, batch), and DIR/latest naming the newest complete one. Every file
// is written atomically and `latest` last, so a run killed while saving resumes from the
// previous checkpoint. Weights are replicated: the first participating rank writes, every
// participating rank reads (ranks the plan leaves out have no trainer).
#pragma once

#include <string>

#include "spec/error.h"
#include "train/trainer.h"

namespace hexiseq::train {

// Collective over the participants: the first writes the trainer's current state under `dir`; every
// rank returns the same outcome.
Result<void> SaveCheckpoint(Trainer& trainer, const std::string& dir);

// Collective: every rank loads DIR/latest into the trainer (weights, optimizer state, step).
// The checkpoint must come from the same plan, process count, sequence length, batch, seed and
// optimizer (else an error naming the field), so that the resumed run is bit-identical.
Result<void> LoadCheckpoint(Trainer& trainer, const std::string& dir);

// Every rank replaces the initial weights with those of a safetensors file with Hugging Face
// names: a missing, extra or wrongly shaped tensor, a non-float dtype or a NaN/inf value is an
// error naming the tensor. F32, F64, BF16 and F16 are converted to the model's dtype.
Result<void> LoadInitWeights(Trainer& trainer, const std::string& path);

}  // namespace hexiseq::train
