// Optimizers over the replicated weights, written with libtorch tensor ops and the same update
// formulas as torch.optim (checked against torch::optim in tests): AdamW (decoupled weight decay,
// bias correction) and plain SGD, a learning-rate schedule (linear warmup, then cosine decay to
// min_lr), and clipping by the global gradient norm. Deterministic: the same gradients give the
// same bits. The state can be sharded over ranks by whole parameters (ZeRO stage 1). Ignores
// parameter groups (one setting for every parameter).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <span>
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

// Per parameter, the sum of its gradient's squares in double (0 where .grad() is undefined).
std::vector<double> GradSquaredNorms(const std::vector<at::Tensor>& params);

// Global L2 norm of the gradients: the square root of `squares` (GradSquaredNorms, possibly
// summed over ranks that each hold some gradients) added in parameter order; when it exceeds
// max_norm > 0, scales every defined gradient by max_norm / (norm + 1e-6) like
// torch.nn.utils.clip_grad_norm_. Returns the norm before clipping.
double ClipGradNorm(const std::vector<at::Tensor>& params, std::span<const double> squares,
                    double max_norm);
// The same with every gradient on this rank: ClipGradNorm(params, GradSquaredNorms(params), ...).
double ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm);

// The owners of the optimizer state when a plan shards it (ZeRO stage >= 1) over the
// `participants` ranks that synchronise gradients: whole parameters, largest first, each to the
// participant that holds the fewest elements so far (ties: the lowest rank). So each one updates
// about 1 / participants of the elements, and every parameter is updated with the operations an
// unsharded step runs on it (bit-identical results). Returns each parameter's owner.
// REQUIRES: participants >= 1.
std::vector<int> OptimizerShardOwners(const std::vector<at::Tensor>& params, int participants);

class Optimizer {
 public:
  // `owned[i]` says whether this rank updates parameter i and keeps its moments (a sharded
  // optimizer state: OptimizerShardOwners); empty: every parameter.
  Optimizer(const OptimizerConfig& config, std::vector<at::Tensor> params,
            std::vector<uint8_t> owned = {});

  // One update of every owned parameter from its .grad() at learning rate `lr`.
  void Step(double lr);
  bool owns(size_t index) const { return owned_.empty() || owned_[index] != 0; }
  // Takes moments for every parameter (resuming) and keeps the owned ones.
  void SetMoments(std::vector<at::Tensor> exp_avg, std::vector<at::Tensor> exp_avg_sq);

  const OptimizerConfig& config() const { return config_; }
  int64_t steps_taken() const { return steps_taken_; }
  void set_steps_taken(int64_t steps) { steps_taken_ = steps; }
  // AdamW moments, one per parameter, undefined where not owned (empty for SGD).
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }

 private:
  void AdamWStep(double lr);
  void SgdStep(double lr);

  OptimizerConfig config_;
  std::vector<at::Tensor> params_;
  std::vector<uint8_t> owned_;  // empty: every parameter
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  int64_t steps_taken_ = 0;
};

}  // namespace hexiseq::train
