// Compute probes of calibrate: the trainer's GEMMs (sgemm) and the runtime's attention kernels,
// timed at one shard size, with the FLOPs the cost model charges for exactly that work.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "calibrate/calibrate_internal.h"
#include "cost/cost_model.h"
#include "runtime/attention_kernels.h"
#include "runtime/slowdown.h"

namespace hexiseq::calibrate::internal {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMinProbeTokens = 32;       // the smallest point of a curve
constexpr int kProbeFractions[] = {4, 2, 1};  // shard / 4, shard / 2, shard
constexpr int kProbeGrowth = 2;               // above the even split: x 2, x 4, ... up to S
constexpr double kMinPointSeconds = 0.2;      // timed seconds per point, at least
constexpr int kMaxRepeats = 50;
constexpr int64_t kMaxLoopParams = int64_t{1} << 24;  // the plain AdamW loop's arrays: 256 MiB
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Deterministic values in [-1, 1): the probes time kernels, the values only must be finite.
void Fill(std::vector<float>& values, uint32_t seed) {
  uint32_t state = seed * 2654435761u + 1;
  for (float& value : values) {
    state = state * 1664525u + 1013904223u;
    value = static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
}

// Seconds of fn() inside a --slowdown compute region (so a slowed rank measures slower), with
// the padding settled inside the timed span, so that each run carries its own padding and
// oversleeping (nothing moves into the next run or point).
template <class Fn>
double TimedRegion(Fn&& fn) {
  const Clock::time_point start = Clock::now();
  {
    const runtime::ComputeRegion padded;
    fn();
  }
  runtime::SettlePadding();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Forward and backward seconds: medians over at least `repeats` timed runs after one untimed
// warm-up, and over enough runs that short points span kMinPointSeconds (a 2 ms point timed three
// times is mostly scheduling noise).
template <class Forward, class Backward>
std::pair<double, double> TimePasses(int repeats, Forward&& forward, Backward&& backward) {
  const int runs = ProbeRuns(repeats, TimedRegion(forward) + TimedRegion(backward));
  std::vector<double> forward_seconds, backward_seconds;
  for (int run = 0; run < runs; ++run) {
    forward_seconds.push_back(TimedRegion(forward));
    backward_seconds.push_back(TimedRegion(backward));
  }
  return {Median(forward_seconds), Median(backward_seconds)};
}

struct Linear {
  int64_t out = 0, in = 0;  // nn.Linear weight [out, in]
};

std::vector<Linear> LayerLinears(const ModelSpec& model) {
  const int64_t hidden = model.hidden, q_width = int64_t{model.heads} * model.head_dim;
  const int64_t kv_width = int64_t{model.kv_heads} * model.head_dim, ffn = model.ffn_hidden;
  std::vector<Linear> linears = {{q_width, hidden}, {kv_width, hidden}, {kv_width, hidden},
                                 {hidden, q_width}, {ffn, hidden},      {hidden, ffn}};
  if (model.gated_mlp) linears.push_back({ffn, hidden});
  return linears;
}

RatePoint Weighted(int64_t tokens, double forward_flops, PassWeights weights,
                   std::pair<double, double> seconds) {
  RatePoint point;
  point.tokens = tokens;
  point.flops = forward_flops * (1 + weights.backward_factor + weights.recompute_passes);
  point.seconds = seconds.first * (1 + weights.recompute_passes) + seconds.second;
  return point;
}

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

int ProbeRuns(int repeats, double warm_up_seconds) {
  return std::clamp(static_cast<int>(std::ceil(kMinPointSeconds / warm_up_seconds)), repeats,
                    std::max(repeats, kMaxRepeats));
}

std::vector<int64_t> ProbeSizes(int64_t even_shard, int64_t seq_len) {
  std::vector<int64_t> sizes;
  for (int fraction : kProbeFractions) {
    const int64_t tokens = std::max(kMinProbeTokens, even_shard / fraction);
    if (sizes.empty() || sizes.back() != tokens) sizes.push_back(tokens);
  }
  sizes.back() = even_shard;
  for (int64_t tokens = even_shard * kProbeGrowth; sizes.back() < seq_len; tokens *= kProbeGrowth) {
    sizes.push_back(std::min(tokens, seq_len));
  }
  return sizes;
}

int ProbeQueryHeads(const ModelSpec& model, int64_t even_shard, int64_t tokens) {
  if (tokens <= even_shard) return model.heads;
  return static_cast<int>(std::max<int64_t>(1, model.heads * even_shard / tokens));
}

PassWeights LinearWeights(const ModelSpec& model, Recompute recompute) {
  const CostConstants constants;
  const double passes = recompute == Recompute::kFull ? 1.0
                        : recompute == Recompute::kSelective
                            ? model.MlpParams() / model.LayerGemmParams()
                            : 0.0;
  return {constants.linear_backward_factor, passes};
}

PassWeights AttentionWeights(Recompute recompute) {
  const CostConstants constants;
  return {constants.attention_backward_factor, recompute == Recompute::kFull ? 1.0 : 0.0};
}

RatePoint TimeLayerGemms(const ModelSpec& model, Recompute recompute, int64_t tokens, int repeats) {
  const std::vector<Linear> linears = LayerLinears(model);
  int64_t widest = 0, largest_weight = 0;
  double shape_flops = 0;
  for (const Linear& linear : linears) {
    widest = std::max({widest, linear.in, linear.out});
    largest_weight = std::max(largest_weight, linear.in * linear.out);
    shape_flops += 2.0 * tokens * linear.in * linear.out;
  }
  const double forward_flops = 2.0 * model.LayerGemmParams() * tokens;
  HEXISEQ_CHECK(std::abs(shape_flops - forward_flops) <= 1e-9 * forward_flops,
                "the probe's GEMM shapes are the cost model's LayerGemmParams");
  std::vector<float> x(tokens * widest), y(tokens * widest), dy(tokens * widest);
  std::vector<float> weight(largest_weight), d_weight(largest_weight);
  Fill(x, 1);
  Fill(dy, 2);
  Fill(weight, 3);
  const int rows = static_cast<int>(tokens);
  auto forward = [&] {
    for (const Linear& l : linears) {  // Y = X W^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, l.out, l.in, 1.0f, x.data(), l.in,
                  weight.data(), l.in, 0.0f, y.data(), l.out);
    }
  };
  auto backward = [&] {
    for (const Linear& l : linears) {  // dX = dY W, dW = dY^T X
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, l.in, l.out, 1.0f, dy.data(),
                  l.out, weight.data(), l.in, 0.0f, y.data(), l.in);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l.out, l.in, rows, 1.0f, dy.data(),
                  l.out, x.data(), l.in, 0.0f, d_weight.data(), l.in);
    }
  };
  return Weighted(tokens, forward_flops, LinearWeights(model, recompute),
                  TimePasses(repeats, forward, backward));
}

