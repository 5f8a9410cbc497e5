// Trainer: setup checks agreed across ranks, one step = forward/backward of each sequence on the
// local shard, loss and gradient all-reduce, clipping, optimizer update.
#include "train/trainer.h"

#include <ATen/Parallel.h>
#include <malloc.h>
#include <sys/resource.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "runtime/attention_kernels.h"
#include "runtime/dist_attention.h"
#include "runtime/slowdown.h"
#include "train/clock.h"

namespace hexiseq::train {
namespace {

constexpr int64_t kBytesPerKiB = 1024;

// Every rank of `comm` (the world, or the participants) passes its own outcome; all return an
// error when any failed. A failing rank keeps its own message; the others name the failing ranks
// (numbered in `comm`).
Result<void> AgreeAcrossRanks(runtime::Comm& comm, const Result<void>& local) {
  const int ok = local.has_value() ? 1 : 0;
  std::vector<int> all(comm.size());
  comm.Allgather(&ok, sizeof ok, all.data());
  std::string failed;
  for (int rank = 0; rank < comm.size(); ++rank) {
    if (!all[rank]) failed += (failed.empty() ? "" : ", ") + std::to_string(rank);
  }
  if (failed.empty()) return {};
  if (!local) return local;
  return InvalidArgument("train: setup failed on rank(s) " + failed + " (see their messages)");
}

Result<void> CheckPlanMatchesModel(const Plan& plan, const ModelSpec& model, int64_t seq_len) {
  const std::string hint =
      "; hint: make the plan for this model and length: hexiseq plan "
      "--model <model> --seq <S> --format json -o plan.json)";
  if (plan.num_heads != model.heads || plan.num_kv_heads != model.kv_heads) {
    return InvalidArgument("plan: num_heads = " + std::to_string(plan.num_heads) +
                           ", num_kv_heads = " + std::to_string(plan.num_kv_heads) + " but model " +
                           model.name + " has heads = " + std::to_string(model.heads) +
                           ", kv_heads = " + std::to_string(model.kv_heads) +
                           " (rule: the plan must be made for the model's heads" + hint);
  }
  if (seq_len != 0 && seq_len != plan.seq_len) {
    return InvalidArgument("--seq = " + std::to_string(seq_len) +
                           " but the plan has seq_len = " + std::to_string(plan.seq_len) +
                           " (rule: the plan shards exactly --seq tokens; leave --seq out to "
                           "take the plan's" +
                           hint);
  }
  return {};
}

// --batch must agree with the plan's batch: the plan splits exactly that many sequences over its
// replicas (and the planner priced them).
Result<void> CheckBatch(const Plan& plan, int batch) {
  if (batch == 0 || batch == plan.batch) return {};
  return InvalidArgument("--batch = " + std::to_string(batch) +
                         " but the plan has batch = " + std::to_string(plan.batch) +
                         " (rule: a step trains the plan's batch, split over its " +
                         std::to_string(NumReplicas(plan)) +
                         " replica(s) as the plan says; hint: leave --batch out to take the "
                         "plan's, or make the plan with hexiseq plan ... --batch " +
                         std::to_string(batch) + ")");
}

Result<void> CheckOptions(const TrainOptions& options) {
  if (options.batch < 1) {
    return InvalidArgument("--batch = " + std::to_string(options.batch) +
                           ": must be >= 1 (rule: sequences per step; hint: write --batch 1)");
  }
  return ValidateOptimizerConfig(options.optimizer);
}

// The start-up checks every rank makes on its own (the plan is the same everywhere).
Result<std::unique_ptr<DataSource>> CheckInputs(const Plan& plan, const ModelSpec& model,
                                                const TrainOptions& given,
                                                const TrainOptions& resolved) {
  Result<void> checked = CheckPlanMatchesModel(plan, model, given.seq_len);
  if (checked) checked = CheckBatch(plan, given.batch);
  if (checked) checked = CheckOptions(resolved);
  if (!checked) return std::unexpected(checked.error());
  return OpenDataSource(resolved.data, resolved.seq_len, model.vocab, resolved.seed);
}

// Collective over `comm`: every rank's tensors (owners[i] == comm.rank()) copied into the others'
// tensors[i] (the same shapes and dtype on every rank): one all-gather of each rank's tensors
// packed in index order, each rank's block padded to the largest one's bytes.
void ShareOwnedTensors(runtime::Comm& comm, const std::vector<int>& owners,
                       std::vector<at::Tensor>& tensors) {
  const int me = comm.rank();
  std::vector<size_t> held(comm.size(), 0);
  for (size_t index = 0; index < tensors.size(); ++index) {
    HEXISEQ_CHECK(tensors[index].is_contiguous(), "sharded tensors are contiguous");
    held[owners[index]] += tensors[index].nbytes();
  }
  const size_t block = *std::max_element(held.begin(), held.end());
  std::vector<char> mine(block), all(block * comm.size());
  size_t offset = 0;
  for (size_t index = 0; index < tensors.size(); ++index) {
    if (owners[index] != me) continue;
    std::memcpy(mine.data() + offset, tensors[index].data_ptr(), tensors[index].nbytes());
    offset += tensors[index].nbytes();
  }
  comm.Allgather(mine.data(), block, all.data());
  std::vector<size_t> cursor(comm.size(), 0);
  for (size_t index = 0; index < tensors.size(); ++index) {
    const int owner = owners[index];
    if (owner != me) {
      std::memcpy(tensors[index].data_ptr(), all.data() + owner * block + cursor[owner],
                  tensors[index].nbytes());
    }
    cursor[owner] += tensors[index].nbytes();
  }
}

}  // namespace

void SetComputeThreads(int threads) {
  at::set_num_threads(threads);
  runtime::SetBlasThreads(threads);
}

void KeepFreedMemory() {
  constexpr int kMmapThresholdBytes = 32 << 20;  // glibc's largest: blocks below come from the heap
  constexpr int kTrimThresholdBytes = 1 << 30;   // give the heap's top back only above 1 GiB
  constexpr int kTopPadBytes = 256 << 20;        // grow the heap in steps of 256 MiB
  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
  mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes);
  mallopt(M_TOP_PAD, kTopPadBytes);
}

