// Replica membership, the local (renumbered) replica plan, the batch split and the split of the
// world into the participants' and each replica's communicators.
#include "runtime/replicas.h"

#include <algorithm>
#include <map>

#include "spec/error.h"

namespace hexiseq::runtime {

int ReplicaOf(const Plan& plan, int rank) {
  for (const PlanGroup& group : plan.groups) {
    for (const PlanMember& member : group.members) {
      if (member.rank == rank) return group.replica;
    }
  }
  return -1;
}

LocalReplica MakeLocalReplica(const Plan& plan, int replica) {
  HEXISEQ_CHECK(replica >= 0 && replica < NumReplicas(plan), "replica index out of range");
  LocalReplica local;
  local.plan = ReplicaPlan(plan, replica);
  local.world_ranks = ParticipatingRanks(local.plan);
  std::map<int, int> local_rank_of;
  for (size_t index = 0; index < local.world_ranks.size(); ++index) {
    local_rank_of[local.world_ranks[index]] = static_cast<int>(index);
  }
  for (PlanGroup& group : local.plan.groups) {
    for (int& rank : group.ranks) rank = local_rank_of.at(rank);
    for (PlanMember& member : group.members) member.rank = local_rank_of.at(member.rank);
  }
  local.plan.num_ranks = static_cast<int>(local.world_ranks.size());
  local.plan.left_out.clear();
  return local;
}

SequenceBlock ReplicaSequenceBlock(const Plan& plan, int replica) {
  HEXISEQ_CHECK(replica >= 0 && replica < NumReplicas(plan), "replica index out of range");
  SequenceBlock block;
  for (int before = 0; before < replica; ++before) block.first += ReplicaSequences(plan, before);
  block.count = ReplicaSequences(plan, replica);
  return block;
}

ReplicaComms SplitByReplica(Comm& world, const Plan& plan) {
  ReplicaComms comms;
  comms.replica = ReplicaOf(plan, world.rank());
  const int participant_color = comms.left_out() ? -1 : 0;
  comms.participants = world.Split(participant_color, world.rank());
  comms.replica_comm = world.Split(comms.replica, world.rank());
  if (comms.left_out()) return comms;
  comms.local = MakeLocalReplica(plan, comms.replica);
  HEXISEQ_CHECK(comms.replica_comm->size() == comms.local.plan.num_ranks,
                "replica communicator size differs from the replica's ranks");
  return comms;
}

}  // namespace hexiseq::runtime
