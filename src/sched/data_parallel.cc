// Homogeneous data-parallel degrees for the baselines (data_parallel.h).
#include "sched/data_parallel.h"

namespace hexiseq {
namespace {

std::vector<int> Slice(const std::vector<int>& ranks, int begin, int count) {
  return std::vector<int>(ranks.begin() + begin, ranks.begin() + begin + count);
}

// Plans of replicas with the same sub-cluster and sequences are computed once.
struct ReplicaCache {
  struct Entry {
    Cluster cluster;
    int sequences = 0;
    StrategyResult result;
  };
  std::vector<Entry> entries;
  const StrategyResult& Get(const CostModel& world, const SubCluster& sub, int sequences,
                            int shard_ranks, const OneReplicaStrategy& one) {
    for (const Entry& entry : entries)
      if (entry.sequences == sequences && entry.cluster == sub.cluster) return entry.result;
    entries.push_back(
        {sub.cluster, sequences, one(ReplicaCostModel(world, sub, sequences, shard_ranks))});
    return entries.back().result;
  }
};

}  // namespace

std::vector<int> EvenBatchSplit(int batch, int replicas) {
  std::vector<int> split(replicas, batch / replicas);
  for (int replica = 0; replica < batch % replicas; ++replica) ++split[replica];
  return split;
}

StrategyResult DataParallelAt(const CostModel& world, const std::vector<int>& ranks, int degree,
                              const std::string& strategy, const OneReplicaStrategy& one) {
  if (degree == 1 && static_cast<int>(ranks.size()) == world.cluster().num_ranks()) {
    StrategyResult whole = one(world);  // the plan over the world itself, as before replicas
    whole.strategy = whole.plan.strategy = strategy;
    return whole;
  }
  const int per_replica = static_cast<int>(ranks.size()) / degree;
  const std::vector<int> sequences = EvenBatchSplit(world.workload().batch, degree);
  std::vector<SubCluster> subs;
  for (int replica = 0; replica < degree; ++replica)
    subs.push_back(
        MakeSubCluster(world.cluster(), Slice(ranks, replica * per_replica, per_replica)));
  ReplicaCache cache;
  std::vector<ReplicaPart> parts;
  std::string inner_config;
  for (int replica = 0; replica < degree; ++replica) {
    const StrategyResult& inner =
        cache.Get(world, subs[replica], sequences[replica], static_cast<int>(ranks.size()), one);
    if (!inner.applicable) return inner;
    parts.push_back({&subs[replica], inner.plan, sequences[replica]});
    inner_config = inner.config;
  }
  const std::string config =
      degree == 1 ? inner_config : "dp=" + std::to_string(degree) + " " + inner_config;
  return Score(world, AssembleReplicas(world, parts, strategy), config);
}

StrategyResult BestDataParallel(const CostModel& world, const std::vector<int>& ranks,
                                const std::string& strategy, const OneReplicaStrategy& one,
                                const Deadline& deadline) {
  const int n = static_cast<int>(ranks.size());
  StrategyResult best;
  bool have = false;
  for (int degree = 1; degree <= std::min(n, world.workload().batch); ++degree) {
    if (n % degree != 0) continue;
    if (deadline.Expired()) break;
    StrategyResult result = DataParallelAt(world, ranks, degree, strategy, one);
    if (!have || Better(result, best)) {
      best = std::move(result);
      have = true;
    }
  }
  if (!have) return NotScored(strategy, deadline);
  return best;
}

}  // namespace hexiseq
