// Explains why no plan fits memory and finds the smallest change that fits, by re-running the
// scheduler (quick mode: one structure pass, no descent) on modified workloads and clusters:
// the recompute policy, the ZeRO stage, more memory per device of the type that overflows
// (bisection to 1 GiB) and a shorter sequence (bisection to 1K tokens).
#include <cmath>
#include <cstdio>

#include "sched/scheduler.h"
#include "sched/scheduler_internal.h"
#include "spec/units.h"

namespace hexiseq {
namespace {

using namespace sched_internal;

constexpr int kSeqQuantum = 1024;  // sequence hints are multiples of 1K tokens
constexpr double kMemoryQuantum = 1024.0 * 1024.0 * 1024.0;  // memory hints in whole GiB

// Whether the quick scheduler finds a plan that fits. Once the deadline has passed the answer is
// not trusted (the re-plan was cut short): the caller checks deadline.CutShort() after it.
bool Fits(const Cluster& cluster, const ModelSpec& spec, const Workload& workload,
          const CostConstants& constants, const Deadline& deadline) {
  CostModel model(cluster, spec, workload, constants);
  ScheduleOptions options;
  options.explain_infeasible = false;
  options.deadline = deadline;
  return RunScheduler(model, options, true).best.cost.feasible;
}

std::string SeqText(int64_t seq) {
  if (seq % (1024 * 1024) == 0) return std::to_string(seq / (1024 * 1024)) + "M";
  if (seq % 1024 == 0) return std::to_string(seq / 1024) + "K";
  return std::to_string(seq);
}

}  // namespace

std::string ExplainInfeasible(const CostModel& model, const Deadline& deadline) {
  ScheduleOptions options;
  options.explain_infeasible = false;
  options.deadline = deadline;
  const StrategyResult best = RunScheduler(model, options, true).best;
  if (best.cost.feasible) return "";
  const Cluster& cluster = model.cluster();
  const ModelSpec& spec = model.model();
  const Workload& workload = model.workload();
  const CostConstants& constants = model.constants();
  // A hint is given only when no re-plan behind it was cut short by the deadline (CutShort never
  // turns false again, so every later hint is skipped too).
  const auto cut = [&deadline] { return deadline.CutShort(); };
  const auto fits = [&](const Cluster& c, const Workload& w) {
    return Fits(c, spec, w, constants, deadline);
  };

  // The rank that overflows most, relative to its capacity.
  int worst = 0;
  double worst_fraction = -1;
  for (const RankCost& rc : best.cost.ranks) {
    const double f = rc.memory_bytes / rc.memory_capacity_bytes;
    if (f > worst_fraction) {
      worst_fraction = f;
      worst = rc.rank;
    }
  }
  std::string message = "infeasible: no plan fits memory; in the best plan found (" + best.config +
                        ") " + best.cost.infeasible_reason;
  std::vector<std::string> hints;

  if (workload.recompute != Recompute::kFull && !cut()) {
    Workload w = workload;
    w.recompute = Recompute::kFull;
    if (fits(cluster, w) && !cut()) hints.push_back("with --recompute full it fits");
  }
  if (workload.zero_stage < 3 && !cut()) {
    Workload w = workload;
    w.zero_stage = 3;
    if (fits(cluster, w) && !cut()) hints.push_back("with --zero 3 it fits");
  }
  // More memory on the device type that overflows.
  if (!cut()) {
    const std::string device = cluster.device(worst).name;
    auto with_extra = [&](double extra) {
      Cluster c = cluster;
      for (NodeKind& kind : c.kinds)
        if (kind.device.name == device) kind.device.memory_bytes += extra;
      return fits(c, workload);
    };
    double hi = cluster.device(worst).memory_bytes;
    bool found = with_extra(hi);
    for (int widen = 0; widen < 2 && !found; ++widen) {
      hi *= 4;
      found = with_extra(hi);
    }
    if (found) {
      double lo = 0;
      while (hi - lo > kMemoryQuantum && !cut()) {
        const double mid = 0.5 * (lo + hi);
        (with_extra(mid) ? hi : lo) = mid;
      }
      const int gib = static_cast<int>(std::ceil(hi / kMemoryQuantum));
      if (!cut()) hints.push_back("needs about " + std::to_string(gib) + " GiB more per " + device);
    }
  }
  // A shorter sequence.
  if (!cut()) {
    auto with_seq = [&](int64_t seq) {
      Workload w = workload;
      w.seq_len = seq;
      return fits(cluster, w);
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
      const std::string remedy =
          workload.zero_stage < 3 ? "try more devices or --zero 3" : "try more devices";
      hints.push_back("even --seq " + SeqText(std::min<int64_t>(kSeqQuantum, workload.seq_len)) +
                      " does not fit (the model state alone is too large: " + remedy + ")");
    }
  }
  if (cut())
    hints.push_back("the time limit was reached before the smallest change that fits was found");
  if (!hints.empty()) {
    message += " (hint: ";
    for (size_t i = 0; i < hints.size(); ++i) message += (i ? "; " : "") + hints[i];
    message += ")";
  }
  return message;
}

std::string ExplainInfeasible(const CostModel& model, const ScheduleOptions& options) {
  if (!options.zero_auto && !options.recompute_auto)
    return ExplainInfeasible(model, options.deadline);
  Workload workload = model.workload();
  if (options.zero_auto) workload.zero_stage = 3;
  if (options.recompute_auto) workload.recompute = Recompute::kFull;
  return ExplainInfeasible(CostModel(model.cluster(), model.model(), workload, model.constants()),
                           options.deadline);
}

}  // namespace hexiseq
