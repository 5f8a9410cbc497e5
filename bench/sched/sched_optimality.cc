// Optimality gap of the scheduler against the exact search on random small heterogeneous
// clusters (2-8 ranks, 2-4 device types, 1-4 GPUs per node, random intra-node and NIC
// bandwidths, random preset models and sequence lengths 16K-256K). Prints every case and the
// gap percentiles. gap = scheduler / exact - 1 (negative: the scheduler beat the exact grid).
//   build-sched/bin/sched_optimality [cases] [seed] [only]
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

using namespace hexiseq;

int main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 200;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  std::set<int> only;
  if (argc > 3) {
    const std::string arg = argv[3];
    const size_t dash = arg.find('-');
    if (dash != std::string::npos) {
      const int a = std::atoi(arg.substr(0, dash).c_str()), b = std::atoi(arg.substr(dash + 1).c_str());
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
  const char* models[] = {"llama3-8b", "llama2-7b", "llama3.2-3b", "gpt-3b", "llama2-13b",
                          "gpt-7b",    "llama3-70b"};
  std::mt19937_64 rng(seed);
  std::vector<double> gaps;
  int infeasible = 0, missed = 0;  // missed: the exact search fits, the scheduler does not
  double sched_time = 0, exact_time = 0;
  std::printf("%-5s %-5s %-12s %-8s %-12s %-12s %-9s %s\n", "case", "ranks", "model", "seq",
              "sched_s", "exact_s", "gap_%", "cluster");
  for (int c = 0; c < cases; ++c) {
    const int ranks = 2 + static_cast<int>(rng() % 7);
    Cluster cluster = sched_test::RandomSmallCluster(rng, ranks);
    const ModelSpec model_spec = sched_test::Model(models[rng() % 7]);
    Workload w;
    w.seq_len = int64_t{1} << (14 + rng() % 5);
    if (!only.empty() && !only.count(c)) continue;
    CostModel model(cluster, model_spec, w);
    std::string desc;
    for (const NodeKind& k : cluster.kinds)
      desc += std::to_string(k.count) + "x" + std::to_string(k.gpus_per_node) + "x" +
              k.device.name + " ";
    auto t0 = std::chrono::steady_clock::now();
    auto s = Schedule(model);
    auto t1 = std::chrono::steady_clock::now();
    ScheduleOptions exact_options;
    exact_options.explain_infeasible = false;
    auto e = ExactSearch(model, exact_options);
    auto t2 = std::chrono::steady_clock::now();
    sched_time += std::chrono::duration<double>(t1 - t0).count();
    exact_time += std::chrono::duration<double>(t2 - t1).count();
    if (!s || !e) {
      ++infeasible;
      std::printf("%-5d %-5d %-12s %-8lld %-12s %-12s %-9s %s\n", c, ranks, model_spec.name.c_str(),
                  static_cast<long long>(w.seq_len), s ? "ok" : "infeasible",
                  e ? "ok" : "infeasible", "-", desc.c_str());
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
    const double gap = s->cost.iteration_seconds / e->cost.iteration_seconds - 1;
    gaps.push_back(gap);
    std::printf("%-5d %-5d %-12s %-8lld %-12.5g %-12.5g %-9.3f %s| %s\n", c, ranks,
                model_spec.name.c_str(), static_cast<long long>(w.seq_len),
                s->cost.iteration_seconds, e->cost.iteration_seconds, 100 * gap, desc.c_str(),
                s->config.c_str());
    std::fflush(stdout);
  }
  std::sort(gaps.begin(), gaps.end());
  auto pct = [&](double p) {
    return gaps.empty() ? 0.0 : gaps[std::min(gaps.size() - 1, size_t(p * (gaps.size() - 1) + 0.5))];
  };
  if (!only.empty()) std::printf("\nsubset: %zu of the cases\n", only.size());
  std::printf("\ncases %d  feasible %zu  infeasible %d\n", cases, gaps.size(), infeasible);
  std::printf("gap %%: p50 %.3f  p95 %.3f  max %.3f  min %.3f\n", 100 * pct(0.5), 100 * pct(0.95),
              100 * (gaps.empty() ? 0 : gaps.back()), 100 * (gaps.empty() ? 0 : gaps.front()));
  std::printf("time: scheduler %.2f s total, exact %.2f s total\n", sched_time, exact_time);
  if (missed > 0) std::printf("ERROR: %d cases where the exact search fits and the scheduler does not\n", missed);
  return missed > 0 ? 1 : 0;
}
