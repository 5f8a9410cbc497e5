// A plan's training configuration in words: its data-parallel replicas (ranks by device type and
// node, sequences, predicted busy time), the ranks it leaves out, the ZeRO stage and recompute
// policy, and what the strategy weighed to choose them (StrategyResult::options_considered).
// Shared by `hexiseq plan`, `explain`, `compare`, the report page and docs/evaluation.md, so that
// every view says the same thing. Formatting only: every figure comes from the plan, the cost
// model's PlanCost and the strategy's options.
#pragma once

#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "plan/plan.h"
#include "sched/baselines.h"
#include "spec/cluster.h"

namespace hexiseq::report {

// Sorted ids (ranks, heads) as ranges: "0-3,5,8-9"; "-" when empty.
std::string IdRanges(const std::vector<int>& ranks);
// "rank 7", "ranks 0-3,5".
std::string RanksWord(const std::vector<int>& ranks);
// Ranks by device type and node, in rank order: "4 x H100-SXM on node 0 + 3 x A100-SXM-80G on
// node 1"; runs of nodes of one device type merge: "16 x H100-SXM on nodes 0-1".
std::string DevicesInWords(const std::vector<int>& ranks, const Cluster& cluster);

// "1 data-parallel replica, the whole batch of 1 sequence", "2 data-parallel replicas, batch 3
// split 2 + 1".
std::string ReplicasInWords(const Plan& plan);

struct ReplicaSummary {
  int replica = 0;
  std::vector<int> ranks;  // sorted
  int groups = 0;
  int sequences = 0;
  double busy_seconds = 0;  // PlanCost::replica_busy_seconds; 0 when the cost has none
};
std::vector<ReplicaSummary> SummarizeReplicas(const Plan& plan, const PlanCost& cost);

// Short forms for one table cell (compare, the report's and the evaluation's tables).
// "dp 1", "dp 3 (3+3+2)", "dp 4 (2 each)"; above 8 unequal replicas "dp 16 (1-3 each)".
std::string ReplicasCell(const Plan& plan);
std::string LeftOutCell(const Plan& plan);   // "-", "rank 7", "12 ranks: 20-31"
std::string TrainingCell(const Plan& plan);  // "zero 1, selective"

// What the options say about the choice (options best first, the first being the plan's):
// who is left out and what that gained against the best option that leaves nobody out, and the
// runner-up with its time. Empty when there are no options.
std::vector<std::string> DecisionLines(const std::vector<TrainingOption>& options);

// The block `plan` and `explain` print: the configuration line, one line per replica, the
// left-out ranks, then DecisionLines (or a note that a plan file does not record them).
// `shard_ranks`: the ranks ZeRO shards model state over (CostModel::ShardRanks).
std::string TrainingText(const Plan& plan, const PlanCost& cost, const Cluster& cluster,
                         int shard_ranks, const std::vector<TrainingOption>& options,
                         bool options_recorded);

}  // namespace hexiseq::report
