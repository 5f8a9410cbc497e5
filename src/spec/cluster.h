// A cluster: node kinds expanded into nodes and ranks. Ranks are numbered node by node in the
// order of the `nodes:` list. Bandwidth between two ranks: the node's intra-node bandwidth when
// they share a node, else a `links:` override between their node kinds, else the smaller NIC.
// Bandwidths are per GPU, per direction. Ignores switch topology beyond node/NIC.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/device.h"
#include "spec/error.h"

namespace hexiseq {

struct NodeKind {
  DeviceSpec device;  // with any per-kind efficiency overrides applied
  int count = 0;      // nodes of this kind
  int gpus_per_node = 0;
  double intra_node_bytes_per_second = 0;
  double nic_bytes_per_second = 0;
  double latency_seconds = 0;  // per message inside the node
  bool operator==(const NodeKind&) const = default;
};

struct LinkOverride {
  int kind_a = 0, kind_b = 0;  // node-kind indices (may be equal)
  double bytes_per_second = 0;
  bool operator==(const LinkOverride&) const = default;
};

struct RankInfo {
  int rank = 0;
  int node = 0;        // global node index
  int kind = 0;        // node-kind index
  int local_rank = 0;  // index inside the node
  bool operator==(const RankInfo&) const = default;
};

struct NodeInfo {
  int node = 0;
  int kind = 0;
  int first_rank = 0;
  int num_ranks = 0;
  bool operator==(const NodeInfo&) const = default;
};

struct Cluster {
  std::string name;
  std::vector<NodeKind> kinds;
  std::vector<LinkOverride> links;
  double inter_node_latency_seconds = 5e-6;
  std::vector<NodeInfo> nodes;  // derived by Finalize()
  std::vector<RankInfo> ranks;  // derived by Finalize()

  int num_ranks() const { return static_cast<int>(ranks.size()); }
  const DeviceSpec& device(int rank) const { return kinds[ranks[rank].kind].device; }
  // Per-direction bytes/s from rank a to rank b (a != b).
  double Bandwidth(int a, int b) const;
  double Latency(int a, int b) const;
  // Per-direction capacity of one GPU's NIC port of node kind `kind`: its `nic`, raised to the
  // fastest `links:` override that involves the kind (a link cannot be faster than its ports).
  double NicPortBandwidth(int kind) const;
  bool SameNode(int a, int b) const { return ranks[a].node == ranks[b].node; }
  // Sum over ranks of effective GEMM / attention FLOP/s.
  double TotalGemmFlops() const;
  double TotalAttentionFlops() const;

  // Expands kinds into nodes and ranks. Call after editing kinds.
  void Finalize();
  bool operator==(const Cluster&) const = default;
};

// Per-direction bytes/s between GPUs of node kinds a and b on different nodes: the last of
// `links` that matches the pair, else the slower of their NICs.
double InterNodeBandwidth(const std::vector<LinkOverride>& links, int kind_a, int kind_b,
                          double nic_a, double nic_b);

// Cluster::Bandwidth and Cluster::Latency as tables by node kind, for lookups in inner loops
// (a snapshot: rebuild after editing the cluster).
class LinkTable {
 public:
  explicit LinkTable(const Cluster& cluster);
  double Bandwidth(int a, int b) const {
    const Place& from = places_[a];
    const Place& to = places_[b];
    if (a == b) return local_[from.kind];
    if (from.node == to.node) return intra_[from.kind];
    if (inter_.empty())
      return InterNodeBandwidth(links_, from.kind, to.kind, nic_[from.kind], nic_[to.kind]);
    return inter_[from.kind * num_kinds_ + to.kind];
  }
  double Latency(int a, int b) const {
    if (a == b) return 0;
    const Place& from = places_[a];
    if (from.node == places_[b].node) return intra_latency_[from.kind];
    return inter_latency_;
  }

 private:
  struct Place {
    int node = 0, kind = 0;
  };
  // Clusters of at most this many node kinds get the table of every kind pair (kinds^2 entries);
  // larger ones look their link overrides up per call.
  static constexpr int kPairTableKinds = 64;
  std::vector<Place> places_;  // per rank
  int num_kinds_ = 0;
  std::vector<double> local_, intra_, intra_latency_, nic_;  // per kind
  std::vector<double> inter_;  // [kind a * kinds + kind b], or empty beyond kPairTableKinds
  std::vector<LinkOverride> links_;
  double inter_latency_ = 0;
};

// Parses a cluster file (YAML; JSON is YAML). Errors name the file, the field path, the value,
// the rule and a hint; YAML syntax errors give line and column. Adjacent identical entries of
// `nodes:` that no `links:` entry names become one kind (counts added; rank numbering unchanged).
Result<Cluster> LoadCluster(const std::string& path, const DeviceCatalog& catalog);
Result<Cluster> ParseCluster(const std::string& text, const std::string& source_name,
                             const DeviceCatalog& catalog);

// Convenience for tests and benches: `counts[i]` nodes of `gpus_per_node` GPUs of device
// `devices[i]` with catalog default links.
Cluster MakeCluster(const std::vector<DeviceSpec>& devices, const std::vector<int>& node_counts,
                    int gpus_per_node, double nic_bytes_per_second);

}  // namespace hexiseq
