// Planning time of the scheduler on mixed 4-type clusters (H100, A100, A800, L40S nodes of 8),
// llama3-70b at 1M tokens, median of repeats. Checks each plan (valid, never worse than the best
// baseline) before reporting its time.
//   build-sched/bin/sched_speed [gpus...] [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sched/bench_header.h"
#include "sched/sched_test_util.h"
#include "sched/scheduler.h"

using namespace hexiseq;

int main(int argc, char** argv) {
  std::vector<int> sizes;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc)
      repeats = std::atoi(argv[++i]);
    else
      sizes.push_back(std::atoi(a.c_str()));
  }
  if (sizes.empty()) sizes = {16, 128, 1024, 4096, 8192};
  PrintBenchHeader("sched_speed");
  std::printf("%-6s %-8s %-10s %-12s %-12s %-10s %s\n", "gpus", "repeats", "median_s", "min_s",
              "iter_s", "vs_base", "config");
  for (int gpus : sizes) {
    Cluster cluster = sched_test::MixedCluster(gpus);
    Workload w;
    w.seq_len = 1 << 20;
    CostModel model(cluster, sched_test::Model("llama3-70b"), w);
    std::vector<double> times;
    Result<StrategyResult> result;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      result = Schedule(model.problem());
      times.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (!result) {
      std::printf("%-6d infeasible: %s\n", gpus, result.error().message.c_str());
      continue;
    }
    if (!Validate(result->plan, cluster, model.model())) {
      std::printf("%-6d INVALID PLAN\n", gpus);
      return 1;
    }
    double base = 1e300;
    for (const StrategyResult& b : AllBaselines(model.problem()))
      if (b.feasible()) base = std::min(base, b.cost.iteration_seconds);
    std::sort(times.begin(), times.end());
    std::printf("%-6d %-8d %-10.4f %-12.4f %-12.4f %-10.4f %s\n", gpus, repeats,
                times[times.size() / 2], times.front(), result->cost.iteration_seconds,
                base / result->cost.iteration_seconds, result->config.c_str());
    std::fflush(stdout);
  }
  return 0;
}
