// The cluster's bandwidth graph cut into high-bandwidth domains (nodes: NVLink islands or PCIe
// boxes), each abstracted as a supernode with aggregate compute, memory and its links. The
// scheduler forms all-to-all groups from these domains (a domain, a domain split by device type
// or into equal parts, merged domains). Ignores switch hierarchy above the node and NIC.
#pragma once

#include <vector>

#include "spec/cluster.h"

namespace hexiseq {

struct Supernode {
  std::vector<int> ranks;             // in rank order
  int kind = 0;                       // node-kind index (a node holds one device type)
  double gemm_flops = 0;              // sum of members' effective GEMM FLOP/s
  double attention_flops = 0;         // sum of members' effective attention FLOP/s
  double memory_bytes = 0;            // sum of members' capacity
  double intra_bytes_per_second = 0;  // per GPU, per direction, inside the domain
  double nic_bytes_per_second = 0;    // per GPU, per direction, to other domains
};

// One supernode per node; then neighbouring nodes (in rank order) whose link is at least as fast
// as the slower of their insides are merged (for example PCIe boxes on a fast network).
std::vector<Supernode> PartitionTopology(const Cluster& cluster);

// Per-GPU bandwidth between two supernodes (the slowest rank pair).
double SupernodeBandwidth(const Cluster& cluster, const Supernode& a, const Supernode& b);

}  // namespace hexiseq
