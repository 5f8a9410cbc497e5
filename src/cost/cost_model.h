// The analytical cost model: predicted iteration time, per-rank compute / communication / memory
// of a Plan on a Cluster for a Model and Workload. Closed forms, no per-token loops, so the
// scheduler can call it hundreds of thousands of times; groups are scored independently
// (GroupCost) and combined, so a move that touches two groups re-scores only those groups and
// their ring neighbours.
//
// Per layer, per group k (members r, tokens Sigma_k, heads eta_r), time runs in two alternating
// phases that each wait for the slowest group:
//   local  = reverse all-to-all (O) + linear layers on s_r tokens + all-to-all (Q, K, V)
//   ring   = sub-ring attention: max(attention compute, busiest port + last block, the blocks'
//            chains in steady state (RingChainOf))
// Backward: linear 2x, attention 2.5x, all-to-all bytes the same; K/V go round again and each
// block's dK/dV sum travels along its chain to the owner (the layer schedule's policy), on the
// same per-rank ports (NVLink / NIC, send / receive). Sub-ring bytes and links are the schedule's
// (GroupChainTraffic). Full recompute adds one forward; selective recomputes the MLP forward. The
// chains make a group's ring term depend on the other groups' token ranges too; the scheduler's
// incremental re-scoring ignores that second-order change for groups a move does not touch (the
// final plan is scored in full).
// Iteration = batch x layers x (fwd + bwd + recompute) + LM head + exposed gradient sync +
// optimizer step (OptimizerStepSeconds).
// Data-parallel replicas: each replica's share of the batch is scored as a one-replica plan
// (ReplicaPlan); the iteration is the slowest replica's busy time plus the gradient sync over
// every participating rank that the replicas' joint sync window does not hide (a bucket is ready
// when the last replica has produced it; ReplicasSyncWindowSeconds), plus the optimizer step.
// Under ZeRO-3 every participant gathers and reduce-scatters once per sequence of the replica
// with the most sequences. Left-out ranks hold no state and take no part in the sync; ZeRO
// shards model state over the participating ranks.
//
// Deliberately ignored: kernel launch overheads, NIC sharing between GPUs of a node (each GPU has
// its own NIC), the overlap of K/V and dK/dV transfers on one port (their times add),
// norms/RoPE/softmax FLOPs (< 1%).
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cost/ring_chain.h"
#include "plan/plan.h"
#include "spec/cluster.h"
#include "spec/model.h"
#include "spec/problem.h"

namespace hexiseq {

// Named constants of the model (not magic numbers inline).
struct CostConstants {
  double attention_backward_factor = 2.5;  // FlashAttention backward / forward FLOPs
  double linear_backward_factor = 2.0;     // dX and dW GEMMs
  int64_t loss_chunk_tokens = 8192;        // chunked cross-entropy: logits live for this many
  double weight_bytes_per_param = 2;       // bf16 weights
  double optimizer_bytes_per_param = 12;   // fp32 master + Adam m and v
  int ring_buffers = 2;                    // double-buffered K/V (and dK/dV) blocks
  // Memory traffic of one parameter's optimizer step (AdamW), which runs after the gradient
  // sync at the device's memory bandwidth: it reads and writes the fp32 master weight, m and v
  // (2 x 12 bytes), reads the bf16 gradient and writes the bf16 weight (2 + 2). In fp32 training
  // it reads the weight, gradient, m and v and writes the weight, m and v: 7 x 4, the same 28.
  double optimizer_step_bytes_per_param = 28;
};

// FLOPs charged for one sequence's linear phase on `tokens` rows: every layer's GEMMs (forward,
// backward, recompute) and the LM head (forward, backward). CostModel::TotalLinearFlops is this
// x batch; calibrate's linear probes count their points with it.
double LinearPhaseFlops(const ModelSpec& model, Recompute recompute, int64_t tokens,
                        const CostConstants& constants = {});

struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0;  // model state, by ZeRO stage
  double activations = 0;        // token-layout activations kept for backward (by recompute)
  double attention_working = 0;  // head-layout Q, K, V, O, dO, dQ, dK, dV of the group's tokens
  double ring_buffers = 0;       // in-flight K/V and dK/dV blocks
  double logits = 0;             // chunked loss
  double total() const {
    return weights + gradients + optimizer + activations + attention_working + ring_buffers +
           logits;
  }
};

