// The Llama model exactly as Hugging Face `LlamaForCausalLM` computes it, run on one rank's token
// shard: embedding; per layer RMSNorm -> q/k/v projections (no biases) -> RoPE (rotate_half) at
// global positions -> causal GQA attention (the distributed attention) -> o projection ->
// residual -> RMSNorm -> SwiGLU MLP down(silu(gate(x)) * up(x)) -> residual; final RMSNorm; LM
// head (tied to the embedding when the model says so). gated_mlp: false uses down(gelu(up(x)))
// with the exact (erf) GELU. Weights are replicated on every rank; dropout is not modelled.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spec/model.h"
#include "train/attention_function.h"

namespace hexiseq::train {

struct LayerWeights {
  at::Tensor input_norm, q_proj, k_proj, v_proj, o_proj;  // [out, in] like nn.Linear
  at::Tensor post_norm, gate_proj, up_proj, down_proj;    // gate_proj undefined without gating
};

struct LlamaWeights {
  at::Tensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  at::Tensor final_norm;  // [hidden]
  at::Tensor lm_head;     // [vocab, hidden]; undefined when tied to embed
};

struct NamedTensorRef {
  std::string name;   // Hugging Face name, e.g. model.layers.0.self_attn.q_proj.weight
  at::Tensor tensor;  // shares storage with the weights
  int stage = 0;      // where the forward first reads it: -1 embedding, a layer, or `layers`
};

// Every parameter under its Hugging Face name, in a fixed order (embedding, layers, norm, head).
std::vector<NamedTensorRef> NamedParameters(const LlamaWeights& weights);

// HF initialisation (normal(0, 0.02) for matrices, ones for norms) from its own generator seeded
// with `seed`: the same on every rank and thread. Leaves require grad.
LlamaWeights InitWeights(const ModelSpec& spec, uint64_t seed, at::ScalarType dtype);

// One rank's inputs for one sequence, rows in the plan's token order.
struct ShardBatch {
  at::Tensor tokens;     // [s_r] int64 input tokens
  at::Tensor targets;    // [s_r] int64 next tokens
  at::Tensor positions;  // [s_r] int64 global positions (for RoPE)
};

enum class RecomputePolicy { kNone, kFull };

class LlamaShardModel {
 public:
  // `attention` holds one AttentionLayer per model layer; both must outlive the model.
  LlamaShardModel(const ModelSpec& spec, LlamaWeights& weights,
                  std::vector<AttentionLayer>& attention, RecomputePolicy recompute);

  // Per-position cross-entropy [s_r] (natural log) of predicting targets. Collective (the
  // attention of every layer). With kFull each layer keeps only its input and runs again in
  // backward.
  at::Tensor TokenLosses(const ShardBatch& batch);

  // Runs layer `layer` on hidden states x [s_r, hidden] with RoPE tables cos/sin [s_r, 1, d].
  at::Tensor Layer(int layer, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

  // Called by TokenLosses before it first reads a stage's weights: -1 the embedding, 0 to
  // layers - 1 the layers, `layers` the final norm and the LM head (the trainer waits there for
  // weights still being gathered from their owners).
  void set_before_stage(std::function<void(int stage)> before) {
    before_stage_ = std::move(before);
  }
  // Called in the backward of TokenLosses's result just before layer `layer` (0 to layers - 1)
  // runs its backward (its recompute, with full recompute): ZeRO 3 gathers the layer's weights
  // again there.
  void set_before_backward_stage(std::function<void(int layer)> before) {
    before_backward_stage_ = std::move(before);
  }

 private:
  at::Tensor Attention(int layer, const at::Tensor& h, const at::Tensor& cos,
                       const at::Tensor& sin);
  at::Tensor Mlp(int layer, const at::Tensor& h);

  const ModelSpec& spec_;
  LlamaWeights& weights_;
  std::vector<AttentionLayer>& attention_;
  RecomputePolicy recompute_;
  std::function<void(int stage)> before_stage_;
  std::function<void(int layer)> before_backward_stage_;
};

// RoPE tables for the given global positions, computed like HF (fp32 inv_freq and angles):
// returns {cos, sin}, each [s, 1, head_dim].
std::pair<at::Tensor, at::Tensor> RopeTables(const at::Tensor& positions, int head_dim,
                                             double theta, at::ScalarType dtype);

}  // namespace hexiseq::train
