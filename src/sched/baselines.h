// Baseline plans, each at its strongest, and the building blocks every strategy shares:
// zigzag (head + tail) sequence placement balanced for causal work, KV-aware largest-remainder
// head splits, proportional token splits. Every baseline is an ordinary Plan scored by the same
// CostModel, so comparisons are like for like. The baselines take the Problem; the building blocks
// below take the CostModel a search already holds (a replica's or a sub-cluster's).
//   ring        N groups of one rank, uniform zigzag shards (2N chunks), best ring order
//   ulysses     one group of all ranks, uniform heads (not applicable when heads don't divide)
//   usp         every CP x HP = N factorisation, HP inside nodes or CP inside nodes; the best
//   hetero-ring one rank per group, all heads, zigzag shards sized to attention speed,
//               memory-capped; one replica
//   subset      the best of ring/ulysses/usp on the fastest device types only; the others left
//               out (plan.left_out)
//   hexiseq     (proportional) groups = nodes, sequence by compute, tokens by GEMM speed, heads
//               by attention speed (the first HexiSeq strategy; the scheduler refines it)
// ring, ulysses, usp and subset also try every homogeneous data-parallel degree (data_parallel.h).
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "plan/plan.h"
#include "sched/deadline.h"

namespace hexiseq {

// One training configuration a strategy weighed: its data-parallel replicas, the ranks it left
// out, the ZeRO stage and the recompute policy, and how it scored.
struct TrainingOption {
  std::string name;  // e.g. "4 replicas (2 x 8 H100, 2 x 8 A100), zero 1, recompute selective"
  int replicas = 1;
  int left_out = 0;  // ranks left out
  int zero_stage = 3;
  std::string recompute = "full";
  double iteration_seconds = 0;
  bool feasible = false;
};

struct StrategyResult {
  std::string strategy;
  std::string config;      // e.g. "cp=4 hp=4 hp-in-node"
  bool applicable = true;  // false: `reason` says why (e.g. heads do not divide)
  std::string reason;      // not applicable / infeasible reason
  Plan plan;               // with `predicted` attached
  PlanCost cost;
  // The training configurations weighed, best first (the first is the plan's); empty when the
  // strategy had none to choose.
  std::vector<TrainingOption> options_considered;
  // The deadline passed before the strategy scored any plan (then not applicable; `reason` is
  // NotScoredReason).
  bool timed_out = false;
  // A search's fastest candidate that did not fit (its predicted or screened iteration time;
  // infinity when every candidate fit): a configuration that needs less memory may make it fit.
  double fastest_unfit_seconds = std::numeric_limits<double>::infinity();
  bool feasible() const { return applicable && cost.feasible; }
};

// The training configuration of a scored result (name = its config).
TrainingOption OptionOf(const StrategyResult& result);

// Better = feasible before infeasible, then lower iteration time, then lower memory fraction.
bool Better(const StrategyResult& a, const StrategyResult& b);

// ring, ulysses and usp try every homogeneous data-parallel degree (data_parallel.h); subset
// leaves the slower types out (plan.left_out) and tries every degree on the rest; hetero-ring is
// one replica. Each checks `deadline` before each degree, factorisation, subset or memory-cap
// round and returns the best scored before it passed (NotScored when none was).
StrategyResult RingBaseline(const Problem& problem, const Deadline& deadline = {});
StrategyResult UlyssesBaseline(const Problem& problem, const Deadline& deadline = {});
StrategyResult UspBaseline(const Problem& problem, const Deadline& deadline = {});
StrategyResult HeteroRingBaseline(const Problem& problem, const Deadline& deadline = {});
StrategyResult SubsetBaseline(const Problem& problem, const Deadline& deadline = {});
StrategyResult ProportionalPlan(const CostModel& model);  // strategy "hexiseq" until the scheduler
// Whether every plan the baseline `strategy` makes has every rank take part (all but subset,
// which leaves the slower types out).
bool BaselineUsesEveryRank(const std::string& strategy);

// ring, ulysses, usp, hetero-ring, subset, in that order (NotScored for those the deadline
// stopped before they started), on up to `threads` threads (the same results on any number).
std::vector<StrategyResult> AllBaselines(const Problem& problem, const Deadline& deadline = {},
                                         int threads = 1);

// The result of a strategy that the deadline stopped before it scored a plan: not applicable,
// timed_out, reason NotScoredReason(deadline).
StrategyResult NotScored(const std::string& strategy, const Deadline& deadline);
// A baseline's plan as the result of search `strategy` (which returns a baseline when nothing it
// found is better): config "baseline <name> (<config>)".
StrategyResult AsSearchResult(StrategyResult baseline, const std::string& strategy);

// ---- Building blocks (also used by the scheduler).

// The one-replica plans behind ring, ulysses and usp: all of `model`'s cluster as one replica.
StrategyResult RingOneReplica(const CostModel& model);
StrategyResult UlyssesOneReplica(const CostModel& model);
StrategyResult UspOneReplica(const CostModel& model);

// Splits [0, S) among groups with weights w_k (>= 0) as zigzag head + tail chunks: group k gets
// [a_k, b_k) from the front and a mirrored chunk from the back, sized so that each group's causal
// work W(Sigma_k) is proportional to w_k (exactly, up to integer rounding). Groups with w_k = 0
// get no tokens. REQUIRES: some w_k > 0.
std::vector<Ranges> ZigzagSplit(int64_t seq_len, const std::vector<double>& weights);
// Uniform zigzag for `parts` equal shares (2 * parts chunks, Megatron-CP style).
std::vector<Ranges> UniformZigzag(int64_t seq_len, int parts);

// Carves a group's ranges into member shards with token counts proportional to weights
// (largest-remainder rounding, sums exactly to the group's tokens).
std::vector<Ranges> SplitTokens(const Ranges& group_tokens, const std::vector<double>& weights);

// Integer counts proportional to weights summing to `total` (largest remainder; deterministic
// ties by index).
std::vector<int64_t> LargestRemainder(int64_t total, const std::vector<double>& weights);

// Splits query heads 0..H-1 among members proportional to weights. KV-aware: whole KV groups
// by largest remainder when that keeps every member within half a KV group of its share;
// otherwise single heads by largest remainder (cutting KV groups). Heads are contiguous.
std::vector<std::vector<int>> SplitHeads(int num_heads, int num_kv_heads,
                                         const std::vector<double>& weights);
// SplitHeads' head count per member.
std::vector<int64_t> SplitHeadCounts(int num_heads, int num_kv_heads,
                                     const std::vector<double>& weights);

// Builds a plan shell for the cost model's cluster/model/workload (strategy, counts, no groups).
Plan EmptyPlan(const CostModel& model, const std::string& strategy);
// Appends a group: ranks, member token shards, member head sets. Fills device and node fields.
void AddGroup(Plan& plan, const Cluster& cluster, const std::vector<int>& ranks,
              const Ranges& group_tokens, const std::vector<Ranges>& member_tokens,
              const std::vector<std::vector<int>>& member_heads);
// Appends one idle group holding `ranks` (no tokens, no heads).
void AddIdleGroup(Plan& plan, const Cluster& cluster, const std::vector<int>& ranks);

// Scores the plan, attaches the prediction and wraps it.
StrategyResult Score(const CostModel& model, Plan plan, const std::string& config);

}  // namespace hexiseq