// Per-rank figures, per iteration (seconds) unless stated.
struct RankCost {
  int rank = 0;
  int group = -1;
  double linear_seconds = 0;        // GEMMs incl. backward and recompute, LM head
  double attention_seconds = 0;     // attention compute incl. backward and recompute
  double all_to_all_seconds = 0;    // this rank's all-to-all transfers (not overlapped)
  double ring_comm_seconds = 0;     // total sub-ring traffic time
  double ring_exposed_seconds = 0;  // the part of it not hidden behind attention compute
  double grad_sync_seconds = 0;     // exposed gradient synchronization
  double compute_seconds() const { return linear_seconds + attention_seconds; }
  double exposed_comm_seconds() const {
    return all_to_all_seconds + ring_exposed_seconds + grad_sync_seconds;
  }
  double total_comm_seconds() const {
    return all_to_all_seconds + ring_comm_seconds + grad_sync_seconds;
  }
  MemoryBreakdown memory;
  double memory_bytes = 0;
  double memory_capacity_bytes = 0;  // capacity x (1 - reserve)
};

// One group's contribution to each phase, per layer (seconds), and its members.
struct GroupCost {
  double local_fwd = 0, ring_fwd = 0;  // forward phases
  double local_bwd = 0, ring_bwd = 0;  // backward phases
  double recompute = 0;                // selective recompute: the MLP forward again
  double lin_fwd = 0, a2a = 0, attn_compute_fwd = 0, ring_comm_fwd = 0;  // slowest member's parts
  // Inputs of the blocks' chains (RingChainBounds, in Combine): the slowest member's forward
  // attention seconds per causal (query, key) pair, and the seconds per token of block in which
  // the primaries copy a visiting block to the slowest-fed replica (0 without replicas).
  double seconds_per_pair = 0, replica_seconds_per_token = 0;
  // Inputs of the averaged chain (rings of more than kChainRecurrenceMaxGroups groups): seconds
  // per token of block on the slowest incoming ring link, its latency, and the largest compute
  // on one final block.
  double chain_seconds_per_token = 0, chain_latency = 0, last_block_fwd = 0;
  double head_seconds = 0;  // LM head fwd + bwd for the group's slowest member
  double max_memory_fraction = 0;
  int worst_memory_rank = -1;
  std::vector<RankCost> members;  // per-rank, but phase-level fields filled per layer x layers
};

struct PlanCost {
  double iteration_seconds = 0;
  double tokens_per_second = 0;
  bool feasible = true;
  std::string infeasible_reason;  // which rank, needs how much, has how much, hint
  double max_memory_fraction = 0;
  int bottleneck_rank = -1;
  std::string bottleneck_phase;  // "attention compute", "ring communication", ...
  // Per-iteration totals of each phase (the slowest group per phase, summed over layers).
  double local_seconds = 0, ring_seconds = 0, recompute_seconds = 0, head_seconds = 0,
         grad_sync_seconds = 0;
  double optimizer_seconds = 0;   // the optimizer step after the sync (OptimizerStepSeconds)
  double ring_chain_seconds = 0;  // per layer, forward: the last K/V block's arrival (chains)
  // Per replica, its busy time: its sequences' compute and communication, before the exposed
  // gradient sync (the iteration is the largest of these + grad_sync_seconds +
  // optimizer_seconds).
  std::vector<double> replica_busy_seconds;
  // Of the slowest replica's busy time, the part the gradient sync hides behind
  // (CostModel::ReplicasSyncWindowSeconds; one replica: SyncWindowSeconds).
  double sync_window_seconds = 0;
  // The forward of one sequence, all layers, of the replica that finishes it first: what ZeRO
  // 1-2's weight all-gather can hide behind (CostModel::StageExposedSyncSeconds).
  double forward_window_seconds = 0;
  std::vector<RankCost> ranks;  // indexed by rank
};

