// Fidelity of the analytical cost model against the event-driven simulator, strategy by strategy,
// on random heterogeneous clusters: 2-6 GPU types, 8-128 GPUs, NVLink and PCIe nodes, NICs
// 12.5-50 GB/s; models gpt-3b/7b/13b, llama3-8b/70b; 32K-1M tokens; all six strategies. Reports
// mean, p95 and max |model - sim| / sim per strategy and Kendall's tau of the plans' ranking per
// scenario. Replica plans (shapes the scheduler does not pick here) are composed from baselines on
// node subsets in the same scenarios and reported in a table of their own: one ring per node as
// replicas, one usp per node kind as replicas (with and without the slowest kind left out), and
// the subset baseline with its idle ranks left out; batch 2 x replicas split by the replicas'
// modelled speed. With `routes`, also simulates every plan with the other dK/dV route
// (DkvRoute::kDirectToOwner vs the schedule's kAlongChain) and reports the ratio of simulated
// iteration times per strategy: the evidence behind the schedule's policy.
// `layers=N` simulates N layers explicitly (default 1; at most the model's).
// Usage: fidelity_bench [min_feasible_plans=300] [seed=1] [routes] [layers=N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_commit.h"  // HEXISEQ_COMMIT, written at build time (bench/bench_commit.cmake)
#include "sched/baselines.h"
#include "sched/scheduler.h"
#include "sim/simulator.h"
#include "spec/cluster.h"
#include "spec/device.h"
#include "spec/model.h"

