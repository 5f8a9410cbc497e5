// The simulator's entry point: executes a Plan message by message on the cluster model (see
// engine.h for the network, graph.h for the operations) and reports the iteration time,
// tokens/s and per-rank busy/idle/communication figures.
//
// Scaling: `explicit_layers` layers (default 1) are simulated forward, recompute and backward
// with every message and attention block, each pass in an engine of its own (LayerGraphBuilder),
// so only one pass's operations are held at a time; the iteration is
//   batch x (layers / explicit_layers x T_layers + T_lm_head) + exposed gradient sync,
// where the gradient sync of one layer's bucket is simulated as a ring over all ranks and the
// whole sync (layers x bucket, per sequence under ZeRO-3) overlaps the iteration except its last
// bucket. Sequences of a
// batch run one after another. Memory feasibility comes from the cost model's memory figures
// (the simulator does not model allocation).
#pragma once

#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "plan/plan.h"
#include "sim/engine.h"
#include "sim/graph.h"
#include "spec/error.h"

namespace hexiseq::sim {

struct SimOptions {
  int explicit_layers = 1;     // layers simulated explicitly (1..model layers)
  int nics_per_node = 0;       // 0: one NIC per GPU; k: the node's GPUs share k NICs
  bool keep_timeline = false;  // keep every op's timing (needed for the trace)
  // The schedule's dK/dV route; the default is the policy, the other is for measuring the choice.
  DkvRoute dkv_route = kDkvRoute;
};

struct SimRank {
  int rank = 0;
  std::string device;
  bool active = false;              // holds tokens
  double busy_seconds = 0;          // compute, per iteration
  double idle_seconds = 0;          // iteration - busy
  double comm_seconds = 0;          // some message of the rank in flight
  double exposed_comm_seconds = 0;  // ... while the rank does not compute
};

// One term of the iteration, per iteration, simulated and as the cost model predicts it.
struct SimTerm {
  std::string name;  // "local (linear + all-to-all)", "ring attention", "recompute", ...
  double model_seconds = 0;
  double sim_seconds = 0;
};

struct Timeline {
  std::vector<Op> layer_ops;
  std::vector<OpTiming> layer_timings;
  std::vector<Op> sync_ops;
  std::vector<OpTiming> sync_timings;
  std::vector<double> head_seconds;  // per rank
  int64_t layer_makespan_ns = 0;
};

struct SimResult {
  double iteration_seconds = 0;
  double tokens_per_second = 0;
  double layer_seconds = 0;            // simulated explicit layers, fwd + recompute + bwd
  double head_seconds = 0;             // LM head per sequence (slowest rank)
  double grad_bucket_seconds = 0;      // one layer's gradient bucket
  double grad_sync_total_seconds = 0;  // all buckets
  double grad_sync_exposed_seconds = 0;
  bool feasible = true;  // memory, from the cost model
  std::string infeasible_reason;
  int64_t events = 0;
  int64_t messages = 0;
  int64_t compute_ops = 0;
  int segments = 0;
  std::vector<SimRank> ranks;
  std::vector<SimTerm> terms;  // filled against the cost model's PlanCost
  Timeline timeline;           // when keep_timeline
};

// REQUIRES nothing of the plan: it is validated first (kInvalidArgument with Validate's message).
// Options out of range give kInvalidArgument.
Result<SimResult> Simulate(const Plan& plan, const CostModel& cost, const SimOptions& options = {});

// The term whose simulated and modelled values differ most (absolute seconds).
const SimTerm* LargestDisagreement(const SimResult& result);

// Kendall's tau-a between two score lists (same length >= 2): +1 same order, -1 reversed.
double KendallTau(const std::vector<double>& a, const std::vector<double>& b);

// JSON: {"iteration_seconds", "tokens_per_second", "ranks": [...], ...}; stable formatting.
std::string SimResultToJson(const SimResult& result);

}  // namespace hexiseq::sim