RatePoint TimeAttentionBlocks(const ModelSpec& model, Recompute recompute, int64_t tokens,
                              int query_heads, int repeats) {
  HEXISEQ_CHECK(query_heads >= 1 && query_heads <= model.heads, "1 <= query_heads <= heads");
  const int heads = query_heads, head_dim = model.head_dim;
  const int kv_heads = (heads + model.heads_per_kv() - 1) / model.heads_per_kv();
  const int64_t query_floats = tokens * head_dim;
  std::vector<int64_t> query_positions(tokens), key_positions[2];
  for (int64_t row = 0; row < tokens; ++row) query_positions[row] = tokens + row;
  for (int block = 0; block < 2; ++block) {  // 0: the diagonal (causal) block, 1: a full block
    key_positions[block].resize(tokens);
    for (int64_t row = 0; row < tokens; ++row)
      key_positions[block][row] = (1 - block) * tokens + row;
  }
  std::vector<float> q(heads * query_floats), o(q.size()), d_o(q.size()), dq(q.size());
  std::vector<float> lse(heads * tokens), kv(2 * kv_heads * query_floats), dkv(kv.size());
  Fill(q, 4);
  Fill(kv, 5);
  Fill(d_o, 6);
  runtime::AttentionInputs inputs[2];
  runtime::ForwardOutputs outputs;
  runtime::BackwardArgs args;
  for (int block = 0; block < 2; ++block) {
    inputs[block].head_dim = head_dim;
    inputs[block].scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    inputs[block].q_positions = query_positions;
    inputs[block].k_positions = key_positions[block];
    for (int kv_head = 0; kv_head < kv_heads; ++kv_head) {
      inputs[block].k.push_back(kv.data() + kv_head * query_floats);
      inputs[block].v.push_back(kv.data() + (kv_heads + kv_head) * query_floats);
    }
  }
  for (int head = 0; head < heads; ++head) {
    for (runtime::AttentionInputs& in : inputs) {
      in.q.push_back(q.data() + head * query_floats);
      in.kv_index.push_back(head / model.heads_per_kv());
    }
    outputs.o.push_back(o.data() + head * query_floats);
    outputs.lse.push_back(lse.data() + head * tokens);
    args.o.push_back(o.data() + head * query_floats);
    args.d_o.push_back(d_o.data() + head * query_floats);
    args.lse.push_back(lse.data() + head * tokens);
    args.dq.push_back(dq.data() + head * query_floats);
  }
  for (int kv_head = 0; kv_head < kv_heads; ++kv_head) {
    args.dk.push_back(dkv.data() + kv_head * query_floats);
    args.dv.push_back(dkv.data() + (kv_heads + kv_head) * query_floats);
  }
  auto forward = [&] {
    std::fill(o.begin(), o.end(), 0.0f);
    std::fill(lse.begin(), lse.end(), kNegInf);
    for (const runtime::AttentionInputs& in : inputs) runtime::AttentionForward(in, outputs, true);
  };
  auto backward = [&] {
    for (const runtime::AttentionInputs& in : inputs) runtime::AttentionBackward(in, args);
  };
  const double forward_flops =
      runtime::AttentionForwardFlops(inputs[0]) + runtime::AttentionForwardFlops(inputs[1]);
  return Weighted(tokens, forward_flops, AttentionWeights(recompute),
                  TimePasses(repeats, forward, backward));
}