namespace hexiseq {
namespace {

constexpr double kGBps = 1e9;
constexpr int kMinGpus = 8, kMaxGpus = 128;
constexpr double kP95 = 0.95;

const std::vector<const char*> kDevices = {"H100-SXM", "H200",      "A100-SXM-80G", "A800", "H800",
                                           "L40S",     "H100-PCIe", "A100-40G",     "L4"};
const std::vector<const char*> kModels = {"gpt-3b", "gpt-7b", "gpt-13b", "llama3-8b", "llama3-70b"};
const std::vector<int64_t> kSeqs = {32768, 65536, 131072, 262144, 524288, 1048576};
const std::vector<double> kNics = {12.5 * kGBps, 25 * kGBps, 50 * kGBps};

struct Scenario {
  Cluster cluster;
  ModelSpec model;
  Workload workload;
  std::string label;
};

template <typename T>
const T& Pick(const std::vector<T>& options, std::mt19937_64& rng) {
  return options[std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)];
}

// A random cluster: distinct device types, each with 1+ nodes (8 GPUs on NVLink devices, 4 or 8
// on PCIe ones), its own NIC; 8..128 GPUs in all.
Cluster RandomCluster(std::mt19937_64& rng, std::string* label) {
  std::vector<const char*> devices = kDevices;
  std::shuffle(devices.begin(), devices.end(), rng);
  const int types = std::uniform_int_distribution<int>(2, 6)(rng);
  const int target = std::uniform_int_distribution<int>(kMinGpus, kMaxGpus)(rng);
  const DeviceCatalog catalog;
  Cluster cluster;
  int gpus = 0;
  for (int type = 0; type < types && gpus < kMaxGpus; ++type) {
    const DeviceSpec device = *catalog.Find(devices[type], "fidelity");
    NodeKind kind;
    kind.device = device;
    const bool pcie = device.intra_node_bytes_per_second < 100 * kGBps;
    kind.gpus_per_node = pcie && rng() % 2 ? 4 : 8;
    kind.intra_node_bytes_per_second = device.intra_node_bytes_per_second;
    kind.nic_bytes_per_second = Pick(kNics, rng);
    kind.latency_seconds = 3e-6;
    const int share = std::max(kind.gpus_per_node, (target - gpus) / (types - type));
    kind.count = std::max(1, std::min(share, kMaxGpus - gpus) / kind.gpus_per_node);
    gpus += kind.count * kind.gpus_per_node;
    *label +=
        std::to_string(kind.count) + "x" + std::to_string(kind.gpus_per_node) + " " + device.name +
        " @" +
        std::to_string(static_cast<int>(kind.nic_bytes_per_second / 1e8) / 10.0).substr(0, 4) +
        "; ";
    cluster.kinds.push_back(kind);
  }
  cluster.name = "random";
  cluster.Finalize();
  return cluster;
}

Scenario RandomScenario(std::mt19937_64& rng) {
  Scenario scenario;
  scenario.cluster = RandomCluster(rng, &scenario.label);
  const char* model = Pick(kModels, rng);
  scenario.model = *LoadModel(model);
  scenario.workload.seq_len = Pick(kSeqs, rng);
  scenario.label += std::string(model) + " " + std::to_string(scenario.workload.seq_len / 1024) +
                    "K (" + std::to_string(scenario.cluster.num_ranks()) + " GPUs)";
  return scenario;
}

std::vector<StrategyResult> AllStrategies(const CostModel& cost) {
  std::vector<StrategyResult> results = {
      RingBaseline(cost.problem()), UlyssesBaseline(cost.problem()), UspBaseline(cost.problem()),
      HeteroRingBaseline(cost.problem()), SubsetBaseline(cost.problem())};
  ScheduleOptions options;
  options.explain_infeasible = false;
  if (auto planned = Schedule(cost.problem(), options)) {
    planned->strategy = "hexiseq";
    results.push_back(*planned);
  }
  return results;
}

// ---- Replica plans composed from baselines on node subsets.

using Baseline = StrategyResult (*)(const Problem&, const Deadline&);  // run without a deadline

// Nodes [first_node, first_node + count) of one kind as a cluster of their own (world ranks in
// `world_ranks`).
Cluster NodeSubset(const Cluster& cluster, int first_node, int count,
                   std::vector<int>* world_ranks) {
  const NodeInfo& first = cluster.nodes[first_node];
  Cluster part;
  part.name = cluster.name + " part";
  part.inter_node_latency_seconds = cluster.inter_node_latency_seconds;
  part.kinds = {cluster.kinds[first.kind]};
  part.kinds[0].count = count;
  for (const LinkOverride& link : cluster.links)
    if (link.kind_a == first.kind && link.kind_b == first.kind)
      part.links.push_back({0, 0, link.bytes_per_second});
  part.Finalize();
  world_ranks->clear();
  for (int node = first_node; node < first_node + count; ++node)
    for (int local = 0; local < cluster.nodes[node].num_ranks; ++local)
      world_ranks->push_back(cluster.nodes[node].first_rank + local);
  return part;
}

struct Part {
  Plan plan;  // over the world ranks
  double seconds_per_sequence = 0;
};

// A baseline planned on nodes [first_node, first_node + count) alone (one sequence), or nothing
// when it is infeasible there.
std::optional<Part> BaselineOnNodes(const Scenario& scenario, Baseline baseline, int first_node,
                                    int count) {
  std::vector<int> world_ranks;
  const Cluster part = NodeSubset(scenario.cluster, first_node, count, &world_ranks);
  Workload workload = scenario.workload;
  workload.batch = 1;
  const StrategyResult result = baseline(Problem{part, scenario.model, workload}, Deadline{});
  if (!result.feasible()) return std::nullopt;
  return Part{EmbedPlan(result.plan, world_ranks, scenario.cluster.num_ranks()),
              result.cost.iteration_seconds - result.cost.grad_sync_seconds};
}

// The replicas as one plan: 2 x replicas sequences, one each and the rest by modelled speed.
Plan ComposeReplicas(std::vector<Part> parts, const std::string& strategy) {
  const int batch = 2 * static_cast<int>(parts.size());
  std::vector<double> speeds;
  for (const Part& part : parts) speeds.push_back(1 / part.seconds_per_sequence);
  const std::vector<int64_t> extra = LargestRemainder(batch - parts.size(), speeds);
  std::vector<Plan> plans;
  for (size_t replica = 0; replica < parts.size(); ++replica) {
    plans.push_back(parts[replica].plan);
    plans.back().batch = 1 + static_cast<int>(extra[replica]);
  }
  Plan plan = MergeReplicas(plans);
  plan.strategy = strategy;
  return plan;
}

// The nodes of each kind: (first node, count), in cluster order.
std::vector<std::pair<int, int>> KindNodes(const Cluster& cluster) {
  std::vector<std::pair<int, int>> kinds;
  for (const NodeInfo& node : cluster.nodes) {
    if (kinds.empty() || cluster.nodes[kinds.back().first].kind != node.kind)
      kinds.push_back({node.node, 0});
    ++kinds.back().second;
  }
  return kinds;
}

// The kind index (into KindNodes) with the least GEMM throughput per node.
size_t SlowestKind(const Cluster& cluster, const std::vector<std::pair<int, int>>& kinds) {
  size_t slowest = 0;
  auto node_flops = [&](size_t index) {
    const NodeInfo& node = cluster.nodes[kinds[index].first];
    return node.num_ranks * cluster.kinds[node.kind].device.GemmFlops();
  };
  for (size_t index = 1; index < kinds.size(); ++index)
    if (node_flops(index) < node_flops(slowest)) slowest = index;
  return slowest;
}

// The subset baseline's plan with its idle ranks left out instead of in an idle group.
std::optional<Plan> SubsetLeavingOut(const CostModel& cost) {
  StrategyResult subset = SubsetBaseline(cost.problem());
  if (!subset.feasible()) return std::nullopt;
  Plan plan = subset.plan;
  plan.predicted.reset();
  std::erase_if(plan.groups, [&](const PlanGroup& group) {
    if (TotalTokens(group.tokens) > 0) return false;
    plan.left_out.insert(plan.left_out.end(), group.ranks.begin(), group.ranks.end());
    return true;
  });
  if (plan.left_out.empty()) return std::nullopt;
  std::sort(plan.left_out.begin(), plan.left_out.end());
  plan.strategy = "subset, left out";
  return plan;
}

// Every composed replica plan of a scenario whose parts are all feasible.
std::vector<Plan> ReplicaPlans(const Scenario& scenario) {
  std::vector<Plan> plans;
  std::vector<Part> per_node;
  for (const NodeInfo& node : scenario.cluster.nodes)
    if (auto part = BaselineOnNodes(scenario, RingBaseline, node.node, 1))
      per_node.push_back(*part);
  if (per_node.size() == scenario.cluster.nodes.size() && per_node.size() > 1)
    plans.push_back(ComposeReplicas(per_node, "ring per node"));
  const std::vector<std::pair<int, int>> kinds = KindNodes(scenario.cluster);
  const size_t slowest = SlowestKind(scenario.cluster, kinds);
  std::vector<Part> per_kind, without_slowest;
  for (size_t index = 0; index < kinds.size(); ++index) {
    auto part = BaselineOnNodes(scenario, UspBaseline, kinds[index].first, kinds[index].second);
    if (!part) continue;
    per_kind.push_back(*part);
    if (index != slowest) without_slowest.push_back(*part);
  }
  if (per_kind.size() == kinds.size()) plans.push_back(ComposeReplicas(per_kind, "usp per kind"));
  if (without_slowest.size() + 1 == kinds.size() && without_slowest.size() > 1)
    plans.push_back(ComposeReplicas(without_slowest, "usp per kind, slowest left out"));
  if (auto subset =
          SubsetLeavingOut(CostModel(scenario.cluster, scenario.model, scenario.workload)))
    plans.push_back(*subset);
  return plans;
}

struct Sample {
  double error = 0;  // (model - sim) / sim
  std::string where;
  std::string term;  // the term whose model and simulated values differ most
};

Sample MakeSample(double model_seconds, const sim::SimResult& sim, const std::string& where) {
  const sim::SimTerm* term = sim::LargestDisagreement(sim);
  char term_text[160];
  std::snprintf(term_text, sizeof term_text, "%s %.3f/%.3f s", term->name.c_str(),
                term->model_seconds, term->sim_seconds);
  return {model_seconds / sim.iteration_seconds - 1, where, term_text};
}

// Simulates `explicit_layers` layers explicitly (at most the model's).
sim::SimOptions Layers(const ModelSpec& model, int explicit_layers) {
  sim::SimOptions options;
  options.explicit_layers = std::min(model.layers, explicit_layers);
  return options;
}

// The composed replica plans of a scenario that the model finds feasible, each scored by the
// model (batch = the plan's) and simulated. False when one fails to simulate (a bug).
bool SampleReplicaPlans(const Scenario& scenario, int explicit_layers,
                        std::map<std::string, std::vector<Sample>>& samples) {
  for (const Plan& plan : ReplicaPlans(scenario)) {
    Workload workload = scenario.workload;
    workload.batch = plan.batch;
    const CostModel cost(scenario.cluster, scenario.model, workload);
    const PlanCost predicted = cost.Evaluate(plan);
    if (!predicted.feasible) continue;
    auto sim = sim::Simulate(plan, cost.problem(), Layers(scenario.model, explicit_layers));
    if (!sim) {
      std::fprintf(stderr, "simulate failed: %s\n", sim.error().message.c_str());
      return false;
    }
    std::string split;
    for (int sequences : plan.replica_sequences)
      split += (split.empty() ? "" : "/") + std::to_string(sequences);
    const std::string where = scenario.label + " " + std::to_string(NumReplicas(plan)) +
                              " replicas, sequences " + (split.empty() ? "1" : split) + ", " +
                              std::to_string(plan.left_out.size()) + " left out";
    samples[plan.strategy].push_back(MakeSample(predicted.iteration_seconds, *sim, where));
  }
  return true;
}

// Pairs of plans of one scenario that the model and the simulator order differently; `wide`:
// those whose simulated times differ by more than kRankTolerance (a near-tie may fall either
// way without misleading a user), `widest`: the largest simulated gap among the discordant.
constexpr double kRankTolerance = 0.02;
struct Misranks {
  int pairs = 0, discordant = 0, wide = 0;
  double widest = 0;
  std::string where;
};

void CountMisranks(const std::vector<double>& modelled, const std::vector<double>& simulated,
                   const std::string& where, Misranks& total) {
  for (size_t i = 0; i < modelled.size(); ++i)
    for (size_t j = i + 1; j < modelled.size(); ++j) {
      ++total.pairs;
      if ((modelled[i] - modelled[j]) * (simulated[i] - simulated[j]) >= 0) continue;
      ++total.discordant;
      const double gap =
          std::abs(simulated[i] - simulated[j]) / std::min(simulated[i], simulated[j]);
      total.wide += gap > kRankTolerance;
      if (gap > total.widest) {
        total.widest = gap;
        total.where = where;
      }
    }
}

double Quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(q * values.size()));
  return values[index];
}

