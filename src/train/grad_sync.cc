// GradientSync: bucket layout, the accumulator post hooks, in-order bucket starts, and the
// copies between .grad() and each bucket's flat buffer.
#include "train/grad_sync.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "runtime/slowdown.h"
#include "spec/error.h"
#include "train/clock.h"

namespace hexiseq::train {
namespace {

// Runs after a parameter's AccumulateGrad node, i.e. once its .grad() holds this backward's sum.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(GradientSync& sync, size_t index) : sync_(sync), index_(index) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    sync_.OnGradientReady(index_);
    return outputs;
  }

 private:
  GradientSync& sync_;
  size_t index_;
};

}  // namespace

GradientSync::GradientSync(const std::vector<at::Tensor>& params, int64_t bucket_bytes,
                           bool overlap, runtime::Comm& world, std::vector<int> owners)
    : params_(params),
      world_(world),
      overlap_(overlap),
      owners_(std::move(owners)),
      bucket_of_(params.size()),
      ready_(params.size(), 0) {
  const int64_t bucket_elements =
      std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  size_t end = params_.size();
  while (end > 0) {
    Bucket bucket;
    bucket.end = end;
    bucket.begin = end;
    while (bucket.begin > 0 &&
           (bucket.elements == 0 ||
            bucket.elements + params_[bucket.begin - 1].numel() <= bucket_elements)) {
      bucket.elements += params_[--bucket.begin].numel();
    }
    for (size_t index = bucket.begin; index < bucket.end; ++index) {
      bucket_of_[index] = buckets_.size();
    }
    end = bucket.begin;
    LayOut(bucket);
    buckets_.push_back(std::move(bucket));
  }
  ready_count_.assign(buckets_.size(), 0);
  if (!overlap_) return;
  for (size_t index = 0; index < params_.size(); ++index) {
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(params_[index]);
    HEXISEQ_CHECK(accumulator != nullptr, "gradient sync: a parameter without autograd");
    accumulator->add_post_hook(std::make_unique<ReadyHook>(*this, index));
    accumulators_.push_back(std::move(accumulator));
  }
}

void GradientSync::LayOut(Bucket& bucket) const {
  for (size_t index = bucket.begin; index < bucket.end; ++index) bucket.order.push_back(index);
  std::stable_sort(bucket.order.begin(), bucket.order.end(),
                   [&](size_t a, size_t b) { return OwnerOf(a) < OwnerOf(b); });
  bucket.counts.assign(world_.size(), 0);
  int64_t offset = 0;
  for (size_t index : bucket.order) {
    bucket.offset.push_back(offset);
    offset += params_[index].numel();
    bucket.counts[OwnerOf(index)] += params_[index].numel();
  }
}

GradientSync::~GradientSync() {
  for (Bucket& bucket : buckets_) {
    if (bucket.request) world_.Wait(*bucket.request);
    if (bucket.weight_request) world_.Wait(*bucket.weight_request);
  }
}

void GradientSync::Arm(bool to_owners) {
  AwaitAllWeights();  // the forward has waited for them already, unless it skipped a parameter
  for (Bucket& bucket : buckets_) {  // left over only by a backward that threw
    if (bucket.request) world_.Wait(*bucket.request);
    bucket.request.reset();
  }
  to_owners_ = to_owners && !owners_.empty();
  armed_ = overlap_;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(ready_count_.begin(), ready_count_.end(), 0);
  next_bucket_ = 0;
}

void GradientSync::OnGradientReady(size_t index) {
  if (!armed_) return;
  HEXISEQ_CHECK(!ready_[index], "gradient sync: a gradient completed twice in one backward");
  ready_[index] = 1;
  const size_t bucket = bucket_of_[index];
  ++ready_count_[bucket];
  while (next_bucket_ < buckets_.size() &&
         ready_count_[next_bucket_] ==
             static_cast<int64_t>(buckets_[next_bucket_].end - buckets_[next_bucket_].begin)) {
    StartBucket(buckets_[next_bucket_++]);
  }
  DrivePending();
}

void GradientSync::StartBucket(Bucket& bucket) {
  at::NoGradGuard no_grad;
  bucket.flat.resize(bucket.elements);
  for (size_t slot = 0; slot < bucket.order.size(); ++slot) {
    const at::Tensor& param = params_[bucket.order[slot]];
    float* out = bucket.flat.data() + bucket.offset[slot];
    if (param.grad().defined()) {
      const at::Tensor grad = param.grad().to(at::kFloat).contiguous();
      std::copy_n(grad.data_ptr<float>(), grad.numel(), out);
    } else {
      std::fill_n(out, param.numel(), 0.0f);
    }
  }
  if (to_owners_) {
    bucket.owned_sum.resize(bucket.counts[world_.rank()]);
    bucket.request =
        world_.IreduceScatterSum(bucket.flat.data(), bucket.counts, bucket.owned_sum.data());
    if (!overlap_) world_.Wait(*bucket.request);
  } else if (overlap_) {
    bucket.request = world_.IallreduceSum(std::span<float>(bucket.flat));
  } else {
    world_.AllreduceSum(std::span<float>(bucket.flat));
  }
}

