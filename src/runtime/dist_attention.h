// Distributed causal GQA attention executing a Plan (forward and backward), exact up to fp32
// rounding for any valid plan. Data flow (DESIGN.md, "Data flow of one transformer layer"):
//   token layout -> ragged all-to-all inside each group (split tables from the plan)
//   -> sub-ring KV exchange across groups, one ring per KV-head segment, blocks forwarded on
//      arrival and computed as they arrive, causally useless blocks never sent
//   -> reverse all-to-all back to token layout.
// Backward: dO goes to head layout, K/V circulate again, each group's dK/dV partials for a
// foreign block are summed at its primary and returned in one message to the block's owner, then
// dQ, dK, dV go back to token layout (dK/dV summed over members that share a KV head).
// Deliberately ignored: linear layers, RoPE, dropout; K/V of foreign blocks are not kept between
// forward and backward (they travel again), trading traffic for memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "plan/plan.h"
#include "runtime/attention_layout.h"
#include "runtime/comm.h"
#include "spec/error.h"

namespace hexiseq::runtime {

// Every rank hashes its plan (PlanHash) and all-gathers the hashes with its head_dim; on a
// mismatch every rank returns the same error naming which ranks loaded which plan. Then checks
// that the plan has as many ranks as the communicator. Collective; never hangs on a mismatch.
Result<void> CheckPlanAgreement(Comm& comm, const Plan& plan, int head_dim = 0);

// Seconds spent per phase by this rank in the last Forward or Backward.
struct PhaseTimes {
  double alltoall = 0;         // packing + all-to-all + unpacking, both directions
  double compute = 0;          // attention kernels
  double ring_wait = 0;        // blocked waiting for ring / dKV messages
  double total = 0;            // the whole call
  double ring_bytes_sent = 0;  // bytes this rank sent point-to-point (ring, forwards, dKV)
};

// Token-layout outputs on one rank; rows are the rank's tokens tau_r in plan order.
struct AttentionOutputs {
  std::vector<float> o;    // [s_r][H][head_dim]
  std::vector<float> lse;  // [s_r][H]
};
struct AttentionGradients {
  std::vector<float> dq;  // [s_r][H][head_dim]
  std::vector<float> dk;  // [s_r][G][head_dim]
  std::vector<float> dv;  // [s_r][G][head_dim]
};

class DistributedAttention {
 public:
  // Collective over `world`: checks plan agreement, derives the layout and splits the group
  // communicators. `world` must outlive the object. REQUIRES: head_dim >= 1.
  static Result<std::unique_ptr<DistributedAttention>> Create(const Plan& plan, Comm& world,
                                                              int head_dim);
  ~DistributedAttention();

  // Collective. q: [s_r][H][d], k and v: [s_r][G][d] in token layout. Keeps what backward needs.
  Result<AttentionOutputs> Forward(std::span<const float> q, std::span<const float> k,
                                   std::span<const float> v);
  // Collective. d_o: [s_r][H][d]. REQUIRES: a Forward before it.
  Result<AttentionGradients> Backward(std::span<const float> d_o);

  const AttentionLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  int64_t num_tokens() const { return layout_.roles[rank_].num_tokens; }
  const PhaseTimes& forward_times() const { return forward_times_; }
  const PhaseTimes& backward_times() const { return backward_times_; }

  struct State;        // head-layout tensors kept between forward and backward
  struct TokenTensor;  // a token-layout tensor one pass reads or writes (internal)

 private:
  DistributedAttention(AttentionLayout layout, Comm& world, int head_dim);
  // The one pass driver: all-to-all in (token -> head layout), the sub-rings, all-to-all out,
  // each as the layer schedule says for `direction`.
  void RunPass(Direction direction, const std::vector<TokenTensor>& inbound,
               const std::vector<TokenTensor>& outbound, PhaseTimes& times);
  void AllocateHeadLayout(Direction direction);
  void ComputeBlock(Direction direction, int local_segment, int origin, const float* kv_block,
                    float* dkv_block, PhaseTimes& times);

  AttentionLayout layout_;
  Comm& world_;
  int head_dim_;
  int rank_;
  std::unique_ptr<Comm> group_comm_;
  std::unique_ptr<Comm> ring_comm_;
  std::unique_ptr<State> state_;
  PhaseTimes forward_times_;
  PhaseTimes backward_times_;
};

}  // namespace hexiseq::runtime
