// Distributed training of the Llama model with any plan: every rank holds its plan's token shard
// (any number of ranges, possibly none), runs embedding, norms, projections, MLP and loss on it,
// and the distributed attention across the ranks of its data-parallel replica (runtime/replicas.h).
// One step: the plan's batch of B sequences, split over the replicas (replica r takes its
// contiguous block, accumulating over its sequences); the loss is the mean cross-entropy over all
// B * S predictions (position p predicts token p + 1), summed over the participating ranks with an
// all-reduce. Each rank scales its tokens' losses by 1 / (B * S), so the weight gradients summed
// over the participants in buckets (grad_sync.h, by default started from autograd hooks during the
// last backward pass so that they overlap it) are the whole batch's: every replica weighted by its
// tokens. They are clipped by the global norm and the optimizer updates the weights (at ZeRO >= 1
// the gradients are reduce-scattered to their parameters' owners and each participant updates its
// own parameters; at ZeRO 1-2 the weights are then all-gathered behind the next forward, at ZeRO 3
// every sequence gathers them layer by layer for its forward and its backward and reduce-scatters
// its own gradients). Ranks the plan leaves out take part in the start-up checks only.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "runtime/comm.h"
#include "runtime/replicas.h"
#include "spec/error.h"
#include "spec/model.h"
#include "train/attention_function.h"
#include "train/data.h"
#include "train/grad_sync.h"
#include "train/llama.h"
#include "train/optimizer.h"

namespace hexiseq::train {

struct TrainOptions {
  std::string data = "synthetic:recall";  // a byte file or synthetic:recall
  int64_t seq_len = 0;                    // S; 0 takes the plan's
  int batch = 0;                          // sequences per step; 0 takes the plan's (must agree)
  uint64_t seed = 1;                      // weights and data
  OptimizerConfig optimizer;
  RecomputePolicy recompute = RecomputePolicy::kFull;
  at::ScalarType dtype = at::kFloat;
  // Gradient all-reduce bucket size; 0: the cost model's bucket (ModelSpec::GradBucketParams
  // parameters), so that the sync the model predicts is the one `train` runs.
  int64_t bucket_bytes = 0;
  bool overlap_grad_sync = true;  // start buckets during backward (false: all after it)
};

// Seconds this rank spent per phase in one step.
struct PhaseSeconds {
  double linear = 0;             // everything but attention and gradient sync (GEMMs, norms, loss)
  double attention_compute = 0;  // attention kernels
  double alltoall = 0;           // attention all-to-alls (with packing)
  double ring_wait = 0;          // waiting for sub-ring and dK/dV messages
  double grad_sync = 0;          // gradient all-reduce
};

struct StepReport {
  int64_t step = 0;        // 0-based index of the step just taken
  double loss = 0;         // mean CE over all predictions of the step (all ranks)
  double recall_loss = 0;  // mean CE over recall answers; NaN without recall data
  double grad_norm = 0;    // global L2 norm before clipping
  double lr = 0;           // learning rate used
  double seconds = 0;      // wall time of the step on this rank
  double tokens_per_second = 0;
  PhaseSeconds phases;
};

// Loss of a batch with gradients accumulated and all-reduced in every parameter's .grad().
struct LossReport {
  double loss = 0;
  double recall_loss = 0;  // NaN when no recall targets
  PhaseSeconds phases;
  double seconds = 0;
};

class Trainer {
 public:
  // Collective over `world`. Checks that every rank loaded the same plan with as many ranks as
  // processes, that the plan's heads, KV heads, sequence length and batch match the model, --seq
  // and --batch, and opens the data; every rank returns the same error when one fails. Then splits
  // the world into the participants and the replicas (collective, left-out ranks too). On a rank
  // the plan leaves out it returns nullptr: that rank takes part in nothing more. Otherwise it
  // initialises the weights from the seed and creates one distributed attention per layer over
  // the rank's replica. `world` must outlive it.
  static Result<std::unique_ptr<Trainer>> Create(const Plan& plan, const ModelSpec& model,
                                                 const TrainOptions& options, runtime::Comm& world);

  // Collective: one optimizer step on the next `batch` sequences. A non-finite loss returns an
  // error naming the step and leaves weights and optimizer state untouched.
  Result<StepReport> Step();

