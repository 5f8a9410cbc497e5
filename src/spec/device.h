// The device catalog: one row per GPU type with its datasheet peak, memory, bandwidths and the
// achievable efficiencies for GEMM and attention, each row citing its public source. Efficiencies
// are data: a cluster file (gemm_efficiency, attention_efficiency) or --device-table overrides
// them.
#pragma once

#include <string>
#include <vector>

#include "spec/error.h"

namespace hexiseq {

// How a device's rates change with the size of its work, measured by `hexiseq calibrate`: at a
// shard of tokens[i] tokens GEMMs run at gemm[i] and attention at attention[i] times the device's
// rates (DeviceSpec::GemmFlops, AttentionFlops). Between points the factor is interpolated
// linearly in log(tokens); before the first and past the last point it is held. Empty: the rates
// do not depend on size (every catalog device).
struct RateCurve {
  std::vector<double> tokens;  // increasing, > 0
  std::vector<double> gemm, attention;

  bool empty() const { return tokens.empty(); }
  double GemmFactor(double shard_tokens) const {
    return tokens.empty() ? 1.0 : Factor(gemm, shard_tokens);
  }
  double AttentionFactor(double shard_tokens) const {
    return tokens.empty() ? 1.0 : Factor(attention, shard_tokens);
  }
  // The largest factor of a curve (1 when empty): the fastest the device can run.
  static double Largest(const std::vector<double>& factors);
  bool operator==(const RateCurve&) const = default;

 private:
  // REQUIRES: !empty().
  double Factor(const std::vector<double>& factors, double shard_tokens) const;
};

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
  RateCurve rate_curve;                    // size-dependence of the two rates (calibrated)

  double GemmFlops() const { return peak_flops * gemm_efficiency; }
  double AttentionFlops() const { return peak_flops * attention_efficiency; }
  // The rates at a shard of `tokens` tokens (rate_curve; the rates above when it is empty).
  double GemmFlopsAt(double tokens) const { return GemmFlops() * rate_curve.GemmFactor(tokens); }
  double AttentionFlopsAt(double tokens) const {
    return AttentionFlops() * rate_curve.AttentionFactor(tokens);
  }
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
