#include "sched/topology.h"

#include <algorithm>

namespace hexiseq {
namespace {

Supernode FromNode(const Cluster& cluster, const NodeInfo& node) {
  Supernode s;
  s.kind = node.kind;
  const NodeKind& kind = cluster.kinds[node.kind];
  for (int rank = node.first_rank; rank < node.first_rank + node.num_ranks; ++rank) {
    s.ranks.push_back(rank);
    s.gemm_flops += kind.device.GemmFlops();
    s.attention_flops += kind.device.AttentionFlops();
    s.memory_bytes += kind.device.memory_bytes;
  }
  s.intra_bytes_per_second = node.num_ranks > 1 ? kind.intra_node_bytes_per_second : 0;
  s.nic_bytes_per_second = kind.nic_bytes_per_second;
  return s;
}

}  // namespace

double SupernodeBandwidth(const Cluster& cluster, const Supernode& a, const Supernode& b) {
  double bw = 0;
  bool first = true;
  // Nodes are homogeneous, so one representative pair per (kind, kind) suffices; check the
  // first rank of each (plus overrides, which Bandwidth applies).
  for (int ra : {a.ranks.front(), a.ranks.back()})
    for (int rb : {b.ranks.front(), b.ranks.back()}) {
      if (ra == rb) continue;
      const double x = cluster.Bandwidth(ra, rb);
      bw = first ? x : std::min(bw, x);
      first = false;
    }
  return bw;
}

std::vector<Supernode> PartitionTopology(const Cluster& cluster) {
  std::vector<Supernode> out;
  for (const NodeInfo& node : cluster.nodes) {
    Supernode s = FromNode(cluster, node);
    if (!out.empty() && out.back().kind == s.kind) {
      Supernode& prev = out.back();
      const double link = SupernodeBandwidth(cluster, prev, s);
      const double inside =
          std::min(prev.intra_bytes_per_second > 0 ? prev.intra_bytes_per_second : link,
                   s.intra_bytes_per_second > 0 ? s.intra_bytes_per_second : link);
      if (link >= inside && s.intra_bytes_per_second > 0) {
        prev.ranks.insert(prev.ranks.end(), s.ranks.begin(), s.ranks.end());
        prev.gemm_flops += s.gemm_flops;
        prev.attention_flops += s.attention_flops;
        prev.memory_bytes += s.memory_bytes;
        prev.intra_bytes_per_second = std::min(prev.intra_bytes_per_second, link);
        continue;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace hexiseq
