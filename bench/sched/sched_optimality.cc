// Optimality gap of the scheduler against the exact search on random small heterogeneous
// clusters (2 to kExactMaxRanks ranks, 2-4 device types, 1-4 GPUs per node, random intra-node and
// NIC bandwidths, random preset models and sequence lengths 16K-256K) with random training
// settings (batch 2, 3, 4 or 8, so that replicas and left-out ranks can pay; ZeRO stage 0-3 and
// recompute none, selective or full, weighted towards the lighter settings), both searches at the
// same settings. Prints every case and the gap percentiles. Three figures per case:
//   gap     = scheduler / exact - 1, exact = the domain optimum refined by descent (what
//             `--strategy exact` returns); negative: the scheduler beat it (outside the domain);
//   domain  = scheduler / domain optimum - 1 (negative where the scheduler's finer token grid
//             pays off);
//   snapped = scheduler's plan rounded onto the domain grid / domain optimum - 1: never negative
//             when the exact search is exact (an ERROR line and exit status 1 otherwise).
//   build/bin/sched_optimality [cases] [seed] [only]
// `only` (optional) restricts the run to some of the cases, e.g. "99,155,91" or "40-80"
// (half-open range [40, 80)); the skipped cases are still drawn so case numbers stay the same.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "sched/bench_header.h"
#include "sched/sched_test_util.h"
#include "sched/scheduler.h"
#include "sched/scheduler_internal.h"

using namespace hexiseq;
using namespace hexiseq::sched_internal;

// "[rank:heads/tokens ...] ..." for each group of a plan, in ring order ("idle" for idle groups),
// replica by replica ("| n seq:" before each when there are several), then the left-out ranks.
std::string Describe(const Plan& plan) {
  std::string out;
  int replica = -1;
  for (const PlanGroup& group : plan.groups) {
    if (NumReplicas(plan) > 1 && group.replica != replica) {
      replica = group.replica;
      out += "| " + std::to_string(ReplicaSequences(plan, replica)) + " seq: ";
    }
    out += "[";
    for (const PlanMember& m : group.members)
      out += std::to_string(m.rank) + ":" + std::to_string(m.heads.size()) + "/" +
             std::to_string(TotalTokens(m.tokens)) + " ";
    out += TotalTokens(group.tokens) == 0 ? "idle]" : "]";
  }
  if (!plan.left_out.empty()) {
    out += " left out";
    for (int rank : plan.left_out) out += " " + std::to_string(rank);
  }
  return out;
}

// The case's training settings, from their own stream so that the clusters, models and sequence
// lengths of case c do not depend on them.
Workload TrainingSettings(uint64_t seed, int c, int64_t seq_len) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(c));
  // Weighted towards the settings that need the least memory: most draws fit nothing on 2-3 GPUs.
  const int batches[] = {2, 3, 4, 8};
  const int stages[] = {0, 1, 2, 2, 3, 3, 3, 3};
  const Recompute policies[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull,
                                Recompute::kFull};
  Workload w;
  w.seq_len = seq_len;
  w.batch = batches[rng() % 4];
  w.zero_stage = stages[rng() % 8];
  w.recompute = policies[rng() % 4];
  return w;
}

