// Llama forward on one token shard with libtorch ops (autograd does every backward except the
// attention's), and full recompute as a reentrant autograd function: forward runs the layer
// without a graph and keeps its input, backward runs it again with a graph and back-propagates
// through it (like torch.utils.checkpoint with use_reentrant=True).
#include "train/llama.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace hexiseq::train {
namespace {

constexpr double kInitStd = 0.02;  // HF LlamaConfig.initializer_range

using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // HF LlamaRMSNorm: computed in fp32, cast back, then scaled by the weight.
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x32 * at::rsqrt(variance + eps)).to(x.scalar_type());
}

at::Tensor RotateHalf(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos + RotateHalf(x) * sin;
}

at::Tensor Normal(at::Generator& generator, std::vector<int64_t> shape, at::ScalarType dtype) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  t.normal_(0.0, kInitStd, generator);
  return t.to(dtype).set_requires_grad(true);
}

at::Tensor Ones(int64_t size, at::ScalarType dtype) {
  return at::ones({size}, at::TensorOptions().dtype(dtype)).set_requires_grad(true);
}

// Full recompute of one layer: see the file comment.
class RecomputedLayer : public torch::autograd::Function<RecomputedLayer> {
 public:
  static Variable forward(AutogradContext* ctx, const Variable& x, LlamaShardModel* model,
                          int64_t layer, const at::Tensor& cos, const at::Tensor& sin) {
    ctx->saved_data["model"] = reinterpret_cast<int64_t>(model);
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->save_for_backward({x});
    return model->Layer(static_cast<int>(layer), x, cos, sin);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* model = reinterpret_cast<LlamaShardModel*>(ctx->saved_data["model"].toInt());
    const int layer = static_cast<int>(ctx->saved_data["layer"].toInt());
    const at::Tensor x = ctx->get_saved_variables()[0].detach().set_requires_grad(true);
    at::Tensor y;
    {
      at::AutoGradMode enable_grad(true);
      y = model->Layer(layer, x, ctx->saved_data["cos"].toTensor(),
                       ctx->saved_data["sin"].toTensor());
    }
    torch::autograd::backward({y}, {grad_outputs[0]});
    return {x.grad(), Variable(), Variable(), Variable(), Variable()};
  }
};

}  // namespace

std::vector<NamedTensorRef> NamedParameters(const LlamaWeights& weights) {
  std::vector<NamedTensorRef> named;
  named.push_back({"model.embed_tokens.weight", weights.embed, -1});
  const int layers = static_cast<int>(weights.layers.size());
  for (int layer = 0; layer < layers; ++layer) {
    const LayerWeights& w = weights.layers[layer];
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    named.push_back({prefix + "self_attn.q_proj.weight", w.q_proj, layer});
    named.push_back({prefix + "self_attn.k_proj.weight", w.k_proj, layer});
    named.push_back({prefix + "self_attn.v_proj.weight", w.v_proj, layer});
    named.push_back({prefix + "self_attn.o_proj.weight", w.o_proj, layer});
    if (w.gate_proj.defined())
      named.push_back({prefix + "mlp.gate_proj.weight", w.gate_proj, layer});
    named.push_back({prefix + "mlp.up_proj.weight", w.up_proj, layer});
    named.push_back({prefix + "mlp.down_proj.weight", w.down_proj, layer});
    named.push_back({prefix + "input_layernorm.weight", w.input_norm, layer});
    named.push_back({prefix + "post_attention_layernorm.weight", w.post_norm, layer});
  }
  named.push_back({"model.norm.weight", weights.final_norm, layers});
  if (weights.lm_head.defined()) named.push_back({"lm_head.weight", weights.lm_head, layers});
  return named;
}

LlamaWeights InitWeights(const ModelSpec& spec, uint64_t seed, at::ScalarType dtype) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t hidden = spec.hidden, q_width = int64_t{spec.heads} * spec.head_dim;
  const int64_t kv_width = int64_t{spec.kv_heads} * spec.head_dim, ffn = spec.ffn_hidden;
  LlamaWeights weights;
  weights.embed = Normal(generator, {spec.vocab, hidden}, dtype);
  for (int layer = 0; layer < spec.layers; ++layer) {
    LayerWeights w;
    w.q_proj = Normal(generator, {q_width, hidden}, dtype);
    w.k_proj = Normal(generator, {kv_width, hidden}, dtype);
    w.v_proj = Normal(generator, {kv_width, hidden}, dtype);
    w.o_proj = Normal(generator, {hidden, q_width}, dtype);
    if (spec.gated_mlp) w.gate_proj = Normal(generator, {ffn, hidden}, dtype);
    w.up_proj = Normal(generator, {ffn, hidden}, dtype);
    w.down_proj = Normal(generator, {hidden, ffn}, dtype);
    w.input_norm = Ones(hidden, dtype);
    w.post_norm = Ones(hidden, dtype);
    weights.layers.push_back(std::move(w));
  }
  weights.final_norm = Ones(hidden, dtype);
  if (!spec.tied_embeddings) weights.lm_head = Normal(generator, {spec.vocab, hidden}, dtype);
  return weights;
}