  // Collective over the participants: loss and all-reduced gradients (in .grad()) of the batch
  // `sequences` (every rank passes the same), no update. This rank's replica takes its block of
  // them (ReplicaSequenceBlock); with several replicas `sequences` must be the plan's batch.
  Result<LossReport> ComputeGradients(std::span<const Sequence> sequences);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // The weights, all current: waits for the all-gather a sharded step leaves to the next forward.
  // At ZeRO 3 the weights other participants own are current only after GatherWeights (between
  // steps they hold NaN).
  LlamaWeights& weights();
  // Collective over the participants: at ZeRO 3 gathers every parameter from its owner (current
  // until the next forward releases them); otherwise the same as weights().
  void GatherWeights();
  Optimizer& optimizer() { return *optimizer_; }
  const DataSource& data() const { return *data_; }
  const ModelSpec& model() const { return model_; }
  const TrainOptions& options() const { return options_; }
  int64_t local_tokens() const { return static_cast<int64_t>(positions_.size()); }
  runtime::Comm& world() { return world_; }
  // The ranks in some replica (gradient sync, loss, checkpoints); this rank's replica.
  runtime::Comm& participants() { return *comms_.participants; }
  int replica() const { return comms_.replica; }
  int num_replicas() const { return NumReplicas(plan_); }
  const GradientSync& grad_sync() const { return *grad_sync_; }
  // Whether the plan shards the optimizer state (ZeRO stage >= 1, more than one participant):
  // a step reduce-scatters the gradients to their parameters' owners (OptimizerShardOwners), each
  // participant clips (the global norm from every owner's squares), keeps the moments of and
  // updates its parameters, then starts the all-gather of the weights, which the next forward
  // waits for layer by layer (GradientSync::StartWeightGather).
  bool optimizer_sharded() const { return !optimizer_owners_.empty(); }
  // ZeRO 2-3 with more than one participant: every sequence's gradients are reduce-scattered to
  // the owners after its backward, each owner accumulating them, so a rank keeps only its own
  // parameters' gradients between sequences (the memory a GPU run frees; libtorch here holds
  // every gradient during a backward). ZeRO 1 accumulates whole gradients and reduce-scatters once.
  bool grads_sharded() const { return grads_sharded_; }
  // ZeRO 3 with more than one participant: each parameter is current on its owner only. Every
  // sequence all-gathers the weights for its forward and again for its backward (each layer
  // waits for its buckets just before it runs), releases the others' weights after each layer's
  // forward and after the backward (they are overwritten with NaN, the memory a GPU run frees,
  // so a read before the next gather shows as a non-finite loss), and reduce-scatters its
  // gradients to the owners: the three passes per sequence the cost model charges.
  bool weights_sharded() const { return weights_sharded_; }
  // The AdamW moments of every parameter (empty for SGD): sharded, gathered from their owners
  // (collective over the participants); otherwise the optimizer's own tensors.
  void GatherOptimizerState(std::vector<at::Tensor>& exp_avg, std::vector<at::Tensor>& exp_avg_sq);
  // Tensors to read every parameter's moments into before Optimizer::SetMoments: sharded, fresh
  // ones; otherwise the optimizer's own tensors.
  void OptimizerStateBuffers(std::vector<at::Tensor>& exp_avg, std::vector<at::Tensor>& exp_avg_sq);
  uint64_t plan_hash() const { return plan_hash_; }

 private:
  Trainer(const ModelSpec& model, const TrainOptions& options, runtime::Comm& world);
  ShardBatch MakeShard(const Sequence& sequence) const;
  Result<void> CreateReplicaState();
  // Loss and gradients of this replica's sequences `mine` out of a batch of `batch_sequences`.
  // `to_owners`: each participant gets the sums of the parameters it updates only (GradientSync).
  Result<LossReport> ReplicaGradients(std::span<const Sequence> mine, int64_t batch_sequences,
                                      bool to_owners);
  // Forward and backward of this replica's sequences, each rank's losses scaled by
  // 1 / `predictions` (the whole batch's); returns (loss sum, recall loss sum, recall count).
  Result<std::vector<double>> Accumulate(std::span<const Sequence> mine, double predictions,
                                         bool to_owners);
  // Forward and backward of one sequence; adds its (loss, recall loss, recall count) to `sums`.
  // `reduce`: the backward may start the gradient sync (GradientSync::Arm).
  void AccumulateSequence(const Sequence& sequence, double predictions, bool reduce, bool to_owners,
                          std::vector<double>& sums);
  // ZeRO 2-3 with several replicas: every participant joins the gradient reductions (and at
  // ZeRO 3 the weight gathers) of each sequence of the replica with the most, so a replica with
  // fewer runs the rest as idle rounds (zero gradients of its own). SyncRounds: the rounds of a
  // pass over `mine` of this replica's sequences.
  size_t SyncRounds(size_t mine) const;
  void IdleSyncRound(bool reduce, bool to_owners);
  // ZeRO 2-3 to owners: each sequence's gradients are reduce-scattered after its backward.
  bool ReducesEverySequence(bool to_owners) const { return grads_sharded_ && to_owners; }
  void ResetGradients();
  // Waits for the weights of `stage` (LlamaShardModel::set_before_stage) still being gathered.
  void AwaitStageWeights(int stage);
  // ZeRO 3: overwrites the weights of `stage` that other participants own with NaN.
  void ReleaseOthersWeights(int stage);
  // ZeRO 3, around one sequence's backward: the gather in backward order, then (after it) the
  // release of every stage.
  void StartBackwardGather();
  void FinishBackwardGather();
  PhaseSeconds AttentionPhases() const;

  ModelSpec model_;
  TrainOptions options_;
  runtime::Comm& world_;
  Plan plan_;
  runtime::ReplicaComms comms_;     // before attention_: it outlives the layers using it
  std::vector<int64_t> positions_;  // this rank's global positions, plan order
  std::unique_ptr<DataSource> data_;
  LlamaWeights weights_;
  std::vector<at::Tensor> params_;  // NamedParameters order
  std::vector<AttentionLayer> attention_;
  std::unique_ptr<LlamaShardModel> shard_model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<int> optimizer_owners_;  // per parameter, a participant rank; empty: not sharded
  std::unique_ptr<GradientSync> grad_sync_;
  bool grads_sharded_ = false;
  bool weights_sharded_ = false;
  std::vector<std::vector<size_t>> stage_params_;  // per stage + 1: its parameters' indices
  double pending_sync_seconds_ = 0;                // ZeRO 2-3: reduce-scatters of earlier sequences
  int64_t step_ = 0;
  uint64_t plan_hash_ = 0;
};

// Intra-op threads of libtorch and OpenBLAS threads for this process (default 1 per rank).
void SetComputeThreads(int threads);

// Keeps freed memory in this process (glibc mallopt): libtorch allocates and frees tensors of
// megabytes in every step, and glibc's defaults hand them back to the kernel (munmap, heap trim)
// and fault fresh zeroed pages in on the next step. That made the linear phase of a step up to
// 1.8x slower than the same work repeated, and noisy (docs/measured.md). Call once at start-up.
void KeepFreedMemory();

// Peak resident set size of this process in bytes (getrusage).
int64_t PeakRssBytes();

}  // namespace hexiseq::train
