// Data-parallel replicas of a plan: how many, their sequences, and each as a plan of its own.
#include <algorithm>

#include "plan/plan.h"
#include "spec/error.h"

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

namespace {

// `plan` without its groups, prediction and left-out ranks: the shell of each replica's plan.
Plan ReplicaShell(const Plan& plan) {
  Plan shell = plan;
  shell.groups.clear();
  shell.predicted.reset();
  shell.left_out.clear();
  return shell;
}

// Replica `replica`'s plan: `shell` (ReplicaShell of `plan`) with its groups and sequences, every
// other rank left out.
Plan FillReplica(Plan shell, const Plan& plan, int replica) {
  shell.batch = ReplicaSequences(plan, replica);
  shell.replica_sequences = {shell.batch};
  std::vector<bool> inside(std::max(0, plan.num_ranks), false);
  for (const PlanGroup& group : plan.groups) {
    if (group.replica != replica) continue;
    shell.groups.push_back(group);
    shell.groups.back().replica = 0;
    for (const PlanMember& member : group.members)
      if (member.rank >= 0 && member.rank < plan.num_ranks) inside[member.rank] = true;
  }
  for (int rank = 0; rank < plan.num_ranks; ++rank)
    if (!inside[rank]) shell.left_out.push_back(rank);
  return shell;
}

}  // namespace

Plan ReplicaPlan(const Plan& plan, int replica) {
  return FillReplica(ReplicaShell(plan), plan, replica);
}

std::vector<Plan> ReplicaPlans(const Plan& plan) {
  const Plan shell = ReplicaShell(plan);  // one copy of the plan's fields, not one per replica
  std::vector<Plan> out;
  for (int replica = 0; replica < NumReplicas(plan); ++replica)
    out.push_back(FillReplica(shell, plan, replica));
  return out;
}

Plan EmbedPlan(const Plan& plan, const std::vector<int>& world_ranks, int num_ranks) {
  HEXISEQ_CHECK(static_cast<int>(world_ranks.size()) == plan.num_ranks,
                "EmbedPlan: one world rank per plan rank");
  Plan out = plan;
  out.predicted.reset();
  out.num_ranks = num_ranks;
  std::vector<bool> inside(std::max(0, num_ranks), false);
  for (PlanGroup& group : out.groups) {
    for (int& rank : group.ranks) rank = world_ranks[rank];
    for (PlanMember& member : group.members) {
      member.rank = world_ranks[member.rank];
      member.node = -1;  // informative only; the plan's nodes are not the world's
      inside[member.rank] = true;
    }
  }
  out.left_out.clear();
  for (int rank = 0; rank < num_ranks; ++rank)
    if (!inside[rank]) out.left_out.push_back(rank);
  return out;
}

Plan MergeReplicas(const std::vector<Plan>& replicas) {
  HEXISEQ_CHECK(!replicas.empty(), "MergeReplicas: at least one replica");
  Plan out = replicas.front();
  out.predicted.reset();
  out.groups.clear();
  out.replica_sequences.clear();
  out.batch = 0;
  out.config.clear();
  std::vector<bool> inside(std::max(0, out.num_ranks), false);
  for (size_t replica = 0; replica < replicas.size(); ++replica) {
    const Plan& part = replicas[replica];
    HEXISEQ_CHECK(part.num_ranks == out.num_ranks && NumReplicas(part) == 1,
                  "MergeReplicas: one-replica plans over the same ranks");
    for (const PlanGroup& group : part.groups) {
      out.groups.push_back(group);
      out.groups.back().replica = static_cast<int>(replica);
      for (const PlanMember& member : group.members) {
        HEXISEQ_CHECK(!inside[member.rank], "MergeReplicas: replicas share no rank");
        inside[member.rank] = true;
      }
    }
    out.replica_sequences.push_back(part.batch);
    out.batch += part.batch;
    out.config += (replica > 0 ? " | " : "") + part.config;
  }
  out.left_out.clear();
  for (int rank = 0; rank < out.num_ranks; ++rank)
    if (!inside[rank]) out.left_out.push_back(rank);
  return out;
}

}  // namespace hexiseq
