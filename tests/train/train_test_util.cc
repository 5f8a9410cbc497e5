// In-process training runs for the trainer tests.
#include "train/train_test_util.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "runtime/comm.h"

namespace hexiseq::testing {

ModelSpec TinyLlama(int heads, int kv_heads) {
  ModelSpec spec;
  spec.name = "tiny-test";
  spec.layers = 2;
  spec.hidden = 64;
  spec.heads = heads;
  spec.kv_heads = kv_heads;
  spec.head_dim = 8;
  spec.ffn_hidden = 128;
  spec.vocab = 256;
  return spec;
}

namespace {

std::vector<float> ToVector(const at::Tensor& tensor) {
  const at::Tensor flat = tensor.to(at::kFloat).contiguous().view(-1);
  return std::vector<float>(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
}

void RecordGradients(train::Trainer& trainer, TrainRun& run, int rank) {
  const auto named = train::NamedParameters(trainer.weights());
  if (rank == 0) {
    for (const auto& param : named) run.grads[param.name] = ToVector(param.tensor.grad());
    return;
  }
  run.grads_max_rank_diff.resize(named.size(), 0.0f);
  for (size_t index = 0; index < named.size(); ++index) {
    const std::vector<float> mine = ToVector(named[index].tensor.grad());
    const std::vector<float>& base = run.grads[named[index].name];
    for (size_t element = 0; element < mine.size() && element < base.size(); ++element) {
      run.grads_max_rank_diff[index] =
          std::max(run.grads_max_rank_diff[index], std::abs(mine[element] - base[element]));
    }
  }
}

// ComputeGradients on sequences 0..batch-1; the first participant records the loss, then every
// participant in turn its gradients. Returns the error message, empty on success.
std::string RecordStepZero(train::Trainer& trainer, int batch, TrainRun& run, std::mutex& mu) {
  runtime::Comm& participants = trainer.participants();
  std::vector<train::Sequence> sequences;
  for (int index = 0; index < batch; ++index) sequences.push_back(trainer.data().Get(index));
  auto loss = trainer.ComputeGradients(sequences);
  if (!loss) return loss.error().message;
  participants.Barrier();  // the first participant records first
  for (int rank = 0; rank < participants.size(); ++rank) {
    if (rank == participants.rank()) {
      std::lock_guard lock(mu);
      if (rank == 0) {
        run.loss0 = loss->loss;
        run.recall0 = loss->recall_loss;
      }
      RecordGradients(trainer, run, rank);
    }
    participants.Barrier();
  }
  return "";
}

}  // namespace

Plan WithBatch(Plan plan, int batch) {
  HEXISEQ_CHECK(NumReplicas(plan) == 1, "WithBatch takes a one-replica plan");
  plan.batch = batch;
  plan.replica_sequences.clear();
  return plan;
}

TrainRun RunTraining(const Plan& given, const ModelSpec& model, const train::TrainOptions& options,
                     int steps) {
  const Plan plan = NumReplicas(given) == 1 ? WithBatch(given, options.batch) : given;
  TrainRun run;
  std::mutex mu;
  auto fail = [&](const std::string& message) {
    std::lock_guard lock(mu);
    if (run.error.empty()) run.error = message;
  };
  train::SetComputeThreads(1);
  runtime::RunInProcess(plan.num_ranks, [&](runtime::Comm& comm) {
    auto trainer = train::Trainer::Create(plan, model, options, comm);
    if (!trainer) return fail(trainer.error().message);
    if (*trainer) {  // nullptr: left out by the plan
      if (auto error = RecordStepZero(**trainer, plan.batch, run, mu); !error.empty()) {
        return fail(error);
      }
    }
    // Create is collective over the world: left-out ranks take part in it too.
    auto fresh = train::Trainer::Create(plan, model, options, comm);
    if (!fresh) return fail(fresh.error().message);
    if (!*fresh) return;
    for (int step = 0; step < steps; ++step) {
      auto report = (*fresh)->Step();
      if (!report) return fail(report.error().message);
      if ((*fresh)->participants().rank() == 0) run.losses.push_back(report->loss);
    }
  });
  return run;
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double max_diff = 0, max_ref = 0;
  for (size_t index = 0; index < std::min(a.size(), b.size()); ++index) {
    max_diff = std::max(max_diff, std::abs(double{a[index]} - b[index]));
    max_ref = std::max(max_ref, std::abs(double{b[index]}));
  }
  if (a.size() != b.size()) return INFINITY;
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

}  // namespace hexiseq::testing
