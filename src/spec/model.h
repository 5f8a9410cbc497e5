// Transformer model shapes (decoder-only, GQA) and the workload around them. Presets are the
// published configurations; each cites its source. Ignores biases and norms in FLOP counts
// (they are < 0.1% of the total) but counts them in parameter memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/error.h"

namespace hexiseq {

struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;     // query heads H
  int kv_heads = 0;  // KV heads G; H % G == 0
  int head_dim = 0;  // d_h; defaults to hidden / heads
  int ffn_hidden = 0;
  int vocab = 0;
  bool gated_mlp = true;  // SwiGLU (3 matrices) vs GELU MLP (2 matrices)
  std::string source;
  bool tied_embeddings = false;  // output head shares the input embedding (counted once)
  double rope_theta = 10000.0;   // RoPE base (HF rope_theta); used by the trainer only
  double norm_eps = 1e-5;        // RMSNorm epsilon (HF rms_norm_eps); used by the trainer only

  int heads_per_kv() const { return heads / kv_heads; }
  // Parameters of one transformer layer that take part in per-token GEMMs:
  // Q, K, V, O projections + MLP.
  double LayerGemmParams() const;
  // The Q, K and V projections (hidden x (heads + 2 kv_heads) x head_dim).
  double QkvParams() const;
  // The MLP: 3 matrices of hidden x ffn_hidden for SwiGLU, 2 for GELU.
  double MlpParams() const;
  // All parameters (layers + embedding + output head + norms).
  double TotalParams() const;
  // The gradient sync's bucket: one layer's share of all parameters (TotalParams / layers). The
  // cost model, the simulator and `train` all synchronise gradients in buckets of this size.
  double GradBucketParams() const;
  bool operator==(const ModelSpec&) const = default;
};

const std::vector<ModelSpec>& ModelPresets();

// A preset name (case-insensitive) or a path to a YAML file with
// layers, hidden, heads, kv_heads, ffn_hidden, vocab [, head_dim, gated_mlp, name,
// rope_theta, norm_eps].
Result<ModelSpec> LoadModel(const std::string& name_or_path);
Result<ModelSpec> ParseModel(const std::string& text, const std::string& source_name);

// Forward FLOPs of causal attention for `query_heads` heads over `causal_pairs` (query, key)
// pairs: Q K^T and P V, 2 x 2 x head_dim per pair and head. Backward and recompute are multiples.
inline double AttentionForwardFlops(int head_dim, double query_heads, double causal_pairs) {
  constexpr double kFlopsPerPairPerDim = 4.0;
  return kFlopsPerPairPerDim * head_dim * query_heads * causal_pairs;
}

enum class Recompute { kNone, kSelective, kFull };
const char* RecomputeName(Recompute r);
Result<Recompute> ParseRecompute(const std::string& text);

// Precision of activations and gradients (Workload::bytes_per_element): "bf16" (2 bytes, as GPU
// training runs) or "fp32" (4 bytes, as the CPU trainer runs); --dtype and a plan's "dtype".
const char* DtypeName(int bytes_per_element);
Result<int> ParseDtype(const std::string& text);

struct Workload {
  int64_t seq_len = 0;  // tokens per sequence S
  int batch = 1;        // sequences per iteration (processed one after another)
  Recompute recompute = Recompute::kFull;
  int zero_stage = 3;   // 0..3
  int shard_ranks = 0;  // ranks ZeRO shards model state over; 0: the plan's participants
  // false for a replica scored alone (its plan's left-out ranks are not the whole plan's): the
  // whole plan charges the optimizer step once, over its own participants.
  bool charge_optimizer_step = true;
  double memory_reserve = 0.1;  // fraction of each device's memory kept free
  int bytes_per_element = 2;    // activations and gradients: 2 bf16, 4 fp32 (DtypeName)
  bool operator==(const Workload&) const = default;
};

// Validates ranges: seq_len >= 1, batch >= 1, zero in 0..3, reserve in [0, 1).
Result<void> ValidateWorkload(const Workload& w);

}  // namespace hexiseq
