// Random and fixed clusters for the scheduler's tests and benches.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "spec/cluster.h"
#include "spec/device.h"
#include "spec/model.h"

namespace hexiseq::sched_test {

inline DeviceSpec Device(const std::string& name) {
  for (const DeviceSpec& d : BuiltinDevices())
    if (d.name == name) return d;
  return BuiltinDevices().front();
}

inline ModelSpec Model(const std::string& name) {
  for (const ModelSpec& m : ModelPresets())
    if (m.name == name) return m;
  return ModelPresets().front();
}

// A random small heterogeneous cluster: `ranks` GPUs of 2-4 device types (fewer when ranks is
// small), 1-4 GPUs per node, random intra-node and NIC bandwidths.
inline Cluster RandomSmallCluster(std::mt19937_64& rng, int ranks) {
  static const char* kTypes[] = {"H100-SXM", "A100-SXM-80G", "A100-40G", "A800", "L40S",
                                 "H20",      "V100",         "MI300X",   "L4"};
  std::uniform_int_distribution<int> type_count(2, 4), pick(0, 8);
  const int types = std::min(ranks, type_count(rng));
  std::vector<std::string> chosen;
  while (static_cast<int>(chosen.size()) < types) {
    std::string t = kTypes[pick(rng)];
    if (std::find(chosen.begin(), chosen.end(), t) == chosen.end()) chosen.push_back(t);
  }
  // Split ranks among types (each >= 1).
  std::vector<int> per_type(types, 1);
  for (int r = types; r < ranks; ++r)
    per_type[std::uniform_int_distribution<int>(0, types - 1)(rng)]++;
  Cluster c;
  c.name = "random";
  std::uniform_real_distribution<double> intra(16, 450), nic(5, 50), unit(0, 1);
  for (int t = 0; t < types; ++t) {
    // GPUs per node: a divisor of the type's count, at most 4.
    std::vector<int> divisors;
    for (int d = 1; d <= std::min(4, per_type[t]); ++d)
      if (per_type[t] % d == 0) divisors.push_back(d);
    const int gpn = divisors[std::uniform_int_distribution<int>(0, divisors.size() - 1)(rng)];
    NodeKind kind;
    kind.device = Device(chosen[t]);
    kind.count = per_type[t] / gpn;
    kind.gpus_per_node = gpn;
    kind.intra_node_bytes_per_second = intra(rng) * 1e9;
    kind.nic_bytes_per_second = nic(rng) * 1e9;
    kind.latency_seconds = 3e-6;
    c.kinds.push_back(kind);
  }
  c.Finalize();
  return c;
}

// One case of bench/sched/sched_optimality: 2 to `max_ranks` GPUs (RandomSmallCluster), a random
// preset model and a sequence of 16K-256K, drawn in that order from `rng`.
struct SmallCase {
  Cluster cluster;
  ModelSpec model;
  int64_t seq_len = 0;
};
inline SmallCase DrawSmallCase(std::mt19937_64& rng, int max_ranks) {
  static const char* kModels[] = {"llama3-8b",  "llama2-7b", "llama3.2-3b", "gpt-3b",
                                  "llama2-13b", "gpt-7b",    "llama3-70b"};
  SmallCase out;
  const int ranks = 2 + static_cast<int>(rng() % (max_ranks - 1));
  out.cluster = RandomSmallCluster(rng, ranks);
  out.model = Model(kModels[rng() % 7]);
  out.seq_len = int64_t{1} << (14 + rng() % 5);
  return out;
}

// Mixed 4-type cluster of n GPUs (n a multiple of 32): H100, A100, A800, L40S nodes of 8.
inline Cluster MixedCluster(int gpus) {
  const int nodes_per_type = std::max(1, gpus / 32);
  std::vector<DeviceSpec> devices = {Device("H100-SXM"), Device("A100-SXM-80G"), Device("A800"),
                                     Device("L40S")};
  Cluster c = MakeCluster(devices, {nodes_per_type, nodes_per_type, nodes_per_type, nodes_per_type},
                          8, 25e9);
  if (gpus < 32) {  // 16 GPUs: two H100 nodes... one node each of two types
    c = MakeCluster({Device("H100-SXM"), Device("A100-SXM-80G")}, {1, 1}, 8, 25e9);
  }
  return c;
}

}  // namespace hexiseq::sched_test
