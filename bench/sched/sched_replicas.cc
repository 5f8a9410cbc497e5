// The scheduler with data-parallel replicas, left-out ranks and --zero/--recompute auto, on mixed
// 4-type clusters (H100, A100, A800, L40S nodes of 8), llama3-8b. Checks every plan (valid, never
// slower than the best baseline at the same settings) before it reports.
//   sched_replicas speed [gpus...] [--threads N]
//                                    planning time, seq 128K, batch 16: Schedule at zero 1 /
//                                    full recompute, and RunStrategy with both auto (on N
//                                    planner threads; default as the CLI's: the machine's
//                                    hardware threads, at most 8)
//   sched_replicas ideal             fraction of ideal, 32-128 GPUs, 32K and 128K, batch 8 and
//                                    16, both auto: the plan and the best baseline's, each
//                                    predicted (cost model) and simulated (kSimLayers explicit
//                                    layers, as bench/eval)
//   sched_replicas quality           the predicted iteration time of every strategy's plan (both
//                                    auto) on the cases of ideal and speed 128 1024, to compare
//                                    a scheduler change before and after
// Planning times are wall-clock and CPU time of the process (the machine may be shared).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "sched/bench_header.h"
#include "sched/parallel.h"
#include "sched/sched_test_util.h"
#include "sched/strategies.h"
#include "sched/training_search.h"
#include "sim/simulator.h"

using namespace hexiseq;

namespace {

constexpr int64_t kSpeedSeq = 131072;
constexpr int kSpeedBatch = 16;

struct Timing {
  double wall = 0, cpu = 0;  // seconds
};

template <typename F>
Timing Seconds(F&& run) {
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();
  run();
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC};
}

constexpr int kSimLayers = 8;  // explicit layers per simulated plan, as bench/eval

// The fastest feasible baseline (predicted) over every open training configuration.
Result<StrategyResult> FastestBaseline(const CostModel& model, const ScheduleOptions& options) {
  Result<StrategyResult> best = Infeasible("no baseline fits");
  for (const std::string name : {"ring", "ulysses", "usp", "hetero-ring", "subset"}) {
    auto result = RunStrategy(model.problem(), name, options);
    if (result && result->feasible() &&
        (!best || result->cost.iteration_seconds < best->cost.iteration_seconds))
      best = std::move(result);
  }
  return best;
}

double BestBaseline(const CostModel& model, const ScheduleOptions& options) {
  const auto best = FastestBaseline(model, options);
  return best ? best->cost.iteration_seconds : 1e300;
}

// The plan's simulated iteration seconds at its own ZeRO stage and recompute policy; exits
// non-zero when the simulator refuses it.
double SimulatedSeconds(const CostModel& model, const Plan& plan) {
  sim::SimOptions options;
  options.explicit_layers = std::min(kSimLayers, model.model().layers);
  const Problem at = WithPlanTraining(model.problem(), plan);
  auto result = sim::Simulate(plan, at, options);
  if (!result) {
    std::printf("SIMULATION FAILED: %s\n", result.error().message.c_str());
    std::exit(1);
  }
  return result->iteration_seconds;
}

// Exits non-zero on an invalid plan or one slower than a baseline.
void Check(const CostModel& model, const StrategyResult& result, double best_baseline) {
  if (!Validate(result.plan, model.cluster(), model.model())) {
    std::printf("INVALID PLAN\n");
    std::exit(1);
  }
  if (result.cost.iteration_seconds > best_baseline * (1 + 1e-9)) {
    std::printf("SLOWER THAN A BASELINE: %.6g > %.6g\n", result.cost.iteration_seconds,
                best_baseline);
    std::exit(1);
  }
}

int Speed(std::vector<int> sizes, int threads) {
  if (sizes.empty()) sizes = {128, 1024, 8192};
  std::printf("# planner threads: %d\n", threads);
  std::printf("%-6s %-14s %-14s %-12s %-12s %-12s %-9s %s\n", "gpus", "fixed_plan_s", "fixed_cpu_s",
              "auto_plan_s", "auto_cpu_s", "iter_s", "replicas", "config");
  for (int gpus : sizes) {
    Workload workload;
    workload.seq_len = kSpeedSeq;
    workload.batch = kSpeedBatch;
    workload.zero_stage = 1;
    const CostModel model(sched_test::MixedCluster(gpus), sched_test::Model("llama3-8b"), workload);
    Result<StrategyResult> fixed, chosen;
    ScheduleOptions fixed_options;
    fixed_options.threads = threads;
    const Timing fixed_seconds = Seconds([&] { fixed = Schedule(model.problem(), fixed_options); });
    std::fprintf(stderr, "%d GPUs: fixed settings planned in %.3f s (%.3f s CPU)\n", gpus,
                 fixed_seconds.wall, fixed_seconds.cpu);
    ScheduleOptions automatic;
    automatic.zero_auto = automatic.recompute_auto = true;
    automatic.threads = threads;
    const Timing auto_seconds =
        Seconds([&] { chosen = RunStrategy(model.problem(), "hexiseq", automatic); });
    if (!fixed || !chosen) {
      std::printf("%-6d no plan\n", gpus);
      continue;
    }
    Check(model, *fixed, BestBaseline(model, {}));
    std::printf("%-6d %-14.3f %-14.3f %-12.3f %-12.3f %-12.4f %-9d %s\n", gpus, fixed_seconds.wall,
                fixed_seconds.cpu, auto_seconds.wall, auto_seconds.cpu,
                chosen->cost.iteration_seconds, NumReplicas(chosen->plan), chosen->config.c_str());
    std::fflush(stdout);
  }
  return 0;
}

