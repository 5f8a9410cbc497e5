// Homogeneous data parallelism for the baselines, as Megatron users configure it: d replicas of
// n/d consecutive ranks (whole nodes where n/d is a multiple of the node size), each laid out by
// the same one-replica strategy on its own sub-cluster, the batch split as evenly as possible
// (the first batch mod d replicas take one sequence more). Every d that divides the ranks and
// is at most the batch is scored in full on the world (CostModel::Evaluate, ZeRO sharded over the
// participants), so the smallest sequence-parallel degree that fits is among them. Replicas of
// the same make-up are planned once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sched/baselines.h"
#include "sched/subcluster.h"

namespace hexiseq {

// A one-replica strategy: plans all of `model`'s cluster as one replica (it may leave ranks
// idle), or says why it is not applicable.
using OneReplicaStrategy = std::function<StrategyResult(const CostModel& model)>;

// The batch split as evenly as possible over `replicas` (sums to `batch`).
std::vector<int> EvenBatchSplit(int batch, int replicas);

// The best of every data-parallel degree over `ranks` (sorted world ranks; the other world
// ranks are left out), by Better(). Config "dp=<d> <inner config>" (just the inner config at
// d = 1). Not applicable when no degree is. Degrees that start after `deadline` passed are not
// scored (NotScored when none was).
StrategyResult BestDataParallel(const CostModel& world, const std::vector<int>& ranks,
                                const std::string& strategy, const OneReplicaStrategy& one,
                                const Deadline& deadline = {});

// Degree d exactly (REQUIRES: d divides ranks.size(), 1 <= d <= batch).
StrategyResult DataParallelAt(const CostModel& world, const std::vector<int>& ranks, int degree,
                              const std::string& strategy, const OneReplicaStrategy& one);

}  // namespace hexiseq
