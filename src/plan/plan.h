// The plan: HexiSeq's central value type. Which data-parallel replicas there are and how many
// sequences of the batch each takes, which ranks are left out, and inside each replica which
// ranks form each all-to-all (HP) group, which token ranges each group and each member own, and
// which query heads each member computes. It is data, not code: the planner emits it, the cost
// model and simulator score it, the runtime executes it. Serialized as JSON with
// "format": "hexiseq.plan/2" (docs/design.md); "hexiseq.plan/1" files (no replicas) still load,
// as one replica over every rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/ranges.h"
#include "spec/cluster.h"
#include "spec/error.h"
#include "spec/model.h"

namespace hexiseq {

inline constexpr const char* kPlanFormat = "hexiseq.plan/2";
inline constexpr const char* kPlanFormatV1 = "hexiseq.plan/1";  // read only: one replica

struct PlanMember {
  int rank = 0;
  std::string device;      // informative; validate() checks it against the cluster when non-empty
  int node = -1;           // informative: the rank's node; -1 when not given (not written)
  Ranges tokens;           // tau_r, inside the group's tokens
  std::vector<int> heads;  // eta_r, sorted query-head ids
  bool operator==(const PlanMember&) const = default;
};

struct PlanGroup {
  std::vector<int> ranks;  // the all-to-all group, in member order
  Ranges tokens;           // Sigma_k
  std::vector<PlanMember> members;
  int replica = 0;  // the data-parallel replica the group belongs to
  bool operator==(const PlanGroup&) const = default;
};

struct RankPrediction {
  int rank = 0;
  double memory_bytes = 0;
  double memory_capacity_bytes = 0;  // capacity * (1 - reserve)
  double compute_seconds = 0;        // per iteration
  double exposed_comm_seconds = 0;   // per iteration
  double total_comm_seconds = 0;     // per iteration
  bool operator==(const RankPrediction&) const = default;
};

struct PlanPrediction {
  double iteration_seconds = 0;
  double tokens_per_second = 0;
  std::vector<RankPrediction> ranks;
  bool operator==(const PlanPrediction&) const = default;
};

struct Plan {
  std::string format = kPlanFormat;
  std::string strategy;  // "hexiseq", "ring", "ulysses", "usp", "hetero-ring", "subset", ...
  std::string config;    // human-readable configuration, e.g. "cp=4 hp=4 hp-in-node"
  std::string model;     // model name
  int64_t seq_len = 0;
  int batch = 1;  // sequences per iteration, over all replicas
  std::string recompute = "full";
  std::string dtype = "bf16";  // activations and gradients (ParseDtype); written when not bf16
  int zero_stage = 3;          // sharded over the participating ranks (every rank not left out)
  int num_heads = 0;
  int num_kv_heads = 0;
  int num_ranks = 0;
  // Every replica's groups, replica by replica (PlanGroup::replica never decreases); inside a
  // replica the group order is the ring order of its sub-rings.
  std::vector<PlanGroup> groups;
  // Sequences per iteration of each replica (sums to batch). Empty: one replica with `batch`.
  std::vector<int> replica_sequences;
  std::vector<int> left_out;  // sorted ranks in no replica: no state, no gradient sync
  std::optional<PlanPrediction> predicted;
  std::string planner;     // provenance: planner name and version
  std::string input_hash;  // provenance: hash of cluster + model + workload
  // provenance: the planner's time limit cut its search short; this is the best plan it had
  // found by then (written only when true).
  bool time_limit_reached = false;
  bool operator==(const Plan&) const = default;
};

// JSON in and out. ParsePlanJson checks every field's type and range (spec/limits.h), unknown
// and repeated keys, nesting depth and size, and reports the file and JSON path of a bad field.
// LoadPlan reads only regular files of at most kMaxPlanFileBytes.
std::string PlanToJson(const Plan& plan, int indent = 2);
Result<Plan> ParsePlanJson(const std::string& text, const std::string& source_name);
Result<Plan> LoadPlan(const std::string& path);
Result<void> SavePlan(const Plan& plan, const std::string& path);

// A stable 64-bit FNV-1a hash of the plan's groups, tokens and heads (not of `predicted` or
// provenance); the runtime uses it to check that every rank loaded the same plan.
uint64_t PlanHash(const Plan& plan);

// Checks every invariant of DESIGN.md against the cluster and model; the error message lists
// each violation on its own line (which tokens are missing or overlap, which head is missing in
// which group, which rank appears twice, ...).
Result<void> Validate(const Plan& plan, const Cluster& cluster, const ModelSpec& model);
// Invariants that need only the plan itself (used by the runtime, which has no cluster).
Result<void> ValidateStructure(const Plan& plan);

// Replicas. A plan with replica_sequences empty has one replica that takes the whole batch.
int NumReplicas(const Plan& plan);
int ReplicaSequences(const Plan& plan, int replica);
// The ranks that take part (in some group, so in some replica), sorted.
std::vector<int> ParticipatingRanks(const Plan& plan);
// Replica `replica` as a one-replica plan over the same cluster: its groups (in order), batch =
// its sequences, every other rank left out, no prediction. REQUIRES 0 <= replica < NumReplicas.
Plan ReplicaPlan(const Plan& plan, int replica);
// Every replica's ReplicaPlan, in replica order (the plan's fields copied once).
std::vector<Plan> ReplicaPlans(const Plan& plan);
// A plan made for a part of the cluster (its rank r is world rank world_ranks[r]) as a plan over
// `num_ranks` world ranks: groups renumbered, every world rank outside it left out, no
// prediction. REQUIRES world_ranks.size() == plan.num_ranks, distinct ranks in [0, num_ranks).
Plan EmbedPlan(const Plan& plan, const std::vector<int>& world_ranks, int num_ranks);
// The inverse of ReplicaPlan: one-replica plans over the same world ranks (ReplicaPlan or
// EmbedPlan form) as the replicas of one plan, in order; each plan's batch is its replica's
// sequences, batch is their sum, ranks in none are left out, configs joined by " | ".
// REQUIRES: non-empty; equal num_ranks; no rank in two of them.
Plan MergeReplicas(const std::vector<Plan>& replicas);

// The query-head ids whose KV head is g: [g * H/G, (g+1) * H/G).
inline int KvHeadOf(int head, int num_heads, int num_kv_heads) {
  return head / (num_heads / num_kv_heads);
}
// Distinct KV heads needed by a head set (sorted).
std::vector<int> KvHeadsOf(const std::vector<int>& heads, int num_heads, int num_kv_heads);

}  // namespace hexiseq