void PrintHeader() {
  std::string cpu = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  std::printf("# fidelity_bench  commit %s  build %s  compiler g++ %s  cpu %s\n", HEXISEQ_COMMIT,
              HEXISEQ_BUILD_TYPE, __VERSION__, cpu.c_str());
}

void PrintStrategyTable(const std::map<std::string, std::vector<Sample>>& samples) {
  std::printf(
      "\n| strategy | plans | mean | p95 | max | worst case (model - sim) / sim, largest term gap "
      "|\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [strategy, list] : samples) {
    std::vector<double> errors;
    double mean = 0;
    const Sample* worst = &list.front();
    for (const Sample& sample : list) {
      errors.push_back(std::abs(sample.error));
      mean += std::abs(sample.error) / list.size();
      if (std::abs(sample.error) > std::abs(worst->error)) worst = &sample;
    }
    std::printf("| %s | %zu | %.2f%% | %.2f%% | %.2f%% | %+.1f%%: %s; %s |\n", strategy.c_str(),
                list.size(), 100 * mean, 100 * Quantile(errors, kP95), 100 * Quantile(errors, 1.0),
                100 * worst->error, worst->where.c_str(), worst->term.c_str());
  }
}

// Simulated iteration time with the direct route over the schedule's route, per strategy.
void PrintRouteTable(const std::map<std::string, std::vector<double>>& ratios) {
  std::printf(
      "\n| strategy | plans | direct / along-chain: geomean | min | max | direct slower in |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [strategy, list] : ratios) {
    double log_sum = 0;
    int slower = 0;
    for (double ratio : list) {
      log_sum += std::log(ratio);
      slower += ratio > 1 ? 1 : 0;
    }
    std::printf("| %s | %zu | %.3f | %.3f | %.3f | %d |\n", strategy.c_str(), list.size(),
                std::exp(log_sum / list.size()), *std::min_element(list.begin(), list.end()),
                *std::max_element(list.begin(), list.end()), slower);
  }
}

