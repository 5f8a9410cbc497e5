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

}  // namespace

TrainRun RunTraining(const Plan& plan, const ModelSpec& model, const train::TrainOptions& options,
                     int steps) {
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
    std::vector<train::Sequence> sequences;
    for (int index = 0; index < options.batch; ++index) {
      sequences.push_back((*trainer)->data().Get(index));
    }
    auto loss = (*trainer)->ComputeGradients(sequences);
    if (!loss) return fail(loss.error().message);
    comm.Barrier();  // rank 0 records first
    for (int rank = 0; rank < comm.size(); ++rank) {
      if (rank == comm.rank()) {
        std::lock_guard lock(mu);
        if (rank == 0) {
          run.loss0 = loss->loss;
          run.recall0 = loss->recall_loss;
        }
        RecordGradients(**trainer, run, rank);
      }
      comm.Barrier();
    }
    auto fresh = train::Trainer::Create(plan, model, options, comm);
    if (!fresh) return fail(fresh.error().message);
    for (int step = 0; step < steps; ++step) {
      auto report = (*fresh)->Step();
      if (!report) return fail(report.error().message);
      if (comm.rank() == 0) run.losses.push_back(report->loss);
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