std::pair<at::Tensor, at::Tensor> RopeTables(const at::Tensor& positions, int head_dim,
                                             double theta, at::ScalarType dtype) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor exponents = at::arange(0, head_dim, 2, f32) / static_cast<double>(head_dim);
  const at::Tensor inv_freq = 1.0 / at::pow(at::scalar_tensor(theta, f32), exponents);
  const at::Tensor freqs = at::outer(positions.to(at::kFloat), inv_freq);  // [s, d/2]
  const at::Tensor angles = at::cat({freqs, freqs}, -1).unsqueeze(1);      // [s, 1, d]
  return {angles.cos().to(dtype), angles.sin().to(dtype)};
}

LlamaShardModel::LlamaShardModel(const ModelSpec& spec, LlamaWeights& weights,
                                 std::vector<AttentionLayer>& attention, RecomputePolicy recompute)
    : spec_(spec), weights_(weights), attention_(attention), recompute_(recompute) {}

at::Tensor LlamaShardModel::Attention(int layer, const at::Tensor& h, const at::Tensor& cos,
                                      const at::Tensor& sin) {
  const LayerWeights& w = weights_.layers[layer];
  const int64_t tokens = h.size(0);
  const at::Tensor q = at::linear(h, w.q_proj).view({tokens, spec_.heads, spec_.head_dim});
  const at::Tensor k = at::linear(h, w.k_proj).view({tokens, spec_.kv_heads, spec_.head_dim});
  const at::Tensor v = at::linear(h, w.v_proj).view({tokens, spec_.kv_heads, spec_.head_dim});
  const at::Tensor o =
      DistributedAttentionOp(attention_[layer], ApplyRope(q, cos, sin), ApplyRope(k, cos, sin), v);
  return at::linear(o.reshape({tokens, int64_t{spec_.heads} * spec_.head_dim}), w.o_proj);
}

at::Tensor LlamaShardModel::Mlp(int layer, const at::Tensor& h) {
  const LayerWeights& w = weights_.layers[layer];
  if (w.gate_proj.defined()) {
    return at::linear(at::silu(at::linear(h, w.gate_proj)) * at::linear(h, w.up_proj), w.down_proj);
  }
  return at::linear(at::gelu(at::linear(h, w.up_proj)), w.down_proj);  // exact erf GELU
}

at::Tensor LlamaShardModel::Layer(int layer, const at::Tensor& x, const at::Tensor& cos,
                                  const at::Tensor& sin) {
  const LayerWeights& w = weights_.layers[layer];
  const at::Tensor after_attention =
      x + Attention(layer, RmsNorm(x, w.input_norm, spec_.norm_eps), cos, sin);
  return after_attention + Mlp(layer, RmsNorm(after_attention, w.post_norm, spec_.norm_eps));
}

at::Tensor LlamaShardModel::TokenLosses(const ShardBatch& batch) {
  const at::ScalarType dtype = weights_.embed.scalar_type();
  auto [cos, sin] = RopeTables(batch.positions, spec_.head_dim, spec_.rope_theta, dtype);
  const auto before = [&](int stage) {
    if (before_stage_) before_stage_(stage);
  };
  before(-1);
  at::Tensor x = at::embedding(weights_.embed, batch.tokens);
  for (int layer = 0; layer < spec_.layers; ++layer) {
    before(layer);
    x = recompute_ == RecomputePolicy::kFull ? RecomputedLayer::apply(x, this, layer, cos, sin)
                                             : Layer(layer, x, cos, sin);
    // A hook on the layer's output runs before the backward of the node that made it.
    if (before_backward_stage_ && x.requires_grad())
      x.register_hook([this, layer](const at::Tensor&) { before_backward_stage_(layer); });
  }
  before(spec_.layers);
  x = RmsNorm(x, weights_.final_norm, spec_.norm_eps);
  const at::Tensor& head = weights_.lm_head.defined() ? weights_.lm_head : weights_.embed;
  const at::Tensor logits = at::linear(x, head).to(at::kFloat);
  return at::cross_entropy_loss(logits, batch.targets, {}, at::Reduction::None);
}

}  // namespace hexiseq::train
