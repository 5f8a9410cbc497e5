// Sub-cluster views and the assembly of replica plans into a world plan (subcluster.h).
#include "sched/subcluster.h"

#include <algorithm>

#include "sched/baselines.h"

namespace hexiseq {
namespace {

// The selected ranks of each contributing world node, nodes ascending.
struct NodeSelection {
  int world_node = 0;
  std::vector<int> ranks;
};

std::vector<NodeSelection> SelectionByNode(const Cluster& world,
                                           const std::vector<int>& world_ranks) {
  std::vector<NodeSelection> out;
  for (int rank : world_ranks) {
    const int node = world.ranks[rank].node;
    if (out.empty() || out.back().world_node != node) out.push_back({node, {}});
    out.back().ranks.push_back(rank);
  }
  return out;
}

// Every `links:` override between world kinds a and b, repeated between every pair of sub-cluster
// kinds that came from a and b (origin[k] = the world kind of sub-cluster kind k), in order.
std::vector<LinkOverride> MappedLinks(const Cluster& world, const std::vector<int>& origin) {
  std::vector<LinkOverride> out;
  const int kinds = static_cast<int>(origin.size());
  for (const LinkOverride& link : world.links)
    for (int from = 0; from < kinds; ++from)
      for (int to = 0; to < kinds; ++to)
        if (origin[from] == link.kind_a && origin[to] == link.kind_b)
          out.push_back({from, to, link.bytes_per_second});
  return out;
}

}  // namespace

SubCluster MakeSubCluster(const Cluster& world, const std::vector<int>& world_ranks) {
  SubCluster sub;
  sub.world_ranks = world_ranks;
  sub.cluster.name = world.name;
  sub.cluster.inter_node_latency_seconds = world.inter_node_latency_seconds;
  // The world kinds first, with no nodes (they carry the links of kinds that lost every node),
  // then one kind per run of contributing nodes of one world kind and one selected count.
  std::vector<int> origin;
  for (size_t kind = 0; kind < world.kinds.size(); ++kind) {
    sub.cluster.kinds.push_back(world.kinds[kind]);
    sub.cluster.kinds.back().count = 0;
    origin.push_back(static_cast<int>(kind));
  }
  const size_t world_kinds = world.kinds.size();
  for (const NodeSelection& node : SelectionByNode(world, world_ranks)) {
    const int world_kind = world.nodes[node.world_node].kind;
    const int gpus = static_cast<int>(node.ranks.size());
    NodeKind* last = sub.cluster.kinds.size() > world_kinds ? &sub.cluster.kinds.back() : nullptr;
    if (last && origin.back() == world_kind && last->gpus_per_node == gpus) {
      ++last->count;
      continue;
    }
    NodeKind kind = world.kinds[world_kind];
    kind.count = 1;
    kind.gpus_per_node = gpus;
    sub.cluster.kinds.push_back(kind);
    origin.push_back(world_kind);
  }
  sub.cluster.links = MappedLinks(world, origin);
  sub.cluster.Finalize();
  return sub;
}

std::vector<int> RanksOfNodes(const Cluster& world, const std::vector<int>& nodes) {
  std::vector<int> ranks;
  for (int node : nodes)
    for (int local = 0; local < world.nodes[node].num_ranks; ++local)
      ranks.push_back(world.nodes[node].first_rank + local);
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

CostModel ReplicaCostModel(const CostModel& world, const SubCluster& sub, int sequences,
                           int shard_ranks) {
  Workload workload = world.workload();
  workload.batch = sequences;
  workload.shard_ranks = shard_ranks;
  // The world charges the optimizer step over its participants; a replica's own plan may leave
  // ranks out that the world's partition keeps, so its search must not trade for it.
  workload.charge_optimizer_step = false;
  return CostModel(sub.cluster, world.model(), workload, world.constants());
}

Plan AssembleReplicas(const CostModel& world, const std::vector<ReplicaPart>& parts,
                      const std::string& strategy) {
  const Cluster& cluster = world.cluster();
  std::vector<Plan> replicas;
  for (const ReplicaPart& part : parts) {
    replicas.push_back(EmbedPlan(part.plan, part.sub->world_ranks, cluster.num_ranks()));
    replicas.back().batch = part.sequences;
  }
  Plan plan = MergeReplicas(replicas);
  const Plan shell = EmptyPlan(world, strategy);  // the world's provenance
  plan.strategy = shell.strategy;
  plan.planner = shell.planner;
  plan.input_hash = shell.input_hash;
  for (PlanGroup& group : plan.groups)
    for (PlanMember& member : group.members) {
      member.device = cluster.device(member.rank).name;
      member.node = cluster.ranks[member.rank].node;
    }
  if (parts.size() == 1) plan.replica_sequences.clear();  // one replica: the plan/1 shape
  return plan;
}

}  // namespace hexiseq
