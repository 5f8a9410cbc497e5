// Builds the simulator's dependency graphs from a Plan: `explicit_layers` transformer layers,
// forward (F), full-recompute forward (R, when the workload recomputes everything) and backward
// (B), in training order F1..Fk (and F(k+1) when the model has more layers), Rk Bk, ..., R1 B1;
// and one gradient-synchronisation bucket.
// Every message comes from the plan's LayerSchedule (plan/layer_schedule.h), so the simulator
// sends what the runtime sends. Per layer and rank: QKV GEMMs -> ragged all-to-all (Q, K, V) ->
// attention on the diagonal block while K/V blocks follow their chains (primary to primary,
// forwarded as soon as received, copied to replicas) -> one attention op per visiting block ->
// all-to-all (O, LSE) -> O + MLP GEMMs. Backward is the same pass in the other direction; each
// group's dK/dV of a block (replicas' partials summed at the primary) follows the schedule's
// route (LayerSchedule::DkvTarget), sums over one link leaving in the order they are computed.
// Ignored: norms/RoPE/softmax FLOPs, optimizer step, memory allocation (the cost model's
// memory figures decide feasibility).
#pragma once

#include <memory>
#include <vector>

#include "cost/cost_model.h"
#include "plan/layer_schedule.h"
#include "plan/plan.h"
#include "sim/engine.h"

namespace hexiseq::sim {

struct GraphOptions {
  // Layers built explicitly (forward, recompute, backward); the iteration scales them. When the
  // model has more layers, one more forward is built: the iteration's first layer starts on every
  // rank at once, every later one on each rank when its previous layer ends there, and that
  // staggered start changes how the ring's blocks overlap (PassMarks::weight counts the first
  // forward once and the others for the model's remaining layers).
  int explicit_layers = 1;
  DkvRoute dkv_route = kDkvRoute;  // the schedule's policy; the other only to measure the choice
};

// Per pass, per rank: the ops that end the pass's phases (-1 for ranks without work).
struct PassMarks {
  Pass pass = Pass::kForward;
  int layer = 0;
  // How many of the model's passes of this kind this explicit pass stands for: 1 for the first
  // forward, (layers - 1) / (forwards - 1) for the other forwards, layers / explicit_layers for
  // the recompute and backward passes (the weights of a kind sum to the model's layers).
  double weight = 1;
  std::vector<int> start;      // the op the pass starts after (previous pass end), or -1
  std::vector<int> local_in;   // head layout ready (all-to-all in done)
  std::vector<int> ring_done;  // attention (and dK/dV returns) done
  std::vector<int> end;        // the pass's last op on the rank
};

struct LayerGraph {
  std::vector<PassMarks> passes;
  std::vector<double> head_seconds;  // per rank, LM head forward + backward, one sequence
  int num_segments = 0;              // KV segments after merging heads with equal ownership
};

// All passes of the explicit layers in one engine, each rank's pass after its previous one.
// REQUIRES: Validate(plan, cost.cluster(), cost.model()) succeeded; engine is empty and uses
// cost.cluster().
LayerGraph BuildLayerGraph(const Plan& plan, const CostModel& cost, const GraphOptions& options,
                           Engine& engine);

// The same passes (the same operations and messages), one engine per pass, so that only one
// pass is held at a time (the simulator's path at scale). Pass `index` (training order: F1..Fk,
// then from the last layer (R) B) starts on each active rank at start_ns[rank], the previous
// pass's end there. What this leaves out: a pass's last outbound all-to-all messages still in
// flight when a rank starts the next pass no longer share ports with it.
// REQUIRES: as BuildLayerGraph; plan and cost outlive the builder.
class LayerGraphBuilder {
 public:
  LayerGraphBuilder(const Plan& plan, const CostModel& cost, const GraphOptions& options);
  ~LayerGraphBuilder();
  int num_passes() const;
  // REQUIRES: engine empty; start_ns has one entry per rank.
  PassMarks AddPass(int index, Engine& engine, const std::vector<int64_t>& start_ns);
  LayerGraph Summary() const;  // head_seconds and num_segments; no passes

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One reduce-scatter pass of one layer's gradient bucket, the cost model's hierarchical
// algorithm (CostModel::GradSyncPassSeconds) message by message: a ring inside every node, a
// barrier, then a ring over the nodes with all GPUs of a node sending at once. An all-gather pass
// is the same messages reversed; the simulator scales this pass by CostModel::GradSyncPasses().
// Every rank of the cluster takes part.
void BuildGradSyncGraph(const CostModel& cost, Engine& engine);
// Only `participants` take part (sorted, distinct world ranks; a plan's ParticipatingRanks): the
// ring inside each node runs over its participating GPUs, the ring over the nodes skips nodes
// with none, and node sizes are the participating GPUs. Left-out ranks send and receive nothing.
void BuildGradSyncGraph(const CostModel& cost, const std::vector<int>& participants,
                        Engine& engine);

}  // namespace hexiseq::sim
