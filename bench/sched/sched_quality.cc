// Plan quality on the example clusters: the scheduler's predicted iteration time against every
// baseline (speedup over the best one) and as a fraction of the ideal (aggregate-compute bound).
//   build-sched/bin/sched_quality [--seq N] [models...]   (run from the repository root)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "sched/bench_header.h"
#include "sched/sched_test_util.h"
#include "sched/scheduler.h"
#include "spec/device.h"

using namespace hexiseq;

int main(int argc, char** argv) {
  int64_t seq = 1 << 20;
  std::vector<std::string> models;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seq" && i + 1 < argc)
      seq = std::atoll(argv[++i]);
    else
      models.push_back(a);
  }
  if (models.empty()) models = {"llama3-8b", "llama3-70b"};
  PrintBenchHeader("sched_quality");
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("examples/clusters"))
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::printf("%-34s %-11s %-10s %-10s %-22s %-9s %-8s %s\n", "cluster", "model", "hexiseq_s",
              "best_base", "(which)", "speedup", "ideal_%", "hexiseq config");
  DeviceCatalog catalog;
  for (const std::string& file : files) {
    auto cluster = LoadCluster(file, catalog);
    if (!cluster) {
      std::printf("%s: %s\n", file.c_str(), cluster.error().message.c_str());
      continue;
    }
    for (const std::string& name : models) {
      Workload w;
      w.seq_len = seq;
      CostModel model(*cluster, sched_test::Model(name), w);
      auto r = Schedule(model.problem());
      const StrategyResult* best = nullptr;
      const std::vector<StrategyResult> baselines = AllBaselines(model.problem());
      for (const StrategyResult& b : baselines)
        if (b.feasible() && (!best || b.cost.iteration_seconds < best->cost.iteration_seconds))
          best = &b;
      const std::string cname = std::filesystem::path(file).stem().string();
      if (!r) {
        std::printf("%-34s %-11s infeasible\n", cname.c_str(), name.c_str());
        continue;
      }
      const double ideal = model.IdealIterationSeconds();
      std::printf("%-34s %-11s %-10.3f %-10.3f %-22s %-9.3f %-8.1f %s\n", cname.c_str(),
                  name.c_str(), r->cost.iteration_seconds,
                  best ? best->cost.iteration_seconds : 0.0, best ? best->strategy.c_str() : "none",
                  best ? best->cost.iteration_seconds / r->cost.iteration_seconds : 0.0,
                  100 * ideal / r->cost.iteration_seconds, r->config.c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}
