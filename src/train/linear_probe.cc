// The trainer's linear-phase probe (linear_probe.h).
#include "train/linear_probe.h"

#include <memory>
#include <numeric>
#include <vector>

#include "calibrate/calibrate_internal.h"
#include "cost/cost_model.h"
#include "runtime/comm.h"
#include "runtime/dist_attention.h"
#include "runtime/slowdown.h"
#include "train/clock.h"
#include "train/llama.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace hexiseq::train {
namespace {

constexpr uint64_t kProbeSeed = 1;  // weights and tokens: any values time the same
// The optimizer probe's gradients: small enough that clipping at the default norm scales nothing,
// as in steady training.
constexpr double kProbeGradient = 1e-5;

// One rank holding all `tokens` positions and every head.
Plan OneRankPlan(const ModelSpec& model, int64_t tokens) {
  Plan plan;
  plan.strategy = "calibrate";
  plan.model = model.name;
  plan.seq_len = tokens;
  plan.num_heads = model.heads;
  plan.num_kv_heads = model.kv_heads;
  plan.num_ranks = 1;
  PlanMember member;
  member.tokens = {{0, tokens}};
  member.heads.resize(model.heads);
  std::iota(member.heads.begin(), member.heads.end(), 0);
  plan.groups.push_back(PlanGroup{{0}, {{0, tokens}}, {member}, 0});
  return plan;
}

// The model, its weights and one rank's attention layers over an in-process world of one rank.
class Probe {
 public:
  Probe(const ModelSpec& model, Recompute recompute, int64_t tokens)
      : self_(world_.WorldComm(0)), weights_(InitWeights(model, kProbeSeed, at::kFloat)) {
    const Plan plan = OneRankPlan(model, tokens);
    for (int layer = 0; layer < model.layers; ++layer) {
      auto attention = runtime::DistributedAttention::Create(plan, *self_, model.head_dim);
      HEXISEQ_CHECK(attention.has_value(), "the probe's one-rank plan is valid");
      attention_.push_back(AttentionLayer{std::move(*attention), {}});
    }
    // The trainer recomputes whole layers or nothing (a selective plan runs with full recompute).
    model_ = std::make_unique<LlamaShardModel>(
        model, weights_, attention_,
        recompute == Recompute::kNone ? RecomputePolicy::kNone : RecomputePolicy::kFull);
    batch_.positions = at::arange(tokens, at::TensorOptions().dtype(at::kLong));
    batch_.tokens = batch_.positions.remainder(model.vocab);
    batch_.targets = (batch_.positions + 1).remainder(model.vocab);
  }

  // Seconds of the linear work of one forward (or of the backward after it), as train counts it.
  double Forward() {
    return LinearSeconds([this] { loss_ = model_->TokenLosses(batch_).sum(); });
  }
  double Backward() {
    return LinearSeconds([this] {
      loss_.backward();
      for (const NamedTensorRef& named : NamedParameters(weights_))
        named.tensor.mutable_grad() = at::Tensor();  // as the trainer's step resets them
    });
  }

 private:
  template <class Pass>
  double LinearSeconds(Pass&& pass) {
    for (AttentionLayer& layer : attention_) layer.times = {};
    const double start = Now();
    runtime::MarkComputeStart();
    pass();
    runtime::PadComputeSinceMark();
    runtime::SettlePadding();
    double attention = 0;
    for (const AttentionLayer& layer : attention_) attention += layer.times.total;
    return Now() - start - attention;
  }

  runtime::InProcessWorld world_{1};
  std::unique_ptr<runtime::Comm> self_;
  LlamaWeights weights_;
  std::vector<AttentionLayer> attention_;
  std::unique_ptr<LlamaShardModel> model_;
  ShardBatch batch_;
  at::Tensor loss_;
};

}  // namespace

calibrate::RatePoint TimeTrainerLinearPhase(const ModelSpec& model, Recompute recompute,
                                            int64_t tokens, int repeats) {
  SetComputeThreads(1);  // one core per rank, as train and calibrate's other probes run
  Probe probe(model, recompute, tokens);
  const double warm_up = probe.Forward() + probe.Backward();
  const int runs = calibrate::internal::ProbeRuns(repeats, warm_up);
  std::vector<double> forward, backward;
  for (int run = 0; run < runs; ++run) {
    forward.push_back(probe.Forward());
    backward.push_back(probe.Backward());  // with full recompute: the layers' second forward too
  }
  calibrate::RatePoint point;
  point.tokens = tokens;
  point.flops = LinearPhaseFlops(model, recompute, tokens);
  point.seconds = calibrate::internal::Median(forward) + calibrate::internal::Median(backward);
  return point;
}

calibrate::OptimizerPoint TimeTrainerOptimizerStep(const ModelSpec& model, int repeats) {
  SetComputeThreads(1);
  LlamaWeights weights = InitWeights(model, kProbeSeed, at::kFloat);
  std::vector<at::Tensor> params;
  calibrate::OptimizerPoint point;
  for (const NamedTensorRef& named : NamedParameters(weights)) {
    named.tensor.mutable_grad() = at::full_like(named.tensor, kProbeGradient);
    params.push_back(named.tensor);
    point.params += static_cast<double>(named.tensor.numel());
  }
  const OptimizerConfig config;
  Optimizer optimizer(config, params);
  auto step = [&] {  // as Trainer::Step ends
    const double start = Now();
    ClipGradNorm(params, config.grad_clip);
    {
      const runtime::ComputeRegion padded;
      optimizer.Step(config.lr);
    }
    runtime::SettlePadding();
    return Now() - start;
  };
  const int runs = calibrate::internal::ProbeRuns(repeats, step());
  std::vector<double> seconds;
  for (int run = 0; run < runs; ++run) seconds.push_back(step());
  point.seconds = calibrate::internal::Median(seconds);
  return point;
}

}  // namespace hexiseq::train