// The cost model of one Problem: Evaluate, plus the incremental interface and the terms the
// scheduler and the simulator share. Holds its own copy of the problem; cheap to construct.
class CostModel {
 public:
  // REQUIRES: ValidateProblem(problem) succeeded.
  explicit CostModel(Problem problem, CostConstants constants = {});
  CostModel(const Cluster& cluster, const ModelSpec& model, const Workload& workload,
            CostConstants constants = {});

  // Full evaluation, any number of replicas. REQUIRES: Validate(plan, cluster, model) succeeded.
  PlanCost Evaluate(const Plan& plan) const;

  // Incremental interface, for one-replica plans (left-out ranks allowed). The ring order is the
  // plan's group order, skipping groups without tokens. A group's cost depends on itself, its ring
  // neighbours and two plan-wide figures.
  struct RingContext {
    int prev = 0, next = 0;        // ring neighbours (== group when alone or idle)
    int ring_size = 1;             // groups that hold tokens
    int64_t max_group_tokens = 0;  // largest |Sigma_k|: sizes the ring buffers
  };
  static std::vector<RingContext> RingContexts(const Plan& plan);
  class ChainIndex;  // every group's sub-ring traffic (below)
  // `chains`: ChainIndex::Build of `plan` as it is now.
  GroupCost EvaluateGroup(const Plan& plan, int group, const RingContext& ring,
                          const ChainIndex& chains) const;
  // Combines group costs (one per plan group, in plan order) into the plan's cost.
  PlanCost Combine(const Plan& plan, const std::vector<GroupCost>& groups) const;
  // The blocks' chains' floor on both ring phases, per layer (Combine and the scheduler's
  // incremental score both apply it): for rings of up to kChainRecurrenceMaxGroups groups the
  // steady-state recurrence (RingChainBounds), `seconds` the latest block arrival; for longer
  // rings, whose recurrence costs O(groups^2) per evaluation, the largest block's
  // store-and-forward chain averaged over the ring links (AveragedChain), `seconds` that chain.
  // `bounds` is false for a ring of one group.
  struct RingChain {
    bool bounds = false;
    double seconds = 0;
    double ring_fwd_floor = 0, ring_bwd_floor = 0;
    double recompute_and_bwd_floor = 0;  // full recompute: ChainBounds::recompute_and_bwd
    // Raises a layer's ring phases (the groups' slowest) to the floors; the recompute forward's
    // ring phase is the forward's, so the backward takes what the pair's floor leaves.
    void Raise(double& ring_fwd, double& ring_bwd) const {
      ring_fwd = std::max(ring_fwd, ring_fwd_floor);
      ring_bwd = std::max({ring_bwd, ring_bwd_floor, recompute_and_bwd_floor - ring_fwd});
    }
  };
  static constexpr int kChainRecurrenceMaxGroups = 64;
  RingChain RingChainOf(const Plan& plan, const std::vector<GroupCost>& groups) const;

  // The aggregate-compute bound: the least time in which the cluster's devices could do the
  // iteration's linear and attention FLOPs at their effective rates (a device with a rate curve
  // at its fastest point), each device free to split its time between the two kinds (a
  // fractional-knapsack LP). Ignores communication and memory.
  double IdealIterationSeconds() const;
  double IdealTokensPerSecond() const;

  // A rank's compute rates in FLOP/s: its GEMMs on a shard of `tokens` tokens, and its attention
  // when its kernels run `query_tokens` query rows per head: its group's tokens (a group's
  // all-to-all gives every member the group's whole shard for its heads). The device's rate
  // curve (DeviceSpec::rate_curve) read at those sizes; its plain rates when it has none.
  double LinearRate(int rank, int64_t tokens) const;
  double AttentionRate(int rank, int64_t query_tokens) const;

  // Per-iteration FLOPs (with recompute and backward) of the whole model over the sequence.
  double TotalLinearFlops() const;
  double TotalAttentionFlops() const;

  // Model-state memory per rank (weights + gradients + optimizer) for the ZeRO stage, sharded
  // over `shard_ranks` ranks (default: every rank of the cluster).
  MemoryBreakdown ModelStateMemory() const;
  MemoryBreakdown ModelStateMemory(int shard_ranks) const;
  // The ranks the plan shards model state over: workload().shard_ranks, else its participants.
  int ShardRanks(const Plan& plan) const;

