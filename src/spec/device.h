// The device catalog: one row per GPU type with its datasheet peak, memory, bandwidths and the
// achievable efficiencies for GEMM and attention, each row citing its public source. Efficiencies
// are data: a cluster file (gemm_efficiency, attention_efficiency) or --device-table overrides
// them.
#pragma once

#include <string>
#include <vector>

#include "spec/error.h"

namespace hexiseq {

struct DeviceSpec {
  std::string name;
  double peak_flops = 0;                   // dense BF16 (FP16 on V100) tensor FLOP/s, no sparsity
  double memory_bytes = 0;                 // usable HBM capacity
  double hbm_bytes_per_second = 0;         // HBM bandwidth
  double intra_node_bytes_per_second = 0;  // default per-GPU, per-direction bandwidth in a node
  double nic_bytes_per_second = 0;         // default per-GPU, per-direction bandwidth off node
  double gemm_efficiency = 0;              // achievable fraction of peak for large GEMMs
  double attention_efficiency = 0;         // achievable fraction of peak for fused attention
  std::string source;                      // where the figures come from

  double GemmFlops() const { return peak_flops * gemm_efficiency; }
  double AttentionFlops() const { return peak_flops * attention_efficiency; }
  bool operator==(const DeviceSpec&) const = default;
};

// The built-in catalog, in a fixed order.
const std::vector<DeviceSpec>& BuiltinDevices();

// A catalog: built-in rows, possibly replaced or extended by a --device-table file.
class DeviceCatalog {
 public:
  DeviceCatalog();  // the built-in rows
  explicit DeviceCatalog(std::vector<DeviceSpec> rows) : rows_(std::move(rows)) {}

  // Case-insensitive lookup. Unknown names give kInvalidArgument listing the closest names.
  // `where` names the field for the message (e.g. "cluster.yaml: nodes[1].gpu").
  Result<DeviceSpec> Find(const std::string& name, const std::string& where) const;

  // Loads a YAML/JSON device table: a list (or `devices:` list) of rows with fields
  // name, bf16_tflops, memory, hbm_bandwidth, intra_node, nic, gemm_efficiency,
  // attention_efficiency, source. A row whose name is in the catalog replaces the fields it gives.
  Result<void> MergeFile(const std::string& path);

  const std::vector<DeviceSpec>& rows() const { return rows_; }

 private:
  std::vector<DeviceSpec> rows_;
};

// Levenshtein distance on lower-cased strings; used for "did you mean".
int EditDistance(const std::string& a, const std::string& b);

}  // namespace hexiseq
