// AdamW and SGD updates (torch.optim's single-tensor formulas), the warmup + cosine schedule and
// global-norm clipping.
#include "train/optimizer.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string>

namespace hexiseq::train {
namespace {

constexpr double kClipEpsilon = 1e-6;  // torch.nn.utils.clip_grad_norm_

std::string Num(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

Result<void> RangeError(const std::string& flag, double value, const std::string& rule,
                        const std::string& hint) {
  return InvalidArgument(flag + " = " + Num(value) + ": out of range (rule: " + rule +
                         "; hint: " + hint + ")");
}

}  // namespace

Result<void> ValidateOptimizerConfig(const OptimizerConfig& c) {
  if (!(c.lr > 0) || !std::isfinite(c.lr)) {
    return RangeError("--lr", c.lr, "a finite number > 0", "write --lr 1e-3");
  }
  if (!(c.min_lr >= 0) || c.min_lr > c.lr) {
    return RangeError("--min-lr", c.min_lr, "0 <= min_lr <= lr", "write --min-lr 0");
  }
  if (!(c.beta1 >= 0 && c.beta1 < 1)) {
    return RangeError("--beta1", c.beta1, "in [0, 1)", "write --beta1 0.9");
  }
  if (!(c.beta2 >= 0 && c.beta2 < 1)) {
    return RangeError("--beta2", c.beta2, "in [0, 1)", "write --beta2 0.999");
  }
  if (!(c.eps > 0)) return RangeError("--adam-eps", c.eps, "> 0", "write --adam-eps 1e-8");
  if (!(c.weight_decay >= 0)) {
    return RangeError("--weight-decay", c.weight_decay, ">= 0", "write --weight-decay 0.01");
  }
  if (c.warmup_steps < 0) {
    return RangeError("--warmup", static_cast<double>(c.warmup_steps), ">= 0", "write --warmup 10");
  }
  if (c.total_steps < 1) {
    return RangeError("--steps", static_cast<double>(c.total_steps), ">= 1", "write --steps 100");
  }
  if (std::isnan(c.grad_clip)) {
    return RangeError("--grad-clip", c.grad_clip, "a number; <= 0 disables clipping",
                      "write --grad-clip 1");
  }
  return {};
}

double LearningRate(const OptimizerConfig& config, int64_t step) {
  if (step < config.warmup_steps) {
    return config.lr * static_cast<double>(step + 1) / static_cast<double>(config.warmup_steps);
  }
  const int64_t decay_steps = std::max<int64_t>(1, config.total_steps - config.warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - config.warmup_steps) / decay_steps);
  return config.min_lr +
         (config.lr - config.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

std::vector<double> GradSquaredNorms(const std::vector<at::Tensor>& params) {
  at::NoGradGuard no_grad;
  std::vector<double> squares(params.size(), 0.0);
  for (size_t index = 0; index < params.size(); ++index) {
    const at::Tensor& grad = params[index].grad();
    if (grad.defined()) squares[index] = grad.to(at::kDouble).pow(2).sum().item<double>();
  }
  return squares;
}

double ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm) {
  return ClipGradNorm(params, GradSquaredNorms(params), max_norm);
}

double ClipGradNorm(const std::vector<at::Tensor>& params, std::span<const double> squares,
                    double max_norm) {
  at::NoGradGuard no_grad;
  double sum_squares = 0;
  for (double square : squares) sum_squares += square;
  const double norm = std::sqrt(sum_squares);
  if (max_norm > 0 && std::isfinite(norm)) {
    const double coefficient = max_norm / (norm + kClipEpsilon);
    if (coefficient < 1.0) {
      for (const at::Tensor& param : params) {
        if (param.grad().defined()) param.mutable_grad().mul_(coefficient);
      }
    }
  }
  return norm;
}

std::vector<int> OptimizerShardOwners(const std::vector<at::Tensor>& params, int participants) {
  std::vector<size_t> largest_first(params.size());
  std::iota(largest_first.begin(), largest_first.end(), size_t{0});
  std::stable_sort(largest_first.begin(), largest_first.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> held(participants, 0);
  std::vector<int> owners(params.size(), 0);
  for (size_t index : largest_first) {
    const int owner = static_cast<int>(std::min_element(held.begin(), held.end()) - held.begin());
    owners[index] = owner;
    held[owner] += params[index].numel();
  }
  return owners;
}

Optimizer::Optimizer(const OptimizerConfig& config, std::vector<at::Tensor> params,
                     std::vector<uint8_t> owned)
    : config_(config), params_(std::move(params)), owned_(std::move(owned)) {
  if (config_.kind == OptimizerKind::kAdamW) {
    for (size_t index = 0; index < params_.size(); ++index) {
      exp_avg_.push_back(owns(index) ? at::zeros_like(params_[index]).detach() : at::Tensor());
      exp_avg_sq_.push_back(owns(index) ? at::zeros_like(params_[index]).detach() : at::Tensor());
    }
  }
}

void Optimizer::SetMoments(std::vector<at::Tensor> exp_avg, std::vector<at::Tensor> exp_avg_sq) {
  if (config_.kind != OptimizerKind::kAdamW) return;
  for (size_t index = 0; index < params_.size(); ++index) {
    exp_avg_[index] = owns(index) ? exp_avg[index] : at::Tensor();
    exp_avg_sq_[index] = owns(index) ? exp_avg_sq[index] : at::Tensor();
  }
}

void Optimizer::Step(double lr) {
  at::NoGradGuard no_grad;
  ++steps_taken_;
  if (config_.kind == OptimizerKind::kAdamW) {
    AdamWStep(lr);
  } else {
    SgdStep(lr);
  }
}

void Optimizer::AdamWStep(double lr) {
  const double t = static_cast<double>(steps_taken_);
  const double bias_correction1 = 1.0 - std::pow(config_.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(config_.beta2, t);
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (size_t index = 0; index < params_.size(); ++index) {
    at::Tensor param = params_[index];
    if (!owns(index) || !param.grad().defined()) continue;
    const at::Tensor grad = param.grad();
    param.mul_(1.0 - lr * config_.weight_decay);
    exp_avg_[index].mul_(config_.beta1).add_(grad, 1.0 - config_.beta1);
    exp_avg_sq_[index].mul_(config_.beta2).addcmul_(grad, grad, 1.0 - config_.beta2);
    const at::Tensor denom = (exp_avg_sq_[index].sqrt() / bias_correction2_sqrt).add_(config_.eps);
    param.addcdiv_(exp_avg_[index], denom, -step_size);
  }
}

void Optimizer::SgdStep(double lr) {
  for (size_t index = 0; index < params_.size(); ++index) {
    at::Tensor& param = params_[index];
    if (!owns(index) || !param.grad().defined()) continue;
    at::Tensor grad = param.grad();
    if (config_.weight_decay != 0) grad = grad.add(param, config_.weight_decay);
    param.add_(grad, -lr);
  }
}

}  // namespace hexiseq::train
