// Fuzzes the cluster file reader (ParseCluster, YAML or JSON text): any input is either a clear
// error naming the file, or a cluster inside the stated bounds whose link model gives finite,
// positive bandwidths.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_checks.h"
#include "spec/cluster.h"
#include "spec/limits.h"

namespace hexiseq::fuzz {
namespace {

constexpr const char* kSource = "fuzz-cluster.yaml";

void CheckKind(const NodeKind& kind) {
  CheckDevice(kind.device);
  Require(kind.count >= 1 && kind.gpus_per_node >= 1, "node kind counts positive");
  Require(InRange(kind.intra_node_bytes_per_second, kMinBandwidthBytesPerSecond,
                  kMaxBandwidthBytesPerSecond),
          "intra-node bandwidth in range", std::to_string(kind.intra_node_bytes_per_second));
  Require(
      InRange(kind.nic_bytes_per_second, kMinBandwidthBytesPerSecond, kMaxBandwidthBytesPerSecond),
      "NIC bandwidth in range", std::to_string(kind.nic_bytes_per_second));
  Require(InRange(kind.latency_seconds, 0, kMaxLatencySeconds), "latency in range",
          std::to_string(kind.latency_seconds));
}

// The link model between the first, a middle and the last rank (all pairs would be quadratic).
void CheckLinks(const Cluster& cluster) {
  const int last = cluster.num_ranks() - 1;
  const int probes[] = {0, last / 2, last};
  for (int from : probes) {
    for (int to : probes) {
      if (from == to) continue;
      const double bandwidth = cluster.Bandwidth(from, to);
      Require(std::isfinite(bandwidth) && bandwidth > 0, "bandwidth finite and positive",
              std::to_string(from) + " -> " + std::to_string(to));
      const double latency = cluster.Latency(from, to);
      Require(std::isfinite(latency) && latency >= 0, "latency finite");
    }
  }
  Require(std::isfinite(cluster.TotalGemmFlops()), "total GEMM rate finite");
}

void CheckCluster(const Cluster& cluster) {
  Require(cluster.num_ranks() >= 1 && cluster.num_ranks() <= kMaxRanks, "rank count in range",
          std::to_string(cluster.num_ranks()));
  Require(!cluster.kinds.empty() && static_cast<int64_t>(cluster.kinds.size()) <= kMaxNodeKinds,
          "node kind count in range");
  for (const NodeKind& kind : cluster.kinds) CheckKind(kind);
  for (const LinkOverride& link : cluster.links) {
    Require(link.kind_a >= 0 && link.kind_b >= 0 &&
                link.kind_a < static_cast<int>(cluster.kinds.size()) &&
                link.kind_b < static_cast<int>(cluster.kinds.size()),
            "link kinds exist");
    Require(
        InRange(link.bytes_per_second, kMinBandwidthBytesPerSecond, kMaxBandwidthBytesPerSecond),
        "link bandwidth in range");
  }
  Require(InRange(cluster.inter_node_latency_seconds, 0, kMaxLatencySeconds),
          "inter-node latency in range");
  CheckLinks(cluster);
}

}  // namespace
}  // namespace hexiseq::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hexiseq;
  static const DeviceCatalog catalog;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<Cluster> cluster = ParseCluster(text, fuzz::kSource, catalog);
  if (!cluster) {
    fuzz::CheckError(cluster.error(), fuzz::kSource, fuzz::kMaxReaderMessageBytes);
    return 0;
  }
  fuzz::CheckCluster(*cluster);
  return 0;
}
