// Optimizers over the replicated weights, written with libtorch tensor ops and the same update
// formulas as torch.optim (checked against torch::optim in tests): AdamW (decoupled weight decay,
// bias correction) and plain SGD, a learning-rate schedule (linear warmup, then cosine decay to
// min_lr), and clipping by the global gradient norm. Deterministic: the same gradients give the
// same bits. Ignores parameter groups (one setting for every parameter).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "spec/error.h"

namespace hexiseq::train {

enum class OptimizerKind { kAdamW, kSgd };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;                               // peak learning rate
  double min_lr = 0.0;                            // end of the cosine
  int64_t warmup_steps = 0;                       // linear warmup from lr / warmup_steps to lr
  int64_t total_steps = 1;                        // the cosine reaches min_lr here
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // torch.optim.AdamW defaults
  double weight_decay = 0.0;
  double grad_clip = 1.0;  // max global L2 norm; <= 0 disables clipping
};

// Checks ranges (lr > 0, betas in [0, 1), eps > 0, weight decay >= 0, warmup >= 0, steps >= 1),
// naming the flag.
Result<void> ValidateOptimizerConfig(const OptimizerConfig& config);

// Learning rate of 0-based step `step`: lr * (step + 1) / warmup during warmup, then
// min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2 with progress from 0 to 1 at total_steps.
double LearningRate(const OptimizerConfig& config, int64_t step);

// Global L2 norm of the gradients (accumulated in double); when it exceeds max_norm > 0, scales
// every gradient by max_norm / (norm + 1e-6) like torch.nn.utils.clip_grad_norm_. Returns the
// norm before clipping.
double ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm);

class Optimizer {
 public:
  Optimizer(const OptimizerConfig& config, std::vector<at::Tensor> params);

  // One update of every parameter from its .grad() at learning rate `lr`.
  void Step(double lr);

  const OptimizerConfig& config() const { return config_; }
  int64_t steps_taken() const { return steps_taken_; }
  void set_steps_taken(int64_t steps) { steps_taken_ = steps; }
  // AdamW moments, one per parameter (empty for SGD); writable for resuming.
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }

 private:
  void AdamWStep(double lr);
  void SgdStep(double lr);

  OptimizerConfig config_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  int64_t steps_taken_ = 0;
};

}  // namespace hexiseq::train
