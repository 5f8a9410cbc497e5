// What a plan is made for: the cluster, the model and the workload. The scheduler, the simulator
// and the report take a Problem; the cost model is a function of (Problem, Plan) (cost/
// cost_model.h). A plain value: copying it copies the cluster's rank table (O(ranks)).
#pragma once

#include <string>

#include "spec/cluster.h"
#include "spec/error.h"
#include "spec/model.h"

namespace hexiseq {

struct Problem {
  Cluster cluster;
  ModelSpec model;
  Workload workload;
  bool operator==(const Problem&) const = default;
};

// The workload's ranges (ValidateWorkload) and the model's head counts (kv_heads >= 1 divides
// heads), as every consumer of a Problem REQUIRES. The readers (LoadModel, LoadCluster) already
// check their files; this is for problems built in code.
Result<void> ValidateProblem(const Problem& problem);

// A fingerprint of the problem (a plan's provenance, `input_hash`): FNV-1a over the inputs that
// determine a plan, 16 hex digits.
std::string InputHash(const Problem& problem);

}  // namespace hexiseq