  // Bytes member i sends to member j in the group's all-to-all: inbound (token -> head layout)
  // carries Q[tau_i, eta_j] and K, V[tau_i, kv(eta_j)]; outbound carries O[tau_j, eta_i] back.
  // Indexed [i][j] by member position; the diagonal stays local (0).
  std::vector<std::vector<double>> AllToAllBytes(const PlanGroup& group, bool inbound) const;

  // The layer schedule's sub-ring traffic of one group, in tokens of blocks (the schedule's
  // chains skip every group with no causal pair, and dK/dV sums travel along the chain, DkvRoute
  // kAlongChain). A block of t tokens is t x 2 x head_dim x bytes per KV head it carries. Traffic
  // is listed per peer group (plan group index), so that every block is charged to the link it
  // crosses.
  struct PeerTraffic {
    int group = 0;       // plan group index of the peer
    int64_t tokens = 0;  // tokens of the blocks exchanged with it
    int blocks = 0;      // messages (one per block)
  };
  struct ChainTraffic {
    std::vector<PeerTraffic> kv_from;    // K/V of visiting blocks, by the group they come from
    std::vector<PeerTraffic> kv_to;      // K/V passed on (its own included), by the next group
    std::vector<PeerTraffic> sums_from;  // dK/dV sums fed along a chain, by the previous group
    std::vector<PeerTraffic> sums_to;    // sums passed on to the next group of a chain, or (the
                                         // chains it ends) returned to their owner
    int64_t own_return = 0;              // its own block's total, from the last group of its chain
    int own_returner = -1;               // plan group index of that last group (-1: no chain)
    int64_t kv_in() const { return Total(kv_from); }
    int64_t kv_out() const { return Total(kv_to); }
    static int64_t Total(const std::vector<PeerTraffic>& list) {
      int64_t tokens = 0;
      for (const PeerTraffic& peer : list) tokens += peer.tokens;
      return tokens;
    }
  };
  // Every group's chain traffic of one plan, from the groups' first and last token positions:
  // Build is O(ring groups x log ring groups + ranges), then Traffic is O(log ring groups) per
  // peer it lists, so a whole ring of G groups costs O(G log G), not O(G^2). Origins whose first
  // key lies between the same two running maxima of the groups' last queries (going round the
  // ring from a group) pass through the same next group: Traffic sums them as one band.
  class ChainIndex {
   public:
    void Build(const Plan& plan);
    // REQUIRES: Build(plan) ran on the plan as it is now; group_index < plan.groups.size().
    // An idle group has no traffic.
    void Traffic(int group_index, ChainTraffic& out) const;

   private:
    struct Band {
      int64_t tokens = 0;
      int blocks = 0;
    };
    // The groups other than ring group `self` whose first key is in (below, top].
    Band BandOf(int64_t below, int64_t top, int self) const;
    struct Stop {
      int group = 0;     // plan group where the running maximum rises
      Band band;         // the origins whose blocks pass through it
      Band origin;       // of those, the stop itself (blocks 0 or 1)
      bool own = false;  // the band holds the walking group's own first key
    };
    template <typename Visit>
    void Walk(int self, bool forward, Visit&& visit) const;

    int ring_size_ = 0;
    std::vector<int> ring_of_group_;              // plan group -> ring position (-1: idle)
    std::vector<int> group_of_ring_;              // ring position -> plan group
    std::vector<int64_t> first_, last_, tokens_;  // per ring position
    std::vector<int64_t> sorted_first_;           // every ring group's first key, ascending
    std::vector<int64_t> tokens_before_;          // tokens of the groups before each in that order
    // Over the ring written twice (position p is ring group p mod ring_size_): the next position
    // after p whose last query is later (2 x ring_size_: none), and the previous one (-1: none).
    std::vector<int> next_later_, previous_later_;
  };
  // REQUIRES: group_index < plan.groups.size(). An idle group has no traffic. Builds an index of
  // the plan per call: to list every group, build a ChainIndex once.
  ChainTraffic GroupChainTraffic(const Plan& plan, int group_index) const;
  void GroupChainTraffic(const Plan& plan, int group_index, ChainTraffic& out) const;

