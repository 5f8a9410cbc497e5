// Data-parallel replicas at run time. A plan's replica runs on its own communicator: its ranks,
// in ascending world-rank order, renumbered 0..n-1, so that the distributed attention (which
// knows one replica) executes it unchanged. Ranks the plan leaves out join no communicator and
// take part in nothing after the start-up checks. The batch split is here too: replica r takes
// the contiguous block of the step's sequences that follows replicas 0..r-1.
// Ignores: how the replicas' gradients are combined (train/grad_sync.h sums them over
// `participants`).
#pragma once

#include <memory>
#include <vector>

#include "plan/plan.h"
#include "runtime/comm.h"

namespace hexiseq::runtime {

// The replica of world rank `rank`; -1 when the plan leaves it out (or puts it in no group).
int ReplicaOf(const Plan& plan, int rank);

// Replica `replica` of `plan` as a plan of its own: ReplicaPlan(plan, replica) with its ranks
// renumbered 0..n-1 in ascending world-rank order (world_ranks[local rank] = world rank),
// num_ranks = n, nothing left out. REQUIRES: ValidateStructure(plan) passed,
// 0 <= replica < NumReplicas(plan).
struct LocalReplica {
  Plan plan;
  std::vector<int> world_ranks;
};
LocalReplica MakeLocalReplica(const Plan& plan, int replica);

// The sequences of a step's batch that replica `replica` takes: [first, first + count).
struct SequenceBlock {
  int first = 0;
  int count = 0;
};
SequenceBlock ReplicaSequenceBlock(const Plan& plan, int replica);

// One rank's communicators under a plan.
struct ReplicaComms {
  int replica = -1;                    // -1: left out (then everything below is empty)
  std::unique_ptr<Comm> participants;  // every rank in some replica, in world order
  std::unique_ptr<Comm> replica_comm;  // this replica's ranks, in world order
  LocalReplica local;                  // the replica as a plan over replica_comm's ranks
  bool left_out() const { return replica < 0; }
};

// Collective over `world` (every rank, left-out ones too): splits the participants and each
// replica off the world. REQUIRES: every rank holds the same plan (CheckPlanAgreement), it
// passed ValidateStructure, and world.size() == plan.num_ranks.
ReplicaComms SplitByReplica(Comm& world, const Plan& plan);

}  // namespace hexiseq::runtime
