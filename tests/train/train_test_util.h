// Helpers for the trainer tests: a tiny Llama spec, and running a Trainer for a plan over the
// in-process transport, collecting the step-0 loss and gradients and a loss curve from rank 0.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "spec/model.h"
#include "train/trainer.h"

namespace hexiseq::testing {

// 2 layers, hidden 64, 8 heads of 8 sharing 2 KV heads, SwiGLU 128, byte vocab.
ModelSpec TinyLlama(int heads = 8, int kv_heads = 2);

struct TrainRun {
  std::string error;  // first error of any rank, empty on success
  double loss0 = 0;   // loss of the gradient batch
  double recall0 = 0;
  std::map<std::string, std::vector<float>> grads;  // rank 0's all-reduced gradients
  std::vector<float> grads_max_rank_diff;           // per parameter, max |rank r - rank 0|
  std::vector<double> losses;                       // losses of `steps` Step() calls
};

// `plan` (one replica, as the shared test plans are: made for batch 1) set to train `batch`
// sequences a step, which the trainer requires to agree with --batch.
Plan WithBatch(Plan plan, int batch);

// Runs plan.num_ranks in-process ranks: ComputeGradients on sequences 0..batch-1 of the data,
// then `steps` optimizer steps from fresh weights (a second Trainer). A one-replica plan is
// trained with options.batch (WithBatch); a plan with several replicas with its own batch.
// grads and losses come from world rank 0, or the first participating rank when it is left out.
TrainRun RunTraining(const Plan& plan, const ModelSpec& model, const train::TrainOptions& options,
                     int steps);

// max |a - b| / max |b| over the tensor.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace hexiseq::testing