  // Per-rank bytes of one direction's sub-ring phase as the model charges them, by world rank:
  // K/V blocks and replica copies, and (backward) dK/dV partials and sums. Tested against
  // BytesPerRank of the layer schedule.
  struct RingRankBytes {
    double kv_sent = 0, kv_received = 0, dkv_sent = 0, dkv_received = 0;
  };
  std::vector<RingRankBytes> RingBytesPerRank(const Plan& plan, bool backward) const;

  // Seconds to move `bytes` from rank a to rank b (alpha-beta).
  double TransferSeconds(int a, int b, double bytes) const;

  // The optimizer step, after the gradient sync and before the next iteration (nothing overlaps
  // it): every participant updates its shard of the optimizer state (ZeRO >= 1: the parameters
  // over ShardRanks(plan); else all of them), optimizer_step_bytes_per_param of memory traffic
  // per parameter at its device's memory bandwidth. The slowest participant's seconds (the
  // iteration's term), or one rank's (0 if left out); 0 where a device gives no bandwidth, and 0
  // for a replica scored alone (Workload::charge_optimizer_step; the whole plan charges it).
  double OptimizerStepSeconds(const Plan& plan) const;
  double OptimizerStepSeconds(const Plan& plan, int rank) const;
  // The memory traffic of one participant's optimizer step (the rule above, before the bandwidth).
  double OptimizerStepBytes(const Plan& plan) const;

