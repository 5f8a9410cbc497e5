// Trainer: setup checks agreed across ranks, one step = forward/backward of each sequence on the
// local shard, loss and gradient all-reduce, clipping, optimizer update.
#include "train/trainer.h"

#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "runtime/attention_kernels.h"
#include "runtime/dist_attention.h"
#include "runtime/slowdown.h"

namespace hexiseq::train {
namespace {

constexpr int64_t kBytesPerKiB = 1024;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Every rank passes its own outcome; all return an error when any failed. A failing rank keeps
// its own message; the others name the failing ranks.
Result<void> AgreeAcrossRanks(runtime::Comm& world, const Result<void>& local) {
  const int ok = local.has_value() ? 1 : 0;
  std::vector<int> all(world.size());
  world.Allgather(&ok, sizeof ok, all.data());
  std::string failed;
  for (int rank = 0; rank < world.size(); ++rank) {
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

Result<void> CheckOptions(const TrainOptions& options) {
  if (options.batch < 1) {
    return InvalidArgument("--batch = " + std::to_string(options.batch) +
                           ": must be >= 1 (rule: sequences per step; hint: write --batch 1)");
  }
  return ValidateOptimizerConfig(options.optimizer);
}

}  // namespace

void SetComputeThreads(int threads) {
  at::set_num_threads(threads);
  runtime::SetBlasThreads(threads);
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
  TrainOptions resolved = options;
  if (resolved.seq_len == 0) resolved.seq_len = plan.seq_len;
  std::unique_ptr<Trainer> trainer(new Trainer(model, resolved, world));
  trainer->plan_hash_ = PlanHash(plan);
  Result<void> local = CheckPlanMatchesModel(plan, model, options.seq_len);
  if (local) local = CheckOptions(resolved);
  if (local) {
    auto data = OpenDataSource(resolved.data, resolved.seq_len, model.vocab, resolved.seed);
    if (data) {
      trainer->data_ = std::move(*data);
    } else {
      local = std::unexpected(data.error());
    }
  }
  if (auto agreed = AgreeAcrossRanks(world, local); !agreed) return std::unexpected(agreed.error());

  for (int layer = 0; layer < model.layers; ++layer) {
    auto attention = runtime::DistributedAttention::Create(plan, world, model.head_dim);
    if (!attention) return std::unexpected(attention.error());
    trainer->attention_.push_back(AttentionLayer{std::move(*attention), {}});
  }
  const runtime::AttentionLayout& layout = trainer->attention_[0].attention->layout();
  const runtime::RankRole& role = layout.roles[world.rank()];
  const runtime::LayoutGroup& group = layout.groups[role.group];
  trainer->positions_.assign(group.positions.begin() + group.member_offset[role.member],
                             group.positions.begin() + group.member_offset[role.member + 1]);
  trainer->weights_ = InitWeights(model, resolved.seed, resolved.dtype);
  for (const NamedTensorRef& named : NamedParameters(trainer->weights_)) {
    trainer->params_.push_back(named.tensor);
  }
  trainer->shard_model_ = std::make_unique<LlamaShardModel>(
      trainer->model_, trainer->weights_, trainer->attention_, resolved.recompute);
  trainer->optimizer_ = std::make_unique<Optimizer>(resolved.optimizer, trainer->params_);
  trainer->grad_sync_ = std::make_unique<GradientSync>(trainer->params_, resolved.bucket_bytes,
                                                       resolved.overlap_grad_sync, world);
  return trainer;
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

Result<LossReport> Trainer::ComputeGradients(std::span<const Sequence> sequences) {
  const double start = Now();
  ResetGradients();
  const double predictions =
      static_cast<double>(sequences.size()) * static_cast<double>(options_.seq_len);
  std::vector<double> sums(3, 0.0);  // loss sum, recall loss sum, recall count
  try {
    for (size_t index = 0; index < sequences.size(); ++index) {
      const Sequence& sequence = sequences[index];
      runtime::MarkComputeStart();  // --slowdown pads the compute between attention calls
      const at::Tensor losses = shard_model_->TokenLosses(MakeShard(sequence));
      // The last backward completes the gradients: it may start their all-reduces.
      if (index + 1 == sequences.size()) grad_sync_->Arm();
      (losses.sum() / predictions).backward();
      runtime::PadComputeSinceMark();
      const at::Tensor detached = losses.detach().to(at::kDouble);
      sums[0] += detached.sum().item<double>();
      std::vector<double> recall_mask(positions_.size());
      for (size_t row = 0; row < positions_.size(); ++row) {
        recall_mask[row] = sequence.recall_target[positions_[row]];
      }
      const at::Tensor mask = at::from_blob(recall_mask.data(), {local_tokens()},
                                            at::TensorOptions().dtype(at::kDouble));
      sums[1] += (detached * mask).sum().item<double>();
      sums[2] += mask.sum().item<double>();
    }
  } catch (const c10::Error& error) {
    return Internal(std::string("train: ") + error.what_without_backtrace());
  }
  const double compute_end = Now();
  LossReport report;
  report.phases = AttentionPhases();
  report.phases.linear += compute_end - start;
  report.phases.grad_sync = grad_sync_->Finish();
  world_.AllreduceSum(std::span<double>(sums));
  report.loss = sums[0] / predictions;
  report.recall_loss = sums[2] > 0 ? sums[1] / sums[2] : std::numeric_limits<double>::quiet_NaN();
  report.seconds = Now() - start;
  return report;
}

Result<StepReport> Trainer::Step() {
  const double start = Now();
  std::vector<Sequence> sequences;
  for (int sequence = 0; sequence < options_.batch; ++sequence) {
    sequences.push_back(data_->Get(step_ * options_.batch + sequence));
  }
  auto loss = ComputeGradients(sequences);
  if (!loss) return std::unexpected(loss.error());
  StepReport report;
  report.step = step_;
  report.loss = loss->loss;
  report.recall_loss = loss->recall_loss;
  report.phases = loss->phases;
  report.grad_norm = ClipGradNorm(params_, options_.optimizer.grad_clip);
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
  ++step_;
  report.seconds = Now() - start;
  report.tokens_per_second =
      static_cast<double>(options_.batch) * options_.seq_len / std::max(report.seconds, 1e-12);
  return report;
}

}  // namespace hexiseq::train
