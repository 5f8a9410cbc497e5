// Test helpers for the simulator: contention-free clusters and random valid plans (random groups,
// random zigzag sequence splits, random token and head shares, contiguous or scattered heads).
#pragma once

#include <random>
#include <vector>

#include "cost/cost_model.h"
#include "plan/plan.h"
#include "spec/cluster.h"
#include "spec/model.h"

namespace hexiseq::simtest {

DeviceSpec Device(const char* name);

// One node of `gpus` GPUs of one type.
Cluster SingleNode(const char* device, int gpus);
// One GPU per node, node types cycling through `devices`, `nic` bytes/s between nodes.
Cluster OneGpuPerNode(const std::vector<const char*>& devices, double nic);
// `nodes[i]` nodes of 8 GPUs of `devices[i]`.
Cluster EightGpuNodes(const std::vector<const char*>& devices, const std::vector<int>& nodes,
                      double nic);

enum class GroupShape {
  kAny,        // random partition of the ranks into groups
  kWithinNode  // every group inside one node (HP in node, CP across: one flow per node pair)
};

// A random valid plan. `spread` is how far shares stray from compute-proportional (0.3 = +-30%).
// With `equal_blocks`, every group holds the same number of tokens (so every sub-ring block has
// the same size); members' tokens and heads stay random.
Plan RandomPlan(const CostModel& cost, std::mt19937_64& rng, GroupShape shape, double spread,
                bool equal_blocks = false);

}  // namespace hexiseq::simtest