  // Gradient synchronisation, hierarchical as NCCL does across nodes. One layer's gradients form
  // a bucket of GradBucketBytes(). A reduce-scatter pass is (A) a ring over each node's GPUs
  // (g - 1 steps of bucket / g bytes, every node at once) and then (B) a ring over the nodes in
  // cluster order, all GPUs of a node sending at once (N - 1 steps; GPU j of node i sends its
  // bucket / (N g_i) share to GPU j mod g_{i+1} of the next node); an all-gather is the same two
  // phases reversed, so it takes as long. Phases are separated by barriers. Under ZeRO-3 a bucket
  // makes three passes per sequence (all-gather forward, all-gather backward, reduce-scatter),
  // else two (a reduce-scatter and an all-gather; how often: SyncBuckets).
  // Only the participating ranks take part: `node_ranks[i]` of node i (NodeParticipants), nodes
  // with none skipped; the default is every rank.
  double GradBucketBytes() const;
  int GradSyncPasses() const;
  std::vector<int> NodeParticipants(const Plan& plan) const;  // participating ranks per node
  double GradSyncPassSeconds() const;  // one pass of one bucket: slowest node's A + B
  double GradSyncPassSeconds(const std::vector<int>& node_ranks) const;
  double GradSyncTotalSeconds() const;  // every bucket of an iteration, not overlapped
  // The sync of a plan: SyncTotalSeconds of its bucket over its participants and its rounds.
  double GradSyncTotalSeconds(const Plan& plan) const;
  // Whether each sequence syncs on its own (ZeRO >= 2): its gradients are reduce-scattered after
  // its backward (each owner accumulates them), as DeepSpeed's stage 2 keeps only a shard of the
  // gradients; ZeRO 3 also gathers its weights for its forward and for its backward. Every
  // participant takes part in every round, so the replica with the most sequences sets the rounds.
  // Lower stages accumulate whole gradients and sync once per iteration.
  bool SyncsEverySequence() const;
  // The sync rounds of an iteration whose busiest replica takes `most_sequences`.
  double SyncRoundsOf(int most_sequences) const;
  // The buckets' passes of `rounds` rounds, in whole buckets (GradSyncPasses passes each): ZeRO 3
  // all three passes per round; ZeRO 2 a reduce-scatter per round and one all-gather after the
  // optimizer step ((rounds + 1) / 2); lower stages one all-reduce.
  double SyncBuckets(double rounds) const;
  // Every bucket's passes over all layers for `rounds` rounds, none hidden, given one bucket's.
  double SyncTotalSeconds(double bucket_seconds, double rounds) const;
  // The most a plan whose participants are every rank saves at ZeRO 1 against ZeRO 2 (the same
  // plan, the rest of the workload the same): the reduce-scatters of all but one sequence, each
  // exposing `max(pass, layers * pass - window)` (StageExposedSyncSeconds), the window no shorter
  // than LeastBackwardWindowSeconds.
  double WholeGradientsSavingBound() const;
  // A lower bound on any plan's sync window at ZeRO 0-2 (SyncWindowSeconds,
  // ReplicasSyncWindowSeconds: at least the shortest replica's backward of one sequence): the
  // layers' backward GEMMs and attention of one sequence on every device at once, each at its
  // fastest rate, the two phases one after the other as every group runs them.
  double LeastBackwardWindowSeconds() const;
  // One bucket's passes over the plan's participants (the part of the sync never hidden).
  double GradSyncBucketSeconds(const Plan& plan) const;
  // The overlap rule of the sync (the cost model, the scheduler's incremental score and the
  // simulator all apply it): of `total_seconds` of sync, what `busy_seconds` of compute do not
  // hide, and at least the last bucket.
  static double ExposedSyncSeconds(double bucket_seconds, double total_seconds,
                                   double busy_seconds);
  // The compute the sync can hide behind (the `busy_seconds` of ExposedSyncSeconds), given a
  // replica's busy time and its backward (the backward and recompute phases of one sequence,
  // every layer). Under ZeRO-3 every sequence gathers and reduce-scatters during its own
  // passes: all of the busy time. Otherwise earlier sequences only accumulate, and gradients
  // exist once the last sequence's backward produces them, layer by layer: that backward (as
  // `train` starts its all-reduces, and as DDP and Megatron do with gradient accumulation).
  double SyncWindowSeconds(double busy_seconds, double backward_seconds) const;
  // The window of replicas that start together, from each one's busy time and SyncWindowSeconds:
  // a bucket is reduced once every replica has produced it, so the sync opens when the last
  // replica opens its window (the largest busy - window) and hides behind the compute from there
  // to the slowest replica's end. One replica: its own window.
  static double ReplicasSyncWindowSeconds(const std::vector<double>& busy_seconds,
                                          const std::vector<double>& window_seconds);
  // The forward window of replicas that start together after the optimizer step: the weights
  // must reach every replica, so the one with the shortest forward of one sequence sets it.
  static double ReplicasForwardWindowSeconds(const std::vector<double>& forward_seconds);
  // The overlap rule at the workload's ZeRO stage (the cost model, the scheduler's incremental
  // score and the simulator all apply it): ExposedSyncSeconds over the backward window, except at
  // ZeRO 1-2, where the second pass is the all-gather of the weights their owners updated, which
  // runs behind the next iteration's forward (`forward_seconds`); there the sync is charged the
  // lesser of that split (the reduce-scatter's exposure over the backward window plus the
  // all-gather's over the forward, at least one pass each) and both passes over the backward
  // window. The second term keeps ZeRO 1-2 no slower than ZeRO 0 for any plan, which the
  // configuration search relies on (training_search.h); it is optimistic by the all-gather's
  // excess over the forward where the forward is the shorter window (docs/cost_model.md). At
  // ZeRO 3 each of the `rounds` sequences exposes one bucket (`bucket_seconds`: its three passes):
  // the first gathered for its forward and for its backward and the last reduce-scattered after
  // it have nothing of that sequence to hide behind. At ZeRO 2 each sequence before the last adds
  // its reduce-scatter's exposure over the backward window (at least one pass of one bucket).
  // `total_seconds`: SyncTotalSeconds of `bucket_seconds` and `rounds`.
  double StageExposedSyncSeconds(double bucket_seconds, double total_seconds, double window_seconds,
                                 double forward_seconds, double rounds) const;
  // Sync rounds of a plan's iteration: SyncRoundsOf its busiest replica's sequences.
  double SyncRounds(const Plan& plan) const;

  const Problem& problem() const { return problem_; }
  const Cluster& cluster() const { return problem_.cluster; }
  const ModelSpec& model() const { return problem_.model; }
  const Workload& workload() const { return problem_.workload; }
  // InputHash(problem()), computed once; copies of the model share it.
  const std::string& InputHash() const;
  const CostConstants& constants() const { return k_; }