int64_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * kBytesPerKiB;
}

Trainer::Trainer(const ModelSpec& model, const TrainOptions& options, runtime::Comm& world)
    : model_(model), options_(options), world_(world) {}

Result<std::unique_ptr<Trainer>> Trainer::Create(const Plan& plan, const ModelSpec& model,
                                                 const TrainOptions& options,
                                                 runtime::Comm& world) {
  if (auto agreed = runtime::CheckPlanAgreement(world, plan, model.head_dim); !agreed) {
    return std::unexpected(agreed.error());
  }
  // The same plan on every rank: every rank returns this error or none.
  if (auto valid = ValidateStructure(plan); !valid) return std::unexpected(valid.error());
  TrainOptions resolved = options;
  if (resolved.seq_len == 0) resolved.seq_len = plan.seq_len;
  if (resolved.batch == 0) resolved.batch = plan.batch;
  std::unique_ptr<Trainer> trainer(new Trainer(model, resolved, world));
  trainer->plan_ = plan;
  trainer->plan_hash_ = PlanHash(plan);
  auto data = CheckInputs(plan, model, options, resolved);
  Result<void> local;
  if (!data) local = std::unexpected(data.error());
  if (auto agreed = AgreeAcrossRanks(world, local); !agreed) return std::unexpected(agreed.error());
  trainer->data_ = std::move(*data);
  trainer->comms_ = runtime::SplitByReplica(world, plan);
  if (trainer->comms_.left_out()) return std::unique_ptr<Trainer>();
  // One replica's attention may fail to set up where another's does not: agree first, so that
  // no replica goes on into the gradient all-reduce alone.
  if (auto created = AgreeAcrossRanks(trainer->participants(), trainer->CreateReplicaState());
      !created) {
    return std::unexpected(created.error());
  }
  return trainer;
}

