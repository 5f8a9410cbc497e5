// Explains why no plan fits memory and finds the smallest change that fits, by re-running the
// scheduler (quick mode: one structure pass, no descent) on modified workloads and clusters:
// the recompute policy, the ZeRO stage, more memory per device of the type that overflows
// (bisection to 1 GiB) and a shorter sequence (bisection to 1K tokens).
#include <cmath>
#include <cstdio>

#include "sched/scheduler.h"
#include "sched/scheduler_internal.h"
#include "sched/training_search.h"
#include "spec/units.h"

namespace hexiseq {
namespace {

using namespace sched_internal;

constexpr int kSeqQuantum = 1024;  // sequence hints are multiples of 1K tokens
constexpr double kMemoryQuantum = 1024.0 * 1024.0 * 1024.0;  // memory hints in whole GiB

// Whether the quick scheduler finds a plan that fits. Once the deadline has passed the answer is
// not trusted (the re-plan was cut short): the caller checks deadline.CutShort() after it.
bool Fits(const Problem& problem, const Deadline& deadline) {
  ScheduleOptions options;
  options.explain_infeasible = false;
  options.deadline = deadline;
  return RunScheduler(CostModel(problem), options, true).best.cost.feasible;
}

std::string SeqText(int64_t seq) {
  if (seq % (1024 * 1024) == 0) return std::to_string(seq / (1024 * 1024)) + "M";
  if (seq % 1024 == 0) return std::to_string(seq / 1024) + "K";
  return std::to_string(seq);
}

// The rank that overflows most, relative to its capacity.
int WorstRank(const PlanCost& cost) {
  int worst = 0;
  double worst_fraction = -1;
  for (const RankCost& rc : cost.ranks) {
    const double fraction = rc.memory_bytes / rc.memory_capacity_bytes;
    if (fraction > worst_fraction) {
      worst_fraction = fraction;
      worst = rc.rank;
    }
  }
  return worst;
}

// The training settings that need less memory, where not already in force.
void SettingHints(const Problem& problem, const Deadline& deadline,
                  std::vector<std::string>& hints) {
  const auto cut = [&deadline] { return deadline.CutShort(); };
  if (problem.workload.recompute != Recompute::kFull && !cut()) {
    Problem changed = problem;
    changed.workload.recompute = Recompute::kFull;
    if (Fits(changed, deadline) && !cut()) hints.push_back("with --recompute full it fits");
  }
  if (problem.workload.zero_stage < kShardedWeightsStage && !cut()) {
    Problem changed = problem;
    changed.workload.zero_stage = kShardedWeightsStage;
    if (Fits(changed, deadline) && !cut()) hints.push_back("with --zero 3 it fits");
  }
}

// More memory on the device type of rank `worst` (bisection in whole GiB).
void MemoryHint(const Problem& problem, int worst, const Deadline& deadline,
                std::vector<std::string>& hints) {
  const auto cut = [&deadline] { return deadline.CutShort(); };
  if (cut()) return;
  const DeviceSpec& device = problem.cluster.device(worst);
  auto with_extra = [&](double extra) {
    Problem changed = problem;
    for (NodeKind& kind : changed.cluster.kinds)
      if (kind.device.name == device.name) kind.device.memory_bytes += extra;
    return Fits(changed, deadline);
  };
  double hi = device.memory_bytes;
  bool found = with_extra(hi);
  for (int widen = 0; widen < 2 && !found; ++widen) {
    hi *= 4;
    found = with_extra(hi);
  }
  if (!found) return;
  double lo = 0;
  while (hi - lo > kMemoryQuantum && !cut()) {
    const double mid = 0.5 * (lo + hi);
    (with_extra(mid) ? hi : lo) = mid;
  }
  const int gib = static_cast<int>(std::ceil(hi / kMemoryQuantum));
  if (!cut())
    hints.push_back("needs about " + std::to_string(gib) + " GiB more per " + device.name);
}

// A shorter sequence (bisection in kSeqQuantum tokens), or that even the shortest does not fit.
void SeqHint(const Problem& problem, const Deadline& deadline, std::vector<std::string>& hints) {
  const auto cut = [&deadline] { return deadline.CutShort(); };
  if (cut()) return;
  const Workload& workload = problem.workload;
  auto with_seq = [&](int64_t seq) {
    Problem changed = problem;
    changed.workload.seq_len = seq;
    return Fits(changed, deadline);
  };
  int64_t lo = 0, hi = workload.seq_len / kSeqQuantum;  // in quanta; lo fits (or is 0)
  if (hi >= 1 && with_seq(kSeqQuantum)) {
    lo = 1;
    while (hi - lo > 1 && !cut()) {
      const int64_t mid = (lo + hi) / 2;
      (with_seq(mid * kSeqQuantum) ? lo : hi) = mid;
    }
    if (lo * kSeqQuantum < workload.seq_len && !cut())
      hints.push_back("a shorter --seq of at most " + SeqText(lo * kSeqQuantum) + " fits");
  } else if (!cut()) {
    // Never suggest a setting already in force.
    const std::string remedy = workload.zero_stage < kShardedWeightsStage
                                   ? "try more devices or --zero 3"
                                   : "try more devices";
    hints.push_back("even --seq " + SeqText(std::min<int64_t>(kSeqQuantum, workload.seq_len)) +
                    " does not fit (the model state alone is too large: " + remedy + ")");
  }
}

}  // namespace

// A hint is given only when no re-plan behind it was cut short by the deadline (CutShort never
// turns false again, so every later hint is skipped too).
std::string ExplainInfeasible(const Problem& problem, const Deadline& deadline) {
  ScheduleOptions options;
  options.explain_infeasible = false;
  options.deadline = deadline;
  const StrategyResult best = RunScheduler(CostModel(problem), options, true).best;
  if (best.cost.feasible) return "";
  std::string message = "infeasible: no plan fits memory; in the best plan found (" + best.config +
                        ") " + best.cost.infeasible_reason;
  std::vector<std::string> hints;
  SettingHints(problem, deadline, hints);
  MemoryHint(problem, WorstRank(best.cost), deadline, hints);
  SeqHint(problem, deadline, hints);
  const auto cut = [&deadline] { return deadline.CutShort(); };
  if (cut())
    hints.push_back("the time limit was reached before the smallest change that fits was found");
  if (!hints.empty()) {
    message += " (hint: ";
    for (size_t i = 0; i < hints.size(); ++i) message += (i ? "; " : "") + hints[i];
    message += ")";
  }
  return message;
}

std::string ExplainInfeasible(const Problem& problem, const ScheduleOptions& options) {
  if (!options.zero_auto && !options.recompute_auto)
    return ExplainInfeasible(problem, options.deadline);
  Problem least_memory = problem;
  if (options.zero_auto) least_memory.workload.zero_stage = kShardedWeightsStage;
  if (options.recompute_auto) least_memory.workload.recompute = Recompute::kFull;
  return ExplainInfeasible(least_memory, options.deadline);
}

}  // namespace hexiseq
