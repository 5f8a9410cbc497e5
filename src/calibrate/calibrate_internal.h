// Internal pieces of calibrate (calibrate.h): the compute probes, the link probes and the
// cluster writer's grouping, split so that each can be tested on its own.
#pragma once

#include <cstdint>
#include <vector>

#include "calibrate/calibrate.h"
#include "runtime/comm.h"

namespace hexiseq::calibrate::internal {

double Median(std::vector<double> values);

// Timed runs of a probe point: at least `repeats`, and enough that the point spans 0.2 s given
// that one forward + backward took `warm_up_seconds` (at most 50 runs beyond `repeats`).
int ProbeRuns(int repeats, double warm_up_seconds);

// Shard sizes the compute probes time: a quarter, a half and all of the even split, each at
// least a few kernel rows, then twice, four times, ... the even split up to the whole sequence
// (`seq_len`, the last point; a group's query tokens or a subset rank's shard can be that large).
// Sorted and distinct; `even_shard` is one of them. REQUIRES: even_shard <= seq_len.
std::vector<int64_t> ProbeSizes(int64_t even_shard, int64_t seq_len);
// Query heads of the attention probe at `tokens`: every head up to the even split; above it the
// share a head-parallel group of that many tokens gives each member, heads x even_shard / tokens
// (at least 1), as Ulysses over tokens / even_shard ranks does. The work per point stays near the
// even split's.
int ProbeQueryHeads(const ModelSpec& model, int64_t even_shard, int64_t tokens);
// Index of the point at `tokens` in `curve`, or -1 when there is none.
int PointAt(const std::vector<RatePoint>& curve, int64_t tokens);
// Sets rank.gemm_rate and attention_rate to its curves' rates at `even_shard` tokens.
// REQUIRES: both curves hold a point there.
void ReadEvenSplitRates(RankMeasurement& rank, int64_t even_shard);

// How the cost model weighs a forward and a backward pass for `recompute` (CostConstants): the
// FLOPs it charges are forward x (1 + backward_factor + recompute_passes), and the trainer's time
// is forward_seconds x (1 + recompute_passes) + backward_seconds.
struct PassWeights {
  double backward_factor = 0;
  double recompute_passes = 0;
};
PassWeights LinearWeights(const ModelSpec& model, Recompute recompute);
PassWeights AttentionWeights(Recompute recompute);

// One layer's GEMMs at `tokens` rows (forward Y = X W^T; backward dX = dY W and dW = dY^T X),
// each timed call inside a --slowdown compute region.
RatePoint TimeLayerGemms(const ModelSpec& model, Recompute recompute, int64_t tokens, int repeats);
// A plain AdamW step (the trainer's formulas, no libtorch) over fp32 arrays of the model's
// parameter count, capped at kMaxLoopParams (the rate per parameter is the figure), each timed
// step inside a --slowdown compute region.
OptimizerPoint TimeAdamWLoop(const ModelSpec& model, int repeats);
// The memory bandwidth the cost model charges the optimizer step at so that it takes the
// measured time (CostConstants::optimizer_step_bytes_per_param per parameter).
double OptimizerBytesPerSecond(const OptimizerPoint& point);

// Attention of `tokens` queries of `query_heads` heads (and the KV heads they read) over their own
// causal block and one earlier full block of the same size, forward then backward, with the
// runtime's kernels. REQUIRES: 1 <= query_heads <= model.heads.
RatePoint TimeAttentionBlocks(const ModelSpec& model, Recompute recompute, int64_t tokens,
                              int query_heads, int repeats);

// Bytes of one ring K/V block at the even split: K and V of `shard` tokens, every KV head, fp32.
int64_t KvBlockBytes(const ModelSpec& model, int64_t shard);

// A pair's bandwidth from its ping-pong (bytes, half_rtt; the first size is the latency probe):
// the median over the larger sizes of bytes / (one-way time - latency), so one size disturbed by
// a preemption does not set it. Sizes no slower than the latency probe are noise and left out;
// when every size is, the largest message's bytes / one-way time (a lower bound, never zero).
// REQUIRES: at least two sizes, every time positive.
double PairBandwidth(const PairMeasurement& pair);

// Ping-pong between every pair of ranks, one pair at a time (collective): 8 bytes for the
// latency, then block / 16, block / 4 and the block itself for the bandwidth.
std::vector<PairMeasurement> MeasurePairs(runtime::Comm& world, int64_t block_bytes);
// All-to-alls (collective) of block / N bytes per peer and smaller, as a group all-to-all of the
// even split moves, with the alpha-beta prediction from `pairs`.
std::vector<AllToAllMeasurement> MeasureAllToAll(runtime::Comm& world,
                                                 const std::vector<PairMeasurement>& pairs,
                                                 int64_t block_bytes);

// The same verdict on every rank (each checks every rank's gathered figures): an error naming the
// rank (or pair), the probe, the size and the figure when one is not a finite positive rate.
Result<void> CheckMeasured(const std::vector<RankMeasurement>& ranks,
                           const std::vector<PairMeasurement>& pairs);

// Node kinds of the cluster file: runs of consecutive ranks on one host whose GEMM and attention
// rates are within `tolerance` (relative) of the run's first rank.
struct KindGroup {
  int first_rank = 0;
  int num_ranks = 0;
};
std::vector<KindGroup> GroupRanks(const std::vector<RankMeasurement>& ranks, double tolerance);

}  // namespace hexiseq::calibrate::internal