// The attention layers over this rank's replica, its token positions, the weights, optimizer and
// gradient sync over the participants. Collective over the participants.
Result<void> Trainer::CreateReplicaState() {
  runtime::Comm& replica_comm = *comms_.replica_comm;
  for (int layer = 0; layer < model_.layers; ++layer) {
    auto attention =
        runtime::DistributedAttention::Create(comms_.local.plan, replica_comm, model_.head_dim);
    if (!attention) return std::unexpected(attention.error());
    attention_.push_back(AttentionLayer{std::move(*attention), {}});
  }
  const runtime::AttentionLayout& layout = attention_[0].attention->layout();
  const runtime::RankRole& role = layout.roles[replica_comm.rank()];
  const runtime::LayoutGroup& group = layout.groups[role.group];
  positions_.assign(group.positions.begin() + group.member_offset[role.member],
                    group.positions.begin() + group.member_offset[role.member + 1]);
  weights_ = InitWeights(model_, options_.seed, options_.dtype);
  stage_params_.assign(model_.layers + 2, {});
  for (const NamedTensorRef& named : NamedParameters(weights_)) {
    stage_params_[named.stage + 1].push_back(params_.size());
    params_.push_back(named.tensor);
  }
  shard_model_ =
      std::make_unique<LlamaShardModel>(model_, weights_, attention_, options_.recompute);
  std::vector<uint8_t> owned;
  if (plan_.zero_stage >= 1 && comms_.participants->size() > 1) {
    optimizer_owners_ = OptimizerShardOwners(params_, comms_.participants->size());
    for (int owner : optimizer_owners_) owned.push_back(owner == comms_.participants->rank());
  }
  optimizer_ = std::make_unique<Optimizer>(options_.optimizer, params_, std::move(owned));
  // GradientSync sums in fp32 buffers: the model's bucket of parameters is that many floats.
  const int64_t bucket_bytes =
      options_.bucket_bytes > 0
          ? options_.bucket_bytes
          : static_cast<int64_t>(model_.GradBucketParams()) * static_cast<int64_t>(sizeof(float));
  grad_sync_ = std::make_unique<GradientSync>(params_, bucket_bytes, options_.overlap_grad_sync,
                                              *comms_.participants, optimizer_owners_);
  grads_sharded_ = plan_.zero_stage >= 2 && optimizer_sharded();
  weights_sharded_ = plan_.zero_stage >= 3 && optimizer_sharded();
  if (optimizer_sharded()) {  // a stage's weights may still be on their way from their owners
    shard_model_->set_before_stage([this](int stage) {
      AwaitStageWeights(stage);
      // ZeRO 3: the layer before has run its forward (the embedding stays for a tied LM head)
      if (weights_sharded_ && stage >= 1 && stage <= model_.layers) ReleaseOthersWeights(stage - 1);
    });
  }
  if (weights_sharded_) {
    shard_model_->set_before_backward_stage([this](int layer) { AwaitStageWeights(layer); });
  }
  return {};
}

LlamaWeights& Trainer::weights() {
  if (grad_sync_) grad_sync_->AwaitAllWeights();
  return weights_;
}

void Trainer::GatherWeights() {
  if (weights_sharded_) grad_sync_->StartWeightGather();
  weights();
}

void Trainer::AwaitStageWeights(int stage) {
  for (size_t index : stage_params_[stage + 1]) grad_sync_->AwaitWeights(index);
}

void Trainer::ReleaseOthersWeights(int stage) {
  constexpr int kNanBytes = 0xFF;  // all ones: a NaN in every floating-point type
  const int me = comms_.participants->rank();
  for (size_t index : stage_params_[stage + 1]) {
    // Raw bytes: the autograd version counter must not see a write (the backward gathers the
    // same values back before it reads them).
    if (optimizer_owners_[index] != me)
      std::memset(params_[index].data_ptr(), kNanBytes, params_[index].nbytes());
  }
}

void Trainer::StartBackwardGather() {
  const runtime::ComputePause pause;  // --slowdown: starting communication is not compute
  grad_sync_->StartWeightGather(/*backward_order=*/true);
}

void Trainer::FinishBackwardGather() {
  grad_sync_->AwaitAllWeights();  // the embedding's and the head's buckets
  for (int stage = -1; stage <= model_.layers; ++stage) ReleaseOthersWeights(stage);
}

ShardBatch Trainer::MakeShard(const Sequence& sequence) const {
  const int64_t count = static_cast<int64_t>(positions_.size());
  const auto i64 = at::TensorOptions().dtype(at::kLong);
  ShardBatch batch{at::empty({count}, i64), at::empty({count}, i64), at::empty({count}, i64)};
  int64_t* tokens = batch.tokens.data_ptr<int64_t>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  int64_t* positions = batch.positions.data_ptr<int64_t>();
  for (int64_t row = 0; row < count; ++row) {
    const int64_t position = positions_[row];
    tokens[row] = sequence.tokens[position];
    targets[row] = sequence.tokens[position + 1];
    positions[row] = position;
  }
  return batch;
}

void Trainer::ResetGradients() {
  for (at::Tensor& param : params_) param.mutable_grad() = at::Tensor();
  for (AttentionLayer& layer : attention_) layer.times = {};
}

PhaseSeconds Trainer::AttentionPhases() const {
  PhaseSeconds phases;
  for (const AttentionLayer& layer : attention_) {
    phases.attention_compute += layer.times.compute;
    phases.alltoall += layer.times.alltoall;
    phases.ring_wait += layer.times.ring_wait;
    phases.linear -= layer.times.total;  // the caller adds the compute wall time
  }
  return phases;
}