int Run(int min_plans, uint64_t seed, bool compare_routes, int explicit_layers) {
  PrintHeader();
  std::mt19937_64 rng(seed);
  std::map<std::string, std::vector<Sample>> samples, replica_samples;
  std::vector<double> taus;
  Misranks misranks;
  std::map<std::string, std::vector<double>> route_ratios;
  int feasible = 0, scenarios = 0;
  const auto start = std::chrono::steady_clock::now();
  while (feasible < min_plans) {
    const Scenario scenario = RandomScenario(rng);
    const CostModel cost(scenario.cluster, scenario.model, scenario.workload);
    std::vector<double> modelled, simulated;
    for (const StrategyResult& result : AllStrategies(cost)) {
      if (!result.feasible()) continue;
      const sim::SimOptions layers = Layers(scenario.model, explicit_layers);
      auto sim = sim::Simulate(result.plan, cost.problem(), layers);
      if (!sim) {
        std::fprintf(stderr, "simulate failed: %s\n", sim.error().message.c_str());
        return 1;
      }
      if (compare_routes) {
        sim::SimOptions direct = layers;
        direct.dkv_route = DkvRoute::kDirectToOwner;
        auto other = sim::Simulate(result.plan, cost.problem(), direct);
        if (!other) {
          std::fprintf(stderr, "simulate failed: %s\n", other.error().message.c_str());
          return 1;
        }
        route_ratios[result.strategy].push_back(other->iteration_seconds / sim->iteration_seconds);
      }
      const double model_seconds = result.cost.iteration_seconds;
      samples[result.strategy].push_back(
          MakeSample(model_seconds, *sim, scenario.label + " " + result.config));
      modelled.push_back(model_seconds);
      simulated.push_back(sim->iteration_seconds);
      ++feasible;
    }
    if (!SampleReplicaPlans(scenario, explicit_layers, replica_samples)) return 1;
    ++scenarios;
    if (modelled.size() >= 3) {
      taus.push_back(sim::KendallTau(modelled, simulated));
      CountMisranks(modelled, simulated, scenario.label, misranks);
      std::printf("scenario %3d  plans %zu  tau %+.3f  %s\n", scenarios, modelled.size(),
                  taus.back(), scenario.label.c_str());
      std::fflush(stdout);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n%d scenarios, %d feasible plans, %.0f s\n", scenarios, feasible, seconds);
  PrintStrategyTable(samples);
  std::printf("\nReplica plans composed from baselines on node subsets, same scenarios:\n");
  PrintStrategyTable(replica_samples);
  if (compare_routes) PrintRouteTable(route_ratios);
  double tau_mean = 0;
  int tau_ok = 0;
  for (double tau : taus) {
    tau_mean += tau / taus.size();
    tau_ok += tau >= 0.9;
  }
  std::printf(
      "\nKendall tau over %zu scenarios with >= 3 feasible plans: mean %.3f, min %.3f, "
      ">= 0.9 in %d\n",
      taus.size(), tau_mean, *std::min_element(taus.begin(), taus.end()), tau_ok);
  std::printf(
      "pairs of plans ordered differently by model and simulator: %d of %d; simulated %.0f%% or "
      "more apart: %d; widest %.1f%% (%s)\n",
      misranks.discordant, misranks.pairs, 100 * kRankTolerance, misranks.wide,
      100 * misranks.widest, misranks.where.c_str());
  return 0;
}

}  // namespace
}  // namespace hexiseq

int main(int argc, char** argv) {
  const int min_plans = argc > 1 ? std::atoi(argv[1]) : 300;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  bool compare_routes = false, bad = min_plans < 1;
  int explicit_layers = 1;
  for (int arg = 3; arg < argc; ++arg) {
    const std::string text = argv[arg];
    if (text == "routes")
      compare_routes = true;
    else if (text.rfind("layers=", 0) == 0)
      explicit_layers = std::atoi(text.c_str() + 7);
    else
      bad = true;
  }
  if (bad || explicit_layers < 1) {
    std::fprintf(
        stderr,
        "usage: fidelity_bench [min_feasible_plans >= 1] [seed] [routes] [layers=N >= 1]\n");
    return 2;
  }
  return hexiseq::Run(min_plans, seed, compare_routes, explicit_layers);
}
