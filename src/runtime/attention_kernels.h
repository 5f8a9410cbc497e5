// CPU attention kernels: causal, GQA-aware attention forward (O and log-sum-exp) and backward
// (dQ, dK, dV from O, dO and LSE) between one set of query rows and one block of key rows. Rows
// carry global token positions; key k is visible to query q iff pos(k) <= pos(q). Blocked with
// online softmax in fp32, OpenBLAS sgemm for the block GEMMs, fully masked tiles skipped; a tile
// ends where the rows' positions jump (a rank's token pieces), so pieces are not computed against
// keys only a later piece sees. Each optimized kernel has a naive double-precision reference with
// the same signature.
// Deliberately ignored: dropout, sliding windows, attention sinks, bf16 storage.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hexiseq::runtime {

// One attention problem: every query head attends to one KV head of the block.
// Matrices are row-major [rows x head_dim] with leading dimension head_dim.
struct AttentionInputs {
  int head_dim = 0;
  float scale = 0;                       // softmax scale, usually 1 / sqrt(head_dim)
  std::span<const int64_t> q_positions;  // global position of each query row (num_q)
  std::span<const int64_t> k_positions;  // global position of each key row (num_k)
  std::vector<const float*> q;           // per query head: [num_q x head_dim]
  std::vector<int> kv_index;             // per query head: index into k and v
  std::vector<const float*> k;           // per KV head: [num_k x head_dim]
  std::vector<const float*> v;           // per KV head: [num_k x head_dim]

  int64_t num_q() const { return static_cast<int64_t>(q_positions.size()); }
  int64_t num_k() const { return static_cast<int64_t>(k_positions.size()); }
};

// Forward outputs per query head: o [num_q x head_dim], lse [num_q] (natural log; -inf for a
// row that sees no key, whose o row is 0).
struct ForwardOutputs {
  std::vector<float*> o;
  std::vector<float*> lse;
};

// Computes attention of the queries over this key block. With accumulate = false, o and lse are
// overwritten. With accumulate = true, (o, lse) on entry hold a previous partial result over
// other keys and are merged with this block exactly (fp32 online softmax; -inf safe), so calling
// it once per key block in any order gives attention over the union of the blocks.
void AttentionForward(const AttentionInputs& in, const ForwardOutputs& out, bool accumulate);
void AttentionForwardReference(const AttentionInputs& in, const ForwardOutputs& out,
                               bool accumulate);

// Backward inputs and outputs. o, d_o and lse are the FINAL forward results over all keys (so the
// gradient contributions of separate key blocks add up exactly). Gradients are ADDED to dq (per
// query head), dk and dv (per KV head; query heads that share a KV head add to the same buffer).
struct BackwardArgs {
  std::vector<const float*> o;    // per query head [num_q x head_dim]
  std::vector<const float*> d_o;  // per query head [num_q x head_dim]
  std::vector<const float*> lse;  // per query head [num_q]
  std::vector<float*> dq;         // per query head [num_q x head_dim], accumulated
  std::vector<float*> dk;         // per KV head [num_k x head_dim], accumulated
  std::vector<float*> dv;         // per KV head [num_k x head_dim], accumulated
};

void AttentionBackward(const AttentionInputs& in, const BackwardArgs& args);
void AttentionBackwardReference(const AttentionInputs& in, const BackwardArgs& args);

// FLOPs of a causal forward over these rows, counted like the cost model: 4 * d * heads * pairs;
// backward is 2.5x that.
double AttentionForwardFlops(const AttentionInputs& in);

// Makes every BLAS call from this process single-threaded (the runtime parallelizes over ranks).
void SetBlasThreads(int threads);

}  // namespace hexiseq::runtime
