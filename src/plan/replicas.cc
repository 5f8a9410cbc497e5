// Data-parallel replicas of a plan: how many, their sequences, and each as a plan of its own.
#include <algorithm>

#include "plan/plan.h"

namespace hexiseq {

int NumReplicas(const Plan& plan) {
  return std::max<int>(1, static_cast<int>(plan.replica_sequences.size()));
}

int ReplicaSequences(const Plan& plan, int replica) {
  return plan.replica_sequences.empty() ? plan.batch : plan.replica_sequences[replica];
}

std::vector<int> ParticipatingRanks(const Plan& plan) {
  std::vector<int> ranks;
  for (const PlanGroup& group : plan.groups)
    for (const PlanMember& member : group.members) ranks.push_back(member.rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

Plan ReplicaPlan(const Plan& plan, int replica) {
  Plan out = plan;
  out.groups.clear();
  out.predicted.reset();
  out.batch = ReplicaSequences(plan, replica);
  out.replica_sequences = {out.batch};
  std::vector<bool> inside(std::max(0, plan.num_ranks), false);
  for (const PlanGroup& group : plan.groups) {
    if (group.replica != replica) continue;
    out.groups.push_back(group);
    out.groups.back().replica = 0;
    for (const PlanMember& member : group.members)
      if (member.rank >= 0 && member.rank < plan.num_ranks) inside[member.rank] = true;
  }
  out.left_out.clear();
  for (int rank = 0; rank < plan.num_ranks; ++rank)
    if (!inside[rank]) out.left_out.push_back(rank);
  return out;
}

}  // namespace hexiseq
