// A sub-cluster view: a Cluster made of some of a cluster's ranks, with the map back to world
// ranks, so that any one-replica strategy (a baseline, the scheduler) can plan one data-parallel
// replica on it; and the assembly of such replica plans into one world plan. Each world node that
// contributes ranks becomes one node of the sub-cluster with the same device, intra-node link,
// NIC and latency; `links:` overrides are kept between the kinds they came from (kinds that lost
// every node stay as kinds with no nodes, so NIC port capacities do not change). Ignores nothing
// the cost model reads: Bandwidth, Latency and NicPortBandwidth agree with the world's for every
// pair of sub-cluster ranks.
#pragma once

#include <vector>

#include "cost/cost_model.h"
#include "plan/plan.h"
#include "spec/cluster.h"

namespace hexiseq {

struct SubCluster {
  Cluster cluster;               // ranks 0..n-1
  std::vector<int> world_ranks;  // sub-cluster rank -> world rank (ascending)
};

// REQUIRES: world_ranks non-empty, sorted, distinct, each in [0, world.num_ranks()).
SubCluster MakeSubCluster(const Cluster& world, const std::vector<int>& world_ranks);
// The world ranks of whole nodes (ascending).
std::vector<int> RanksOfNodes(const Cluster& world, const std::vector<int>& nodes);

// A cost model for one replica on the sub-cluster: the world's model and workload with
// `sequences` sequences and ZeRO sharded over `shard_ranks` (all participants of the world plan).
CostModel ReplicaCostModel(const CostModel& world, const SubCluster& sub, int sequences,
                           int shard_ranks);

// One replica of a world plan, planned on a sub-cluster.
struct ReplicaPart {
  const SubCluster* sub = nullptr;
  Plan plan;  // a one-replica plan over sub->cluster (its own left-out ranks allowed)
  int sequences = 1;
};

// The world plan (EmbedPlan and MergeReplicas): the parts' groups (ranks mapped to world ranks,
// device and node fields of the world cluster), replica by replica, with their sequences; every
// world rank in no group is left out. Strategy and config are the caller's; no prediction.
// REQUIRES: the parts' ranks disjoint.
Plan AssembleReplicas(const CostModel& world, const std::vector<ReplicaPart>& parts,
                      const std::string& strategy);

}  // namespace hexiseq
