// Per-rank phase times of `hexiseq train`: every participant's seconds per phase in one step
// (compute, attention communication, gradient sync), gathered for the step lines (the slowest
// participant per phase, and each rank in JSON) and the end-of-run summary (each rank's medians).
#pragma once

#include <string>
#include <vector>

#include "runtime/comm.h"
#include "train/trainer.h"

namespace hexiseq::cli {

struct RankPhases {
  int world_rank = 0;
  train::PhaseSeconds phases;
};

// Collective over `participants`: every participant's phases of this step, in participant order.
std::vector<RankPhases> GatherPhases(runtime::Comm& participants, int world_rank,
                                     const train::PhaseSeconds& mine);

// Per phase, the maximum over the ranks (the slowest bounds each phase).
train::PhaseSeconds SlowestPhases(const std::vector<RankPhases>& ranks);

// The JSON array of a step's per-rank summary: [{"rank": R, "compute_seconds": linear + attention
// kernels, "attention_comm_seconds": all-to-alls + ring waits, "grad_sync_seconds": ...}, ...].
std::string RankPhasesJson(const std::vector<RankPhases>& ranks);

// Each rank's median of the three summaries over the steps added, as one line for stderr.
class PhaseMedians {
 public:
  void Add(const std::vector<RankPhases>& step);
  std::string SummaryLine() const;  // "" before any step

 private:
  std::vector<int> world_ranks_;
  std::vector<std::vector<train::PhaseSeconds>> steps_;  // by participant, by step
};

}  // namespace hexiseq::cli
