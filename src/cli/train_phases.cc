// Per-rank phase times of train (train_phases.h).
#include "cli/train_phases.h"

#include <algorithm>
#include <cstdio>

namespace hexiseq::cli {
namespace {

constexpr int kFields = 5;  // the fields of train::PhaseSeconds

double Compute(const train::PhaseSeconds& phases) {
  return phases.linear + phases.attention_compute;
}
double AttentionComm(const train::PhaseSeconds& phases) {
  return phases.alltoall + phases.ring_wait;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

}  // namespace

std::vector<RankPhases> GatherPhases(runtime::Comm& participants, int world_rank,
                                     const train::PhaseSeconds& mine) {
  const double values[kFields + 1] = {static_cast<double>(world_rank),
                                      mine.linear,
                                      mine.attention_compute,
                                      mine.alltoall,
                                      mine.ring_wait,
                                      mine.grad_sync};
  std::vector<double> all((kFields + 1) * participants.size());
  participants.Allgather(values, sizeof values, all.data());
  std::vector<RankPhases> ranks;
  for (int rank = 0; rank < participants.size(); ++rank) {
    const double* row = all.data() + rank * (kFields + 1);
    ranks.push_back(
        {static_cast<int>(row[0]), train::PhaseSeconds{row[1], row[2], row[3], row[4], row[5]}});
  }
  return ranks;
}

train::PhaseSeconds SlowestPhases(const std::vector<RankPhases>& ranks) {
  train::PhaseSeconds slowest;
  for (const RankPhases& rank : ranks) {
    slowest.linear = std::max(slowest.linear, rank.phases.linear);
    slowest.attention_compute = std::max(slowest.attention_compute, rank.phases.attention_compute);
    slowest.alltoall = std::max(slowest.alltoall, rank.phases.alltoall);
    slowest.ring_wait = std::max(slowest.ring_wait, rank.phases.ring_wait);
    slowest.grad_sync = std::max(slowest.grad_sync, rank.phases.grad_sync);
  }
  return slowest;
}

std::string RankPhasesJson(const std::vector<RankPhases>& ranks) {
  std::string json = "[";
  for (const RankPhases& rank : ranks) {
    char buffer[320];
    std::snprintf(buffer, sizeof buffer,
                  "%s{\"rank\": %d, \"compute_seconds\": %.6f, \"linear_seconds\": %.6f, "
                  "\"attention_compute_seconds\": %.6f, \"attention_comm_seconds\": %.6f, "
                  "\"grad_sync_seconds\": %.6f}",
                  json.size() > 1 ? ", " : "", rank.world_rank, Compute(rank.phases),
                  rank.phases.linear, rank.phases.attention_compute, AttentionComm(rank.phases),
                  rank.phases.grad_sync);
    json += buffer;
  }
  return json + "]";
}

void PhaseMedians::Add(const std::vector<RankPhases>& step) {
  if (steps_.empty()) {
    for (const RankPhases& rank : step) world_ranks_.push_back(rank.world_rank);
    steps_.resize(step.size());
  }
  for (size_t rank = 0; rank < step.size() && rank < steps_.size(); ++rank) {
    steps_[rank].push_back(step[rank].phases);
  }
}

std::string PhaseMedians::SummaryLine() const {
  if (steps_.empty() || steps_[0].empty()) return "";
  std::string line =
      "train: per-rank median seconds per step (compute / attention comm / grad "
      "sync):";
  for (size_t rank = 0; rank < steps_.size(); ++rank) {
    std::vector<double> compute, comm, sync;
    for (const train::PhaseSeconds& phases : steps_[rank]) {
      compute.push_back(Compute(phases));
      comm.push_back(AttentionComm(phases));
      sync.push_back(phases.grad_sync);
    }
    char buffer[96];
    std::snprintf(buffer, sizeof buffer, "%s rank %d: %.4f / %.4f / %.4f", rank ? "," : "",
                  world_ranks_[rank], Median(compute), Median(comm), Median(sync));
    line += buffer;
  }
  return line;
}

}  // namespace hexiseq::cli