 private:
  struct GroupScratch;  // per-thread work arrays of EvaluateGroup (cost_model.cc)
  // The phases of EvaluateGroup, in order; each fills its part of `out` from `scratch`.
  void LocalPhase(const PlanGroup& group, GroupScratch& scratch, GroupCost& out) const;
  void RingPortTimes(const Plan& plan, int group_index, const RingContext& ring,
                     const ChainIndex& chains, GroupScratch& scratch, GroupCost& out) const;
  void DkvSumTimes(const Plan& plan, int group_index, int kv_head, GroupScratch& scratch) const;
  int PeerPrimary(const Plan& plan, int group_index, int kv_head, GroupScratch& scratch) const;
  void MemberFigures(const PlanGroup& group, const RingContext& ring, GroupScratch& scratch,
                     GroupCost& out) const;
  double StaggeredAllToAll(const PlanGroup& group, bool qkv, GroupScratch& scratch) const;
  void StaggeredLocal(const PlanGroup& group, GroupScratch& scratch, GroupCost& out) const;
  void ActivationMemory(int64_t tokens, int query_heads, int kv_heads, int64_t group_tokens,
                        const RingContext& ring, MemoryBreakdown& mem) const;

  double LinearForwardFlopsPerToken() const;  // all layers' GEMMs per token, one layer
  double KvBytesPerTokenPerKvHead() const;    // K and V, one KV head
  // The ring phase as the blocks' chains allow it, per layer (forward, backward; 0 for a ring
  // of one group): the steady-state recurrence of cost/ring_chain.h over the schedule's chains,
  // hop costs from HopSecondsPerToken.
  ChainBounds RingChainBounds(const Plan& plan, const std::vector<GroupCost>& groups) const;
  // The plan's ring as the recurrence walks it, into `ring` (reused storage); `ring_to_plan`:
  // the plan group index of each ring group.
  void BuildChainRing(const Plan& plan, const std::vector<GroupCost>& groups, ChainRing& ring,
                      std::vector<int>& ring_to_plan) const;
  // Seconds per token of block, and the latency, of a K/V (or dK/dV) hop between two groups:
  // every KV head goes primary to primary (world ranks per KV head, -1: none), the hop as slow
  // as its busiest send or receive port.
  std::pair<double, double> HopSecondsPerToken(const int* from_primaries,
                                               const int* to_primaries) const;
  // The averaged chain floor: (K - 1) / K x the largest block's tokens x the sum of the groups'
  // slowest incoming links, plus K - 1 latencies, then the last block's compute.
  RingChain AveragedChain(const Plan& plan, const std::vector<GroupCost>& groups) const;
  // Several replicas: each scored as a one-replica plan, then the sync over all participants.
  PlanCost EvaluateReplicas(const Plan& plan) const;
  // The replicas' figures into the plan's: `parts` per replica (filled for evaluated ones),
  // `members` each replica's ranks (sorted), `source` the evaluated replica each one copies
  // (itself if evaluated).
  PlanCost CombineReplicas(const Plan& plan, const std::vector<PlanCost>& parts,
                           const std::vector<std::vector<int>>& members,
                           const std::vector<int>& source) const;
  // The gradient sync not hidden behind `window_seconds` of compute (SyncWindowSeconds) and, at
  // ZeRO 1-2, `forward_seconds` (StageExposedSyncSeconds): all buckets of `rounds` rounds over
  // the plan's participants, at least the last bucket.
  double ExposedGradSync(const Plan& plan, double window_seconds, double forward_seconds,
                         double rounds) const;

  Problem problem_;
  CostConstants k_;
  LinkTable links_;  // problem_.cluster's links, for the inner loops
  struct HashMemo {
    std::once_flag once;
    std::string value;
  };
  std::shared_ptr<HashMemo> input_hash_ = std::make_shared<HashMemo>();
};

// The cost model as one function: the predicted cost of `plan` for `problem`.
// REQUIRES: ValidateProblem(problem) and Validate(plan, problem.cluster, problem.model) succeeded.
PlanCost Evaluate(const Problem& problem, const Plan& plan);

// Convenience: evaluates and writes the prediction into the plan.
void AttachPrediction(Plan& plan, const PlanCost& cost);

}  // namespace hexiseq