// After the bucket's sum: every parameter's .grad() from `flat`, or (to owners) this rank's from
// `owned_sum` (its block starts at the first parameter it owns) and the others' released.
void GradientSync::WriteBack(Bucket& bucket) {
  const int me = world_.rank();
  int64_t block_start = -1;
  for (size_t slot = 0; slot < bucket.order.size(); ++slot) {
    const at::Tensor& param = params_[bucket.order[slot]];
    if (to_owners_ && OwnerOf(bucket.order[slot]) != me) {
      param.mutable_grad() = at::Tensor();
      continue;
    }
    const float* sums = bucket.flat.data() + bucket.offset[slot];
    if (to_owners_) {
      if (block_start < 0) block_start = bucket.offset[slot];
      sums = bucket.owned_sum.data() + (bucket.offset[slot] - block_start);
    }
    if (!param.grad().defined()) param.mutable_grad() = at::zeros_like(param);
    param.mutable_grad().copy_(at::from_blob(const_cast<float*>(sums), param.sizes(),
                                             at::TensorOptions().dtype(at::kFloat)));
  }
}

void GradientSync::StartWeightGather(bool backward_order) {
  HEXISEQ_CHECK(!owners_.empty(), "gradient sync: a weight all-gather without owners");
  for (size_t position = 0; position < buckets_.size(); ++position) {
    // buckets_ is in backward order
    StartBucketWeightGather(buckets_[backward_order ? position : buckets_.size() - 1 - position]);
  }
  if (!overlap_) AwaitAllWeights();
}

void GradientSync::StartBucketWeightGather(Bucket& bucket) {
  HEXISEQ_CHECK(!bucket.weight_request, "gradient sync: a weight all-gather still pending");
  const int me = world_.rank();
  std::vector<size_t> held(world_.size(), 0);
  for (size_t index : bucket.order) held[OwnerOf(index)] += params_[index].nbytes();
  bucket.weight_block = *std::max_element(held.begin(), held.end());
  bucket.weights_out.assign(bucket.weight_block, 0);
  bucket.weights_in.resize(bucket.weight_block * world_.size());
  size_t offset = 0;
  for (size_t index : bucket.order) {
    if (OwnerOf(index) != me) continue;
    const at::Tensor& param = params_[index];
    HEXISEQ_CHECK(param.is_contiguous(), "gradient sync: gathered weights are contiguous");
    std::memcpy(bucket.weights_out.data() + offset, param.data_ptr(), param.nbytes());
    offset += param.nbytes();
  }
  bucket.weight_request = world_.IallgatherBytes(bucket.weights_out.data(), bucket.weight_block,
                                                 bucket.weights_in.data());
}

void GradientSync::AwaitWeights(size_t index) {
  Bucket& bucket = buckets_[bucket_of_[index]];
  if (!bucket.weight_request) return;
  const double start = Now();
  {
    const runtime::ComputePause pause;  // --slowdown: waiting is not compute
    world_.Wait(*bucket.weight_request);
  }
  bucket.weight_request.reset();
  FinishWeightGather(bucket);
  weight_wait_seconds_ += Now() - start;
}

void GradientSync::AwaitAllWeights() {
  for (auto bucket = buckets_.rbegin(); bucket != buckets_.rend(); ++bucket) {
    if (bucket->weight_request) AwaitWeights(bucket->begin);
  }
}

double GradientSync::TakeWeightWaitSeconds() { return std::exchange(weight_wait_seconds_, 0.0); }

// Each owner's parameters lie in its block in `order` (by owner, then by index).
void GradientSync::FinishWeightGather(Bucket& bucket) {
  const int me = world_.rank();
  std::vector<size_t> cursor(world_.size(), 0);
  for (size_t index : bucket.order) {
    const int owner = OwnerOf(index);
    const at::Tensor& param = params_[index];
    if (owner != me) {
      std::memcpy(param.data_ptr(),
                  bucket.weights_in.data() + owner * bucket.weight_block + cursor[owner],
                  param.nbytes());
    }
    cursor[owner] += param.nbytes();
  }
}

// Lets the transport progress the started all-reduces (MPI progresses nonblocking collectives
// only inside MPI calls).
void GradientSync::DrivePending() {
  for (size_t bucket = 0; bucket < next_bucket_; ++bucket) {
    if (buckets_[bucket].request) world_.Test(*buckets_[bucket].request);
  }
}

double GradientSync::Finish() {
  const double start = Now();
  ++passes_;
  armed_ = false;
  started_in_backward_ = static_cast<int>(next_bucket_);
  while (next_bucket_ < buckets_.size()) StartBucket(buckets_[next_bucket_++]);
  at::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    if (bucket.request) {
      world_.Wait(*bucket.request);
      bucket.request.reset();
    }
    WriteBack(bucket);
  }
  next_bucket_ = 0;
  return Now() - start;
}

}  // namespace hexiseq::train