int main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 200;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  std::set<int> only;
  if (argc > 3) {
    const std::string arg = argv[3];
    const size_t dash = arg.find('-');
    if (dash != std::string::npos) {
      const int a = std::atoi(arg.substr(0, dash).c_str()),
                b = std::atoi(arg.substr(dash + 1).c_str());
      for (int c = a; c < b; ++c) only.insert(c);
    } else {
      size_t pos = 0;
      while (pos <= arg.size()) {
        const size_t comma = std::min(arg.find(',', pos), arg.size());
        if (comma > pos) only.insert(std::atoi(arg.substr(pos, comma - pos).c_str()));
        pos = comma + 1;
      }
    }
  }
  PrintBenchHeader("sched_optimality");
  std::mt19937_64 rng(seed);
  std::vector<double> gaps, domain_gaps, snapped_gaps;
  int infeasible = 0, missed = 0,
      beaten_in_domain = 0;  // missed: the exact search fits, the scheduler does not
  double sched_time = 0, exact_time = 0;
  std::printf("%-5s %-5s %-12s %-8s %-12s %-12s %-12s %-8s %-8s %-8s %-9s %-8s %s\n", "case",
              "ranks", "model", "seq", "sched_s", "exact_s", "domain_s", "gap_%", "domain_%",
              "snap_%", "points", "exact_t", "cluster");
  for (int c = 0; c < cases; ++c) {
    sched_test::SmallCase drawn = sched_test::DrawSmallCase(rng, kExactMaxRanks);
    const Cluster& cluster = drawn.cluster;
    const ModelSpec& model_spec = drawn.model;
    const int64_t seq_len = drawn.seq_len;
    const int ranks = cluster.num_ranks();
    if (!only.empty() && !only.count(c)) continue;
    const Workload w = TrainingSettings(seed, c, seq_len);
    CostModel model(cluster, model_spec, w);
    std::string desc;
    for (const NodeKind& k : cluster.kinds)
      desc += std::to_string(k.count) + "x" + std::to_string(k.gpus_per_node) + "x" +
              k.device.name + " ";
    desc += "b" + std::to_string(w.batch) + " z" + std::to_string(w.zero_stage) + " " +
            RecomputeName(w.recompute) + " ";
    auto t0 = std::chrono::steady_clock::now();
    auto s = Schedule(model.problem());
    auto t1 = std::chrono::steady_clock::now();
    ScheduleOptions exact_options;
    exact_options.explain_infeasible = false;
    auto e = ExactSearch(model.problem(), exact_options);
    auto t2 = std::chrono::steady_clock::now();
    sched_time += std::chrono::duration<double>(t1 - t0).count();
    exact_time += std::chrono::duration<double>(t2 - t1).count();
    if (!s || !e) {
      ++infeasible;
      std::printf("%-5d %-5d %-12s %-8lld %-12s %-12s %-8.2f %s\n", c, ranks,
                  model_spec.name.c_str(), static_cast<long long>(w.seq_len),
                  s ? "ok" : "infeasible", e ? "ok" : "infeasible",
                  std::chrono::duration<double>(t2 - t1).count(), desc.c_str());
      if (s.has_value() != e.has_value() && e) {
        std::printf("ERROR: case %d: the exact search fits but the scheduler does not\n", c);
        ++missed;
      }
      continue;
    }
    if (!Validate(s->plan, cluster, model_spec) || !Validate(e->plan, cluster, model_spec)) {
      std::printf("ERROR: invalid plan in case %d\n", c);
      return 1;
    }
    const ExactTrainingResult domain = ExactTrainingOptimum(model, exact_options);
    double snapped = 0;
    if (const auto snap = SnapPlanToExactDomain(model, s->plan)) {
      const PlanCost cost = model.Evaluate(*snap);
      snapped = cost.feasible ? cost.iteration_seconds / domain.best.cost.iteration_seconds - 1 : 0;
      if (cost.feasible) snapped_gaps.push_back(snapped);
      if (cost.feasible && snapped < -1e-9) {
        std::printf(
            "ERROR: case %d: the scheduler's plan on the domain grid beats the exact search\n", c);
        ++beaten_in_domain;
      }
    }
    const double gap = s->cost.iteration_seconds / e->cost.iteration_seconds - 1;
    const double domain_gap = s->cost.iteration_seconds / domain.best.cost.iteration_seconds - 1;
    gaps.push_back(gap);
    domain_gaps.push_back(domain_gap);
    std::printf(
        "%-5d %-5d %-12s %-8lld %-12.5g %-12.5g %-12.5g %-8.3f %-8.3f %-8.3f %-9lld %-8.2f %s| "
        "%s\n",
        c, ranks, model_spec.name.c_str(), static_cast<long long>(w.seq_len),
        s->cost.iteration_seconds, e->cost.iteration_seconds, domain.best.cost.iteration_seconds,
        100 * gap, 100 * domain_gap, 100 * snapped, static_cast<long long>(domain.evaluated),
        std::chrono::duration<double>(t2 - t1).count(), desc.c_str(), s->config.c_str());
    if (!only.empty())  // the plans of the listed cases, member by member
      std::printf("      scheduler %s\n      exact     %s\n", Describe(s->plan).c_str(),
                  Describe(e->plan).c_str());
    std::fflush(stdout);
  }
  auto summary = [&](const char* label, std::vector<double> values) {
    std::sort(values.begin(), values.end());
    auto pct = [&](double p) {
      return values[std::min(values.size() - 1, size_t(p * (values.size() - 1) + 0.5))];
    };
    int below = 0;
    for (double v : values) below += v < -1e-9;
    if (values.empty()) return;
    std::printf(
        "%-8s %%: p50 %.3f  p95 %.3f  max %.3f  min %.3f  (scheduler better in %d of %zu)\n", label,
        100 * pct(0.5), 100 * pct(0.95), 100 * values.back(), 100 * values.front(), below,
        values.size());
  };
  if (!only.empty()) std::printf("\nsubset: %zu of the cases\n", only.size());
  std::printf("\ncases %d  feasible %zu  infeasible %d\n", cases, gaps.size(), infeasible);
  summary("gap", gaps);
  summary("domain", domain_gaps);
  summary("snapped", snapped_gaps);
  std::printf("time: scheduler %.2f s total, exact %.2f s total\n", sched_time, exact_time);
  if (missed > 0)
    std::printf("ERROR: %d cases where the exact search fits and the scheduler does not\n", missed);
  return missed > 0 || beaten_in_domain > 0 ? 1 : 0;
}