OptimizerPoint TimeAdamWLoop(const ModelSpec& model, int repeats) {
  constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f, kLearningRate = 1e-3f;
  const int64_t count =
      std::min<int64_t>(kMaxLoopParams, static_cast<int64_t>(model.TotalParams()));
  std::vector<float> weight(count), grad(count), exp_avg(count, 0.0f), exp_avg_sq(count, 0.0f);
  Fill(weight, 7);
  Fill(grad, 8);
  auto step = [&] {
    for (int64_t index = 0; index < count; ++index) {
      const float g = grad[index];
      exp_avg[index] = kBeta1 * exp_avg[index] + (1 - kBeta1) * g;
      exp_avg_sq[index] = kBeta2 * exp_avg_sq[index] + (1 - kBeta2) * g * g;
      weight[index] -= kLearningRate * exp_avg[index] / (std::sqrt(exp_avg_sq[index]) + kEps);
    }
  };
  const int runs = ProbeRuns(repeats, TimedRegion(step));
  std::vector<double> seconds;
  for (int run = 0; run < runs; ++run) seconds.push_back(TimedRegion(step));
  return {static_cast<double>(count), Median(seconds)};
}

double OptimizerBytesPerSecond(const OptimizerPoint& point) {
  return CostConstants{}.optimizer_step_bytes_per_param * point.params / point.seconds;
}

}  // namespace hexiseq::calibrate::internal