size_t Trainer::SyncRounds(size_t mine) const {
  if (!grads_sharded_ || num_replicas() == 1) return mine;
  size_t most = mine;
  for (int replica = 0; replica < num_replicas(); ++replica) {
    most = std::max(most, static_cast<size_t>(runtime::ReplicaSequenceBlock(plan_, replica).count));
  }
  return most;
}

void Trainer::AccumulateSequence(const Sequence& sequence, double predictions, bool reduce,
                                 bool to_owners, std::vector<double>& sums) {
  if (weights_sharded_) grad_sync_->StartWeightGather();
  runtime::MarkComputeStart();  // --slowdown pads the compute between attention calls
  const at::Tensor losses = shard_model_->TokenLosses(MakeShard(sequence));
  if (reduce) grad_sync_->Arm(to_owners);
  if (weights_sharded_) StartBackwardGather();
  (losses.sum() / predictions).backward();
  runtime::PadComputeSinceMark();
  if (weights_sharded_) FinishBackwardGather();
  const at::Tensor detached = losses.detach().to(at::kDouble);
  sums[0] += detached.sum().item<double>();
  std::vector<double> recall_mask(positions_.size());
  for (size_t row = 0; row < positions_.size(); ++row) {
    recall_mask[row] = sequence.recall_target[positions_[row]];
  }
  const at::Tensor mask =
      at::from_blob(recall_mask.data(), {local_tokens()}, at::TensorOptions().dtype(at::kDouble));
  sums[1] += (detached * mask).sum().item<double>();
  sums[2] += mask.sum().item<double>();
}

void Trainer::IdleSyncRound(bool reduce, bool to_owners) {
  if (reduce) grad_sync_->Arm(to_owners);  // no backward runs: Finish reduces zero gradients
  if (!weights_sharded_) return;
  grad_sync_->StartWeightGather();
  grad_sync_->AwaitAllWeights();
  StartBackwardGather();
  FinishBackwardGather();
}

Result<std::vector<double>> Trainer::Accumulate(std::span<const Sequence> mine, double predictions,
                                                bool to_owners) {
  std::vector<double> sums(3, 0.0);  // loss sum, recall loss sum, recall count
  const size_t rounds = SyncRounds(mine.size());
  try {
    for (size_t index = 0; index < rounds; ++index) {
      // The last backward completes the gradients: it may start their all-reduces. ZeRO 2-3
      // reduce-scatter every sequence's (each owner's sum accumulates them).
      const bool reduce = index + 1 == rounds || ReducesEverySequence(to_owners);
      if (index < mine.size()) {
        AccumulateSequence(mine[index], predictions, reduce, to_owners, sums);
      } else {
        IdleSyncRound(reduce, to_owners);
      }
      if (ReducesEverySequence(to_owners)) pending_sync_seconds_ += grad_sync_->Finish();
    }
  } catch (const c10::Error& error) {
    return Internal(std::string("train: ") + error.what_without_backtrace());
  }
  return sums;
}

Result<LossReport> Trainer::ComputeGradients(std::span<const Sequence> sequences) {
  runtime::SequenceBlock block{0, static_cast<int>(sequences.size())};
  if (num_replicas() > 1) {
    if (static_cast<int>(sequences.size()) != plan_.batch) {
      return InvalidArgument(
          "train: " + std::to_string(sequences.size()) +
          " sequences given but the plan has batch = " + std::to_string(plan_.batch) +
          " (rule: with several replicas a gradient is taken over the plan's "
          "whole batch; hint: pass the plan's batch of sequences)");
    }
    block = runtime::ReplicaSequenceBlock(plan_, replica());
  }
  return ReplicaGradients(sequences.subspan(block.first, block.count),
                          static_cast<int64_t>(sequences.size()), /*to_owners=*/false);
}

