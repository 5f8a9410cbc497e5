// runtime::Comm over a c10d ProcessGroup (torch.distributed), so the runtime's distributed
// attention runs under torchrun without mpirun. Point-to-point maps to ProcessGroup::send/recv on
// CPU byte tensors; collectives are built from point-to-point on the same group (messages match
// in posting order per (peer, tag), as in MPI); sub-communicators (Split) are rank subsets of the
// same group with their own tag range, so no c10d group has to be created by every rank.
// Ignores device memory: buffers are host memory (the runtime computes on the CPU).
#pragma once

#include <memory>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "runtime/comm.h"

namespace hexiseq::python {

// Tags on the process group: kTagBase + context * 2^kUserTagBits + tag. Tags below kTagBase stay
// free for the user's own send/recv on the same group.
inline constexpr int kTagBase = 1 << 30;
inline constexpr int kUserTagBits = 19;
inline constexpr int kContextBits = 30 - kUserTagBits;
inline constexpr int kMaxContexts = 1 << kContextBits;
// Per communicator, the two tags above max_tag() carry its collectives.
inline constexpr int kCollectiveTags = 2;

struct ProcessGroupState;  // shared by a world communicator and everything split from it

// The world communicator over `group` (every rank of the group). Transport errors (a peer that
// died, gloo's timeout) throw c10::Error / std::runtime_error from Wait and the collectives.
std::unique_ptr<runtime::Comm> MakeProcessGroupComm(c10::intrusive_ptr<c10d::ProcessGroup> group);

}  // namespace hexiseq::python
