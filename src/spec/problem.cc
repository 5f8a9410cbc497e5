#include "spec/problem.h"

#include <cstdint>
#include <cstdio>

namespace hexiseq {

Result<void> ValidateProblem(const Problem& problem) {
  if (auto valid = ValidateWorkload(problem.workload); !valid) return valid;
  const ModelSpec& model = problem.model;
  const std::string where = "model " + model.name;
  if (model.layers < 1 || model.heads < 1 || model.kv_heads < 1 || model.head_dim < 1) {
    return InvalidArgument(where + ": layers = " + std::to_string(model.layers) +
                           ", heads = " + std::to_string(model.heads) +
                           ", kv_heads = " + std::to_string(model.kv_heads) +
                           ", head_dim = " + std::to_string(model.head_dim) +
                           ": each must be >= 1 (hint: load the model with LoadModel, which "
                           "fills head_dim)");
  }
  if (model.heads % model.kv_heads != 0) {
    return InvalidArgument(where + ": heads = " + std::to_string(model.heads) +
                           ", kv_heads = " + std::to_string(model.kv_heads) +
                           ": heads must be divisible by kv_heads (hint: for multi-head "
                           "attention, kv_heads = heads)");
  }
  if (problem.cluster.num_ranks() < 1) {
    return InvalidArgument("cluster " + problem.cluster.name +
                           ": no ranks: must have at least one GPU (hint: call Finalize() after "
                           "filling kinds)");
  }
  return {};
}

std::string InputHash(const Problem& problem) {
  constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;
  uint64_t hash = kFnvOffset;
  auto mix = [&hash](const std::string& text) {
    for (unsigned char byte : text) {
      hash ^= byte;
      hash *= kFnvPrime;
    }
  };
  const Cluster& cluster = problem.cluster;
  const ModelSpec& model = problem.model;
  const Workload& workload = problem.workload;
  mix(cluster.name);
  for (const NodeKind& kind : cluster.kinds) {
    mix(kind.device.name + std::to_string(kind.count) + "x" + std::to_string(kind.gpus_per_node) +
        "/" + std::to_string(kind.intra_node_bytes_per_second) + "/" +
        std::to_string(kind.nic_bytes_per_second) + "/" +
        std::to_string(kind.device.gemm_efficiency) + "/" +
        std::to_string(kind.device.attention_efficiency));
  }
  for (const LinkOverride& link : cluster.links)
    mix(std::to_string(link.kind_a) + "-" + std::to_string(link.kind_b) + ":" +
        std::to_string(link.bytes_per_second));
  mix(model.name + std::to_string(model.layers) + "/" + std::to_string(model.hidden) + "/" +
      std::to_string(model.heads) + "/" + std::to_string(model.kv_heads));
  mix(std::to_string(workload.seq_len) + "/" + std::to_string(workload.batch) + "/" +
      RecomputeName(workload.recompute) + "/" + std::to_string(workload.zero_stage) + "/" +
      std::to_string(workload.memory_reserve));
  constexpr int kHexDigits = 16;
  char text[kHexDigits + 1];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace hexiseq