Result<LossReport> Trainer::ReplicaGradients(std::span<const Sequence> mine,
                                             int64_t batch_sequences, bool to_owners) {
  const double start = Now();
  ResetGradients();
  const double predictions =
      static_cast<double>(batch_sequences) * static_cast<double>(options_.seq_len);
  auto sums = Accumulate(mine, predictions, to_owners);
  if (!sums) return std::unexpected(sums.error());
  const double compute_end = Now();
  LossReport report;
  report.phases = AttentionPhases();
  // The waits for weights from their owners (and at ZeRO 2-3 the reduce-scatters of earlier
  // sequences) happened between the compute; they belong to the sync.
  const double sync_in_compute =
      grad_sync_->TakeWeightWaitSeconds() + std::exchange(pending_sync_seconds_, 0.0);
  report.phases.linear += compute_end - start - sync_in_compute;
  report.phases.grad_sync += sync_in_compute;
  if (!ReducesEverySequence(to_owners)) report.phases.grad_sync += grad_sync_->Finish();
  participants().AllreduceSum(std::span<double>(*sums));
  report.loss = (*sums)[0] / predictions;
  report.recall_loss =
      (*sums)[2] > 0 ? (*sums)[1] / (*sums)[2] : std::numeric_limits<double>::quiet_NaN();
  report.seconds = Now() - start;
  return report;
}

Result<StepReport> Trainer::Step() {
  const double start = Now();
  // This replica's block of the step's sequences step * batch + [0, batch).
  const runtime::SequenceBlock block = runtime::ReplicaSequenceBlock(plan_, replica());
  std::vector<Sequence> mine;
  for (int sequence = block.first; sequence < block.first + block.count; ++sequence) {
    mine.push_back(data_->Get(step_ * options_.batch + sequence));
  }
  // Sharded optimizer: the gradients go to their parameters' owners only.
  auto loss = ReplicaGradients(mine, options_.batch, optimizer_sharded());
  if (!loss) return std::unexpected(loss.error());
  StepReport report;
  report.step = step_;
  report.loss = loss->loss;
  report.recall_loss = loss->recall_loss;
  report.phases = loss->phases;
  std::vector<double> squares = GradSquaredNorms(params_);
  if (optimizer_sharded()) {  // each owner holds its parameters' squares, the others zeros
    const double norm_start = Now();
    comms_.participants->AllreduceSum(std::span<double>(squares));
    report.phases.grad_sync += Now() - norm_start;
  }
  report.grad_norm = ClipGradNorm(params_, squares, options_.optimizer.grad_clip);
  if (!std::isfinite(report.loss) || !std::isfinite(report.grad_norm)) {
    char buffer[160];
    std::snprintf(buffer, sizeof buffer, "step %lld: loss = %g, gradient norm = %g",
                  static_cast<long long>(step_), report.loss, report.grad_norm);
    return Infeasible(std::string(buffer) +
                      ": not finite, training stopped before updating (rule: loss and gradients "
                      "must be finite; hint: lower --lr or raise --warmup; weights and "
                      "checkpoints were left as they were)");
  }
  report.lr = LearningRate(options_.optimizer, step_);
  {
    const runtime::ComputeRegion padded;  // --slowdown
    optimizer_->Step(report.lr);
  }
  // ZeRO 1-2: the next forward takes the weights their owners set (ZeRO 3 gathers in every
  // forward)
  if (optimizer_sharded() && !weights_sharded_) {
    const double share_start = Now();
    grad_sync_->StartWeightGather();
    report.phases.grad_sync += Now() - share_start;
  }
  ++step_;
  report.seconds = Now() - start;
  report.tokens_per_second =
      static_cast<double>(options_.batch) * options_.seq_len / std::max(report.seconds, 1e-12);
  return report;
}

void Trainer::GatherOptimizerState(std::vector<at::Tensor>& exp_avg,
                                   std::vector<at::Tensor>& exp_avg_sq) {
  exp_avg = optimizer_->exp_avg();
  exp_avg_sq = optimizer_->exp_avg_sq();
  if (!optimizer_sharded() || exp_avg.empty()) return;
  for (std::vector<at::Tensor>* moments : {&exp_avg, &exp_avg_sq}) {
    for (size_t index = 0; index < params_.size(); ++index) {  // owned ones are only read
      if (!optimizer_->owns(index)) (*moments)[index] = at::empty_like(params_[index]).detach();
    }
    ShareOwnedTensors(*comms_.participants, optimizer_owners_, *moments);
  }
}

void Trainer::OptimizerStateBuffers(std::vector<at::Tensor>& exp_avg,
                                    std::vector<at::Tensor>& exp_avg_sq) {
  exp_avg = optimizer_->exp_avg();
  exp_avg_sq = optimizer_->exp_avg_sq();
  if (!optimizer_sharded() || exp_avg.empty()) return;
  for (size_t index = 0; index < params_.size(); ++index) {
    exp_avg[index] = at::zeros_like(params_[index]).detach();
    exp_avg_sq[index] = at::zeros_like(params_[index]).detach();
  }
}

}  // namespace hexiseq::train