int Ideal() {
  std::printf("%-6s %-8s %-6s %-10s %-10s %-10s %-10s %-12s %-6s %s\n", "gpus", "seq", "batch",
              "hexiseq", "sim", "baseline", "sim", "plan_s", "zero", "config");
  ScheduleOptions automatic;
  automatic.zero_auto = automatic.recompute_auto = true;
  for (int gpus : {32, 64, 128})
    for (int64_t seq : {int64_t{32768}, int64_t{131072}})
      for (int batch : {8, 16}) {
        Workload workload;
        workload.seq_len = seq;
        workload.batch = batch;
        const CostModel model(sched_test::MixedCluster(gpus), sched_test::Model("llama3-8b"),
                              workload);
        Result<StrategyResult> chosen;
        const double seconds =
            Seconds([&] { chosen = RunStrategy(model.problem(), "hexiseq", automatic); }).wall;
        if (!chosen) {
          std::printf("%-6d %-8lld %-6d no plan\n", gpus, static_cast<long long>(seq), batch);
          continue;
        }
        const auto baseline = FastestBaseline(model, automatic);
        if (!baseline) {
          std::printf("NO BASELINE FITS\n");
          return 1;
        }
        Check(model, *chosen, baseline->cost.iteration_seconds);
        const double ideal = IdealIterationSeconds(model.problem(), automatic);
        std::printf(
            "%-6d %-8lld %-6d %-10.3f %-10.3f %-10.3f %-10.3f %-12.3f %d/%-4s %s\n", gpus,
            static_cast<long long>(seq), batch, ideal / chosen->cost.iteration_seconds,
            ideal / SimulatedSeconds(model, chosen->plan), ideal / baseline->cost.iteration_seconds,
            ideal / SimulatedSeconds(model, baseline->plan), seconds, chosen->plan.zero_stage,
            chosen->plan.recompute.c_str(), chosen->config.c_str());
        std::fflush(stdout);
      }
  return 0;
}

// Every strategy's predicted iteration time (both auto; "-" where none fits or applies).
int Quality() {
  struct Case {
    int gpus;
    int64_t seq;
    int batch;
  };
  std::vector<Case> cases;
  for (int gpus : {32, 64, 128})
    for (int64_t seq : {int64_t{32768}, kSpeedSeq})
      for (int batch : {8, 16}) cases.push_back({gpus, seq, batch});
  cases.push_back({1024, kSpeedSeq, kSpeedBatch});  // speed 1024 (speed 128 is above)
  ScheduleOptions automatic;
  automatic.zero_auto = automatic.recompute_auto = true;
  std::printf("%-6s %-8s %-6s %-12s %-12s %-10s %s\n", "gpus", "seq", "batch", "strategy", "iter_s",
              "training", "config");
  for (const Case& c : cases) {
    Workload workload;
    workload.seq_len = c.seq;
    workload.batch = c.batch;
    const CostModel model(sched_test::MixedCluster(c.gpus), sched_test::Model("llama3-8b"),
                          workload);
    double hexiseq = 0;
    for (const std::string name : {"hexiseq", "ring", "ulysses", "usp", "hetero-ring", "subset"}) {
      auto result = RunStrategy(model.problem(), name, automatic);
      const bool scored = result && result->feasible();
      if (scored && name == "hexiseq") hexiseq = result->cost.iteration_seconds;
      if (scored && hexiseq > 0 && name != "hexiseq" &&
          result->cost.iteration_seconds * (1 + 1e-9) < hexiseq)
        std::printf("HEXISEQ SLOWER THAN %s\n", name.c_str());
      const std::string training =
          scored ? std::to_string(result->plan.zero_stage) + "/" + result->plan.recompute : "-";
      std::printf("%-6d %-8lld %-6d %-12s %-12.6g %-10s %s\n", c.gpus,
                  static_cast<long long>(c.seq), c.batch, name.c_str(),
                  scored ? result->cost.iteration_seconds : 0.0, training.c_str(),
                  scored ? result->config.c_str() : "-");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  PrintBenchHeader("sched_replicas");
  const std::string mode = argc > 1 ? argv[1] : "speed";
  std::vector<int> sizes;
  int threads = DefaultPlannerThreads();
  for (int arg = 2; arg < argc; ++arg) {
    if (std::string(argv[arg]) == "--threads" && arg + 1 < argc)
      threads = std::max(1, std::atoi(argv[++arg]));
    else
      sizes.push_back(std::atoi(argv[arg]));
  }
  if (mode == "ideal") return Ideal();
  if (mode == "quality") return Quality();
  return Speed(sizes, threads);
}
