// The project's distributed attention (runtime::DistributedAttention) as a libtorch autograd
// operation: forward runs the plan's all-to-alls and sub-ring exchange, backward returns dQ, dK,
// dV in token layout. Tensors are in token layout: rows are this rank's tokens tau_r in plan
// order, q [s_r, H, d], k and v [s_r, G, d]. Causal masking and the 1/sqrt(d) scale are applied
// inside; positions (for RoPE) are the caller's business. fp32 inside; other dtypes are cast.
#pragma once

#include <ATen/ATen.h>

#include "runtime/dist_attention.h"

namespace hexiseq::train {

// Seconds summed over every forward and backward call made through one AttentionLayer.
struct AttentionTimes {
  double alltoall = 0;
  double compute = 0;
  double ring_wait = 0;
  double total = 0;
  void Add(const runtime::PhaseTimes& times);
};

// One layer's distributed attention plus its accumulated phase times. The DistributedAttention
// keeps one forward state for its backward, so use one AttentionLayer per transformer layer.
struct AttentionLayer {
  std::unique_ptr<runtime::DistributedAttention> attention;
  AttentionTimes times;
};

// Returns o [s_r, H, d] (dtype of q); differentiable in q, k, v.
// Collective: every rank of the plan calls it (and, through backward, the attention's Backward)
// for the same layers in the same order; a rank with no tokens passes empty tensors.
// REQUIRES: shapes as above with s_r = layer.attention->num_tokens(); `layer` outlives the graph.
// A runtime failure (a bug, not user input) throws c10::Error.
at::Tensor DistributedAttentionOp(AttentionLayer& layer, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v);

}  // namespace hexiseq::train
