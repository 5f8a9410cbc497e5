// The scheduler's search over data-parallel replicas and left-out ranks, on top of the one-replica
// search (RunScheduler). Candidates are topology-aligned: the participating ranks (all, or all but
// the slowest device kinds, or all but nodes whose NIC is far slower) cut into units (whole nodes,
// or nodes split into 2, 4 or 8 equal parts), and the units grouped into replicas either by device
// kind (q units of one kind per replica) or into R replicas of near-equal aggregate compute
// (mixed kinds, largest unit first to the replica with the least compute). Each replica is laid
// out by the one-replica search on its sub-cluster with one sequence and ZeRO sharded over every
// participant (replicas of the same make-up are planned once); the batch goes one sequence at a
// time to the replica that would finish first (exact for the min-max of the replicas' linear
// times, every replica at least one); the whole plan is then scored by CostModel::Evaluate.
// Candidates are screened with cheap replica plans (the proportional plan or the best USP
// factorisation) and the best few re-planned by the one-replica scheduler (without its
// rank-level search; its best two group-level candidates refined). Nodes are cut into parts
// only while there are fewer units than sequences.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "sched/scheduler_internal.h"

namespace hexiseq::sched_internal {

// A candidate: world ranks of each replica (each sorted); the other ranks are left out.
struct ReplicaPartition {
  std::string name;  // e.g. "4 replicas by kind (4 x 8 H100, ...)"
  std::vector<std::vector<int>> replicas;
};

// Every candidate partition with at least two replicas or at least one rank left out, at most
// `batch` replicas, deduplicated, in a fixed order.
std::vector<ReplicaPartition> ReplicaCandidates(const Cluster& cluster, int batch);

// The batch split minimising the slowest replica, replica r taking t0[r] + (k - 1) * slope[r] for
// 1 <= k <= cap sequences. REQUIRES: 1 <= replicas <= batch <= replicas x cap, slopes > 0.
// At ZeRO >= 2 the sync rounds are the busiest replica's sequences, so a lower cap (a more even
// split) can give a shorter iteration: CandidateBatchSplits.
std::vector<int> MinMaxBatchSplit(int batch, const std::vector<double>& first_sequence_seconds,
                                  const std::vector<double>& per_sequence_seconds,
                                  int cap = std::numeric_limits<int>::max());
// The splits worth scoring: the min-max split, and at ZeRO >= 2 (`rounds_per_sequence`) also the
// min-max split at every cap from the most even one up (`every_cap`), or at the most even cap only.
// With every_cap, one of them is the best split of the iteration, for replicas whose busy time is
// linear in their sequences (exact_training.cc). Distinct splits, in a fixed order.
std::vector<std::vector<int>> CandidateBatchSplits(
    int batch, const std::vector<double>& first_sequence_seconds,
    const std::vector<double>& per_sequence_seconds, bool rounds_per_sequence, bool every_cap);

// One scored replica plan: the result of the replica search (strategy "hexiseq").
struct ReplicaOutcome {
  bool found = false;
  StrategyResult best;                    // the best candidate with replicas or left-out ranks
  std::vector<StrategyResult> runner_up;  // the next best few, best first
  // The best candidate that leaves no rank out (what leaving ranks out gained is measured
  // against it); absent when no such candidate fits.
  std::optional<StrategyResult> best_all_ranks;
  // The best few candidates by their screen plans (the ones refined), best first.
  std::vector<StrategyResult> screened_best;
  // The fastest candidate with a replica that does not fit, by its replicas' busy time at the
  // min-max batch split (no gradient sync); infinity when none.
  double fastest_unfit_seconds = std::numeric_limits<double>::infinity();
};
// The replica search proper (the one-replica plan is not among its candidates). Reads only its
// arguments: it may run beside the one-replica search.
ReplicaOutcome SearchReplicas(const CostModel& model, const ScheduleOptions& options,
                              const Clock& clock);
// Whether the one-replica plan, before its refinement (`rival`), is worth refining: unless every
// one of the replica search's refined candidates was better than it by its screen plan alone.
bool WorthRefining(const ReplicaOutcome& replicas, const StrategyResult& rival);

// The better of the one-replica plan and the replica search's, strategy "hexiseq", with
// options_considered filled: the chosen plan first, then the others by Better (the one-replica
// plan, which leaves no rank out unless a baseline's subset won, among them), and the best plan
// that leaves no rank out when none of those does.
StrategyResult ChooseWithReplicas(const SearchOutcome& one_replica, const ReplicaOutcome& replicas);

}  // namespace hexiseq::sched_internal
