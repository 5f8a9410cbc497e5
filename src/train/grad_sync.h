// Gradient sync of the replicated weights: every parameter gradient summed over all ranks, in
// buckets of about `bucket_bytes` taken in reverse parameter order (the order in which backward
// finishes them). Overlapped mode starts a bucket's nonblocking all-reduce (Comm::IallreduceSum)
// from autograd hooks as soon as backward has accumulated every gradient in it, and waits for
// all of them before clipping; blocking mode runs the same buckets with Comm::AllreduceSum after
// backward. Buckets start strictly in order on every rank (a ready bucket waits for the ones
// before it), so ranks whose backward finishes gradients in another order still match.
// With owners (ZeRO >= 1: each parameter updated by one participant, OptimizerShardOwners), a
// pass armed `to_owners` reduce-scatters each bucket instead (Comm::IreduceScatterSum, its flat
// buffer laid out owner by owner): each rank receives the sums of its own parameters only, half an
// all-reduce's traffic, and the other parameters' gradients are released. Their sums are the
// all-reduce's bits (comm.h). Ignores: gradient compression; the gradients' memory (every
// gradient is held during the backward, and the buckets keep one copy of them all).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/comm.h"

namespace hexiseq::train {

class GradientSync {
 public:
  // `params` (leaf tensors that require grad) and `world` must outlive this object. With
  // `overlap`, registers a post hook on each parameter's gradient accumulator. `owners`: per
  // parameter the rank of `world` that updates it, or empty (no pass goes to owners).
  GradientSync(const std::vector<at::Tensor>& params, int64_t bucket_bytes, bool overlap,
               runtime::Comm& world, std::vector<int> owners = {});
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Call before the backward pass that completes the step's gradients (the last of a gradient
  // accumulation): from then on, each gradient the backward finishes may start its bucket.
  // `to_owners` (with owners): the pass reduce-scatters to the owners.
  void Arm(bool to_owners = false);

  // Collective: starts the buckets not started yet (a parameter backward did not reach gets a
  // zero gradient), waits for all, and writes the sums into every .grad() (to owners: into this
  // rank's parameters' and releases the others'). Returns the seconds spent here (the sync time
  // backward did not hide).
  double Finish();

  // Called by the hook of parameter `index` when backward has accumulated its gradient.
  void OnGradientReady(size_t index);

  // With owners, after they updated their parameters: starts each bucket's all-gather of the
  // weights (Comm::IallgatherBytes, each owner's block padded to the bucket's largest), in
  // forward order, so that the next forward waits for a layer's weights only when it needs them
  // (as Megatron's --overlap-param-gather); without overlap, waits for them all at once.
  // `backward_order`: the buckets in backward order instead (ZeRO 3's gather before a backward).
  void StartWeightGather(bool backward_order = false);
  // Waits for the all-gather of the bucket that holds parameter `index`, if pending, and copies
  // the weights other ranks own into their parameters.
  void AwaitWeights(size_t index);
  void AwaitAllWeights();
  // Seconds AwaitWeights waited since the last call.
  double TakeWeightWaitSeconds();

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // Buckets the last Finish found already started by the backward pass.
  int buckets_started_in_backward() const { return started_in_backward_; }
  // Passes (Finish calls) since construction: reductions of the gradients.
  int64_t passes() const { return passes_; }

 private:
  struct Bucket {
    size_t begin = 0, end = 0;  // parameters [begin, end)
    int64_t elements = 0;
    std::vector<size_t> order;    // its parameters in flat order: by owner, then by index
    std::vector<int64_t> offset;  // per parameter of `order`: first element in `flat`
    std::vector<int64_t> counts;  // per rank: elements of the parameters it owns
    std::vector<float> flat;
    std::vector<float> owned_sum;  // to owners: the sums of this rank's block
    runtime::RequestPtr request;
    size_t weight_block = 0;  // bytes: the largest owner's parameters in this bucket
    std::vector<char> weights_out, weights_in;  // this rank's block; every rank's
    runtime::RequestPtr weight_request;
  };

  void LayOut(Bucket& bucket) const;
  void StartBucket(Bucket& bucket);
  void WriteBack(Bucket& bucket);
  void StartBucketWeightGather(Bucket& bucket);
  void FinishWeightGather(Bucket& bucket);
  void DrivePending();
  int OwnerOf(size_t index) const { return owners_.empty() ? 0 : owners_[index]; }

  const std::vector<at::Tensor>& params_;
  runtime::Comm& world_;
  bool overlap_;
  std::vector<int> owners_;
  bool to_owners_ = false;            // this pass
  std::vector<Bucket> buckets_;       // in start order
  std::vector<size_t> bucket_of_;     // parameter index -> bucket index
  std::vector<int64_t> ready_count_;  // per bucket: parameters whose gradient is complete
  std::vector<uint8_t> ready_;        // per parameter, since Arm
  size_t next_bucket_ = 0;            // the first bucket not started
  bool armed_ = false;
  int started_in_backward_ = 0;
  int64_t passes_ = 0;
  double weight_wait_seconds_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooks alive
};

}  // namespace hexiseq::train
