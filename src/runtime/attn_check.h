// attn-check: runs random Q, K, V, dO through the distributed attention of a plan and compares
// O, LSE, dQ, dK, dV with the naive double-precision single-process reference on the whole
// sequence. Inputs are a pure function of (seed, tensor, global position, head, dim), so each rank
// generates only its own tokens' rows and the reference regenerates all of them.
// Relative error of a tensor = max |distributed - reference| / max |reference| (norm-wise, so
// entries near zero do not blow it up); documented in docs/runtime.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "runtime/comm.h"
#include "runtime/dist_attention.h"
#include "spec/error.h"

namespace hexiseq::runtime {

struct AttnCheckOptions {
  int head_dim = 32;
  uint64_t seed = 1;
  double tolerance = 1e-5;  // on the relative error of every output
  // Called with the name of each phase as it starts ("agreement", "forward", ...), e.g. for a
  // watchdog's messages. Optional.
  std::function<void(const char*)> on_phase;
};

struct ErrorStats {
  std::string name;
  double max_abs = 0;  // max |a - b|
  double max_ref = 0;  // max |b|
  int64_t worst = -1;  // flat index of the first largest |a - b| in token layout [S][heads][d]
  // The same place as (global position, head, dim); dim is 0 for LSE. -1 when nothing compared.
  int64_t worst_position = -1;
  int worst_head = -1;
  int worst_dim = -1;
  double relative() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};

struct AttnCheckReport {
  bool has_errors = false;                // true on the rank that ran the reference (rank 0)
  std::vector<ErrorStats> errors;         // O, LSE, dQ, dK, dV
  bool passed = false;                    // every relative error <= tolerance (agreed by all ranks)
  std::vector<PhaseTimes> forward_times;  // by rank (filled on rank 0)
  std::vector<PhaseTimes> backward_times;  // by rank (filled on rank 0)
  double reference_seconds = 0;
};

// Deterministic input value in [-1, 1) for (seed, tensor id, position, head, dim).
float InputValue(uint64_t seed, int tensor, int64_t position, int head, int dim);

// Collective over `world` (plan.num_ranks ranks). Before allocating anything, every rank checks
// that all ranks use the same seed, head_dim and tolerance, and that the ranks on each machine
// fit in the memory it can give them. Errors (option or plan mismatch, bad plan, not enough
// memory) are returned identically on every rank.
Result<AttnCheckReport> RunAttnCheck(const Plan& plan, Comm& world,
                                     const AttnCheckOptions& options);

// attn-check of a plan with several replicas or left-out ranks: every replica checks its own
// sub-plan (runtime/replicas.h: its ranks renumbered 0..n-1) against the reference on its own
// communicator, its first rank computing the reference.
struct ReplicaAttnCheck {
  int replica = -1;  // this rank's replica; -1 when the plan leaves it out
  int num_replicas = 1;
  int sequences = 0;             // the replica's sequences per iteration (informative)
  std::vector<int> world_ranks;  // the replica's world ranks, by replica rank
  AttnCheckReport report;        // this replica's (errors on its first rank)
  bool all_passed = false;       // every replica passed (agreed by all participants)
};

// Collective over `world` (plan.num_ranks ranks, left-out ones too): the option, plan and memory
// checks over the whole world (errors identical on every rank), then each replica's RunAttnCheck
// on its sub-plan. A left-out rank returns at once after the split (replica = -1); participants
// return the same error when any replica's check failed to run.
Result<ReplicaAttnCheck> RunReplicaAttnCheck(const Plan& plan, Comm& world,
                                             const AttnCheckOptions& options);

}  // namespace hexiseq::runtime
