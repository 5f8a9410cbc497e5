// The built-in device catalog (datasheet peaks, memory, bandwidths) and the achievable
// efficiencies for GEMM and fused attention, each row citing its public source. Link figures are
// per GPU, per direction (half of the bidirectional NVLink / PCIe figure). Memory is the datasheet
// capacity read as GiB (an "80 GB" H100 reports 79.6 GiB); --memory-reserve covers the difference.
// Efficiencies are blended forward+backward figures; calibrate to replace them with measurements.
#include "spec/device.h"

#include <algorithm>
#include <cmath>

#include "spec/spec_input.h"
#include "spec/units.h"

namespace hexiseq {

double RateCurve::Factor(const std::vector<double>& factors, double shard_tokens) const {
  if (shard_tokens <= tokens.front()) return factors.front();
  if (shard_tokens >= tokens.back()) return factors.back();
  const size_t upper =
      std::upper_bound(tokens.begin(), tokens.end(), shard_tokens) - tokens.begin();
  const size_t lower = upper - 1;
  const double along =
      std::log(shard_tokens / tokens[lower]) / std::log(tokens[upper] / tokens[lower]);
  return factors[lower] + along * (factors[upper] - factors[lower]);
}

double RateCurve::Largest(const std::vector<double>& factors) {
  return factors.empty() ? 1.0 : *std::max_element(factors.begin(), factors.end());
}

namespace {

using spec_internal::ClosestNames;
using spec_internal::FieldMessage;
using spec_internal::JoinList;
using spec_internal::Lower;
using spec_internal::Quote;

constexpr double kTera = 1e12;
constexpr double kGbit = 1.25e8;  // 1 Gb/s in bytes/s

// Sources, named once. REFERENCES.md in the design notes collects the same figures.
constexpr const char* kFa3 =
    "attention: FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608) reaches up to 740 TFLOPS "
    "BF16 forward = 75% of H100 peak, backward lower; 0.65 blends forward and backward";
constexpr const char* kHopperGemm =
    "GEMM: large BF16 GEMMs reach about 70-80% of H100 peak (cuBLAS / Transformer Engine "
    "benchmarks); 0.75";
constexpr const char* kFa2 =
    "attention: FlashAttention-2 (Dao 2023, arXiv:2307.08691) reaches 50-73% of A100 peak "
    "forward, up to 63% backward; 0.65";
constexpr const char* kAmpereGemm =
    "GEMM: large BF16 GEMMs reach about 80-90% of A100 peak (cuBLAS); 0.85";

std::vector<DeviceSpec> MakeBuiltinRows() {
  std::vector<DeviceSpec> rows;
  auto add = [&rows](const char* name, double tflops, double memory_gib, double hbm_tbps,
                     double intra_bidirectional_gbps, double nic_gbit, double gemm,
                     double attention, std::string source) {
    DeviceSpec spec;
    spec.name = name;
    spec.peak_flops = tflops * kTera;
    spec.memory_bytes = memory_gib * kGiB;
    spec.hbm_bytes_per_second = hbm_tbps * kTera;
    spec.intra_node_bytes_per_second = intra_bidirectional_gbps / 2 * kGB;
    spec.nic_bytes_per_second = nic_gbit * kGbit;
    spec.gemm_efficiency = gemm;
    spec.attention_efficiency = attention;
    spec.source = std::move(source);
    rows.push_back(std::move(spec));
  };
  const std::string hopper = std::string(kHopperGemm) + "; " + kFa3;
  const std::string ampere = std::string(kAmpereGemm) + "; " + kFa2;
  // name, dense BF16 TFLOPS, memory GiB, HBM TB/s, intra-node GB/s bidirectional,
  // NIC Gb/s per GPU, GEMM efficiency, attention efficiency, source.
  add("H100-SXM", 989, 80, 3.35, 900, 400, 0.75, 0.65,
      "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 989 TFLOPS dense BF16, 80 GB HBM3, "
      "3.35 TB/s, NVLink4 900 GB/s); 400 Gb/s NDR NIC per GPU (DGX H100); " +
          hopper);
  add("H100-PCIe", 756, 80, 2.0, 128, 200, 0.75, 0.65,
      "NVIDIA H100 Tensor Core GPU datasheet (PCIe: 756 TFLOPS dense BF16, 80 GB HBM2e, "
      "2.0 TB/s; PCIe Gen5 x16 128 GB/s, NVLink bridge pairs ignored); NIC 200 Gb/s per GPU "
      "(typical 200-400 Gb/s); efficiencies assumed: same as H100-SXM (Hopper)");
  add("H200", 989, 141, 4.8, 900, 400, 0.75, 0.65,
      "NVIDIA H200 Tensor Core GPU datasheet (989 TFLOPS dense BF16, 141 GB HBM3e, 4.8 TB/s, "
      "NVLink4 900 GB/s); 400 Gb/s NIC per GPU; efficiencies assumed: same as H100-SXM (same "
      "Hopper SM)");
  add("H800", 989, 80, 3.35, 400, 400, 0.75, 0.65,
      "NVIDIA H800 SXM product specifications (China-market H100: 989 TFLOPS dense BF16, "
      "80 GB, 3.35 TB/s, NVLink 400 GB/s); 400 Gb/s NIC per GPU; efficiencies assumed: same as "
      "H100-SXM (same chip)");
  add("H20", 148, 96, 4.0, 900, 400, 0.75, 0.65,
      "NVIDIA HGX H20 product specifications (148 TFLOPS dense BF16, 96 GB HBM3, 4.0 TB/s, "
      "NVLink 900 GB/s); 400 Gb/s NIC per GPU; efficiencies assumed: same as H100-SXM "
      "(Hopper)");
  add("B200", 2250, 180, 8.0, 1800, 400, 0.75, 0.65,
      "NVIDIA DGX B200 / HGX B200 datasheet (2250 TFLOPS dense BF16, 192 GB HBM3e of which "
      "about 180 GB usable, 8.0 TB/s, NVLink5 1.8 TB/s); 400 Gb/s NIC per GPU; efficiencies "
      "assumed: same as H100-SXM (no public forward+backward attention figure verified)");
  add("A100-SXM-80G", 312, 80, 2.04, 600, 200, 0.85, 0.65,
      "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB: 312 TFLOPS dense BF16, 80 GB HBM2e, "
      "2.04 TB/s, NVLink3 600 GB/s); 200 Gb/s HDR NIC per GPU (DGX A100); " +
          ampere);
  add("A100-40G", 312, 40, 1.56, 600, 200, 0.85, 0.65,
      "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB: 312 TFLOPS dense BF16, 40 GB HBM2, "
      "1.56 TB/s, NVLink3 600 GB/s); 200 Gb/s NIC per GPU; " +
          ampere);
  add("A800", 312, 80, 2.04, 400, 200, 0.85, 0.65,
      "NVIDIA A800 SXM product specifications (China-market A100: 312 TFLOPS dense BF16, "
      "80 GB, 2.04 TB/s, NVLink 400 GB/s); 200 Gb/s NIC per GPU; efficiencies assumed: same as "
      "A100-SXM-80G (same chip)");
  add("L40S", 362, 48, 0.864, 64, 50, 0.60, 0.45,
      "NVIDIA L40S datasheet (362 TFLOPS dense BF16, 48 GB GDDR6, 864 GB/s, no NVLink, PCIe "
      "Gen4 x16 64 GB/s); NIC about 50 Gb/s per GPU; efficiencies assumed: lower than "
      "A100-SXM-80G (Ada, 350 W power cap, FlashAttention-2 kernels; no public "
      "forward+backward figure) - calibrate");
  add("L4", 121, 24, 0.30, 64, 25, 0.60, 0.45,
      "NVIDIA L4 datasheet (121 TFLOPS dense BF16, 24 GB GDDR6, 300 GB/s, PCIe Gen4 x16); NIC "
      "25 Gb/s per GPU (typical 10-25 Gb/s); efficiencies assumed: same as L40S (Ada)");
  add("A10", 125, 24, 0.60, 64, 12.5, 0.60, 0.45,
      "NVIDIA A10 datasheet (125 TFLOPS dense BF16, 24 GB GDDR6, 600 GB/s, PCIe Gen4 x16); NIC "
      "about 12.5 Gb/s per GPU; efficiencies assumed: same as L40S (GA102, PCIe card)");
  add("V100", 125, 32, 0.90, 300, 50, 0.80, 0.40,
      "NVIDIA V100 datasheet (SXM2 32GB: 125 TFLOPS FP16 tensor, no BF16, 900 GB/s, NVLink2 "
      "300 GB/s); NIC about 50 Gb/s per GPU; efficiencies assumed: GEMM 0.80, attention 0.40 "
      "(FlashAttention-2 does not support Volta; memory-efficient attention kernels)");
  add("RTX4090", 165, 24, 1.0, 64, 25, 0.60, 0.45,
      "NVIDIA Ada GeForce RTX 4090 whitepaper (165 TFLOPS dense FP16/BF16 with FP32 accumulate, "
      "24 GB GDDR6X, 1.0 TB/s, no NVLink, PCIe Gen4 x16); NIC 25 Gb/s per GPU (typical "
      "10-100 GbE); efficiencies assumed: same as L40S (Ada)");
  add("MI300X", 1307, 192, 5.3, 896, 400, 0.50, 0.40,
      "AMD Instinct MI300X datasheet (1307 TFLOPS dense BF16, 192 GB HBM3, 5.3 TB/s, xGMI "
      "896 GB/s); 400 Gb/s NIC per GPU; GEMM: public BF16 GEMM benchmarks (SemiAnalysis, "
      "Dec 2024) report about half of peak, 0.50; attention assumed 0.40 (ROCm "
      "FlashAttention-2; no verified forward+backward figure) - calibrate");
  return rows;
}

}  // namespace

const std::vector<DeviceSpec>& BuiltinDevices() {
  static const std::vector<DeviceSpec> rows = MakeBuiltinRows();
  return rows;
}

DeviceCatalog::DeviceCatalog() : rows_(BuiltinDevices()) {}

Result<DeviceSpec> DeviceCatalog::Find(const std::string& name, const std::string& where) const {
  const std::string lower = Lower(name);
  for (const DeviceSpec& row : rows_) {
    if (Lower(row.name) == lower) return row;
  }
  std::vector<std::string> names;
  for (const DeviceSpec& row : rows_) names.push_back(row.name);
  const auto closest = ClosestNames(name, names, 3);
  std::string message = where.empty() ? "" : where + ": ";
  message += "unknown GPU '" + name +
             "' (rule: a device-catalog name, case-insensitive, or an "
             "inline device {name, bf16_tflops, memory}; hint: ";
  if (!closest.empty()) message += "did you mean " + JoinList(closest, "or") + "? ";
  message += "the catalog is listed in docs/devices.md)";
  return InvalidArgument(message);
}

Result<void> DeviceCatalog::MergeFile(const std::string& path) {
  auto text = spec_internal::ReadTextFile(path, "device table");
  if (!text) return std::unexpected(text.error());
  const std::string example =
      "write a list of rows such as `- {name: H100-SXM, gemm_efficiency: 0.7}` (see "
      "docs/devices.md)";
  auto root = spec_internal::ParseYamlDocument(*text, path, "device table", example, true);
  if (!root) return std::unexpected(root.error());
  try {
    YAML::Node list = *root;
    std::string list_where = path + ": ";
    if (root->IsMap()) {
      auto entries =
          spec_internal::CheckedEntries(*root, path + ":", {"devices"}, "a device table");
      if (!entries) return std::unexpected(entries.error());
      list = spec_internal::Get(*entries, "devices");
      list_where = path + ": devices";
      if (!list.IsDefined() || !list.IsSequence()) {
        return InvalidArgument(FieldMessage(list_where, "", "missing or not a list",
                                            "a device table is a list of device rows", example));
      }
    }
    std::vector<DeviceSpec> merged = rows_;
    for (size_t index = 0; index < list.size(); ++index) {
      const std::string where = list_where + "[" + std::to_string(index) + "]";
      const YAML::Node row = list[index];
      const DeviceSpec* base = nullptr;
      if (row.IsMap()) {
        const YAML::Node name = row["name"];
        if (name.IsDefined() && name.IsScalar()) {
          for (const DeviceSpec& existing : merged) {
            if (Lower(existing.name) == Lower(name.Scalar())) base = &existing;
          }
        }
      }
      auto spec = spec_internal::ParseDeviceRow(row, where, base, "device table " + path);
      if (!spec) return std::unexpected(spec.error());
      if (base != nullptr) {
        const std::string lower = Lower(base->name);
        spec->name = base->name;  // keep the catalog spelling
        for (DeviceSpec& existing : merged) {
          if (Lower(existing.name) == lower) existing = *spec;
        }
      } else {
        merged.push_back(*spec);
      }
    }
    rows_ = std::move(merged);
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": cannot read the device table: " + e.what() +
                           " (rule: a list of device rows; hint: " + example + ")");
  }
  return {};
}

int EditDistance(const std::string& a, const std::string& b) {
  const std::string x = Lower(a);
  const std::string y = Lower(b);
  std::vector<int> previous(y.size() + 1), current(y.size() + 1);
  for (size_t col = 0; col <= y.size(); ++col) previous[col] = static_cast<int>(col);
  for (size_t row = 1; row <= x.size(); ++row) {
    current[0] = static_cast<int>(row);
    for (size_t col = 1; col <= y.size(); ++col) {
      const int substitute = previous[col - 1] + (x[row - 1] == y[col - 1] ? 0 : 1);
      current[col] = std::min({previous[col] + 1, current[col - 1] + 1, substitute});
    }
    std::swap(previous, current);
  }
  return previous[y.size()];
}

}  // namespace hexiseq
