// The simulator's entry point: executes a Plan message by message on the cluster model (see
// engine.h for the network, graph.h for the operations) and reports the iteration time,
// tokens/s and per-rank and per-replica busy/idle/communication figures.
//
// Scaling: `explicit_layers` layers (default 1) are simulated forward, recompute and backward
// with every message and attention block, each pass in an engine of its own (LayerGraphBuilder),
// so only one pass's operations are held at a time. The iteration's first layer starts on every
// rank at once and every later layer on each rank when its previous one ends there, which
// changes how blocks overlap in the ring, so one more forward is simulated: the first counts
// once, the others for the remaining layers - 1, the recompute and backward passes for layers /
// explicit_layers each (graph.h, PassMarks::weight). Data-parallel replicas: each replica is its
// one-replica plan (ReplicaPlan), and one engine per pass holds that pass of every replica, so
// replicas that share a resource (a node's NIC pool with `nics_per_node`) contend for it; one
// sequence of every replica runs at once (replicas are assumed busy side by side all iteration,
// which holds when the batch split follows their speeds). A replica's busy time is
//   sequences x (sum over passes of weight x T_pass + T_lm_head),
// its sequences one after another, and the iteration is the slowest replica's busy time plus the
// exposed gradient sync. One layer's gradient bucket is simulated message by message over the
// participating ranks only (ring inside each node over its participating GPUs, then a ring over
// the participating nodes); the whole sync (layers x bucket, under ZeRO-3 once per sequence of
// the replica with the most sequences) overlaps the compute in the replicas' joint window
// (CostModel::ReplicasSyncWindowSeconds of each replica's CostModel::SyncWindowSeconds: under
// ZeRO 0-2 its last sequence's simulated recompute and backward passes) except its last bucket;
// at ZeRO 1-2 the all-gather pass may hide behind the shortest simulated forward of one sequence
// instead (CostModel::StageExposedSyncSeconds).
// Left-out ranks do nothing (no compute, no message). Memory feasibility comes from the cost
// model's memory figures (the simulator does not model allocation).
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
  int replica = 0;                  // its data-parallel replica; -1: left out (idle all iteration)
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

// One data-parallel replica, simulated.
struct SimReplica {
  int replica = 0;
  int sequences = 0;              // per iteration
  std::vector<int> ranks;         // its ranks, sorted
  double layer_seconds = 0;       // its explicit passes' makespan, one sequence
  double all_layers_seconds = 0;  // all the model's layers, one sequence: passes x weights
  double head_seconds = 0;        // its LM head per sequence (slowest rank)
  double busy_seconds = 0;        // per iteration: sequences x (all layers + LM head)
  double backward_seconds = 0;    // its recompute and backward passes, one sequence
  double forward_seconds = 0;     // its forward passes, one sequence
};

struct SimResult {
  double iteration_seconds = 0;
  double tokens_per_second = 0;
  double layer_seconds = 0;            // the slowest replica's explicit passes' makespan
  double head_seconds = 0;             // the slowest replica's LM head per sequence
  double grad_bucket_seconds = 0;      // one layer's gradient bucket
  double grad_sync_total_seconds = 0;  // all buckets
  double grad_sync_exposed_seconds = 0;
  double optimizer_seconds = 0;  // the optimizer step (CostModel::OptimizerStepSeconds)
  bool feasible = true;          // memory, from the cost model
  std::string infeasible_reason;
  int64_t events = 0;
  int64_t messages = 0;
  int64_t compute_ops = 0;
  int segments = 0;
  std::vector<SimRank> ranks;
  std::vector<SimReplica> replicas;  // one per replica (one for a one-replica plan)
  int slowest_replica = 0;           // sets the iteration, the terms and layer/head seconds
  std::vector<int> left_out;         // the plan's left-out ranks
  std::vector<SimTerm> terms;        // the slowest replica's, against the cost model's PlanCost
  Timeline timeline;                 // when keep_timeline
};

// REQUIRES: ValidateProblem(problem) succeeded. Nothing of the plan: it is validated first
// (kInvalidArgument with Validate's message). Options out of range give kInvalidArgument.
Result<SimResult> Simulate(const Plan& plan, const Problem& problem,
                           const SimOptions& options = {});

// The term whose simulated and modelled values differ most (absolute seconds).
const SimTerm* LargestDisagreement(const SimResult& result);

// Kendall's tau-a between two score lists (same length >= 2): +1 same order, -1 reversed.
double KendallTau(const std::vector<double>& a, const std::vector<double>& b);

// JSON: {"iteration_seconds", "tokens_per_second", ..., "ranks": [{"rank", "device", "replica"
// (index or "left out"), "active", ...}], "replicas": [{"replica", "sequences", "ranks",
// "layer_seconds", "lm_head_seconds", "busy_seconds"}], "slowest_replica", "left_out", "terms"};
// stable formatting.
std::string SimResultToJson(const SimResult& result);

}  // namespace hexiseq::sim
