// calibrate's outputs: the cluster file and the sidecar JSON. How the measured fp32 rates enter
// the cost model: a device's GEMM rate is bf16_tflops x gemm_efficiency and its attention rate is
// bf16_tflops x attention_efficiency (DeviceSpec::GemmFlops / AttentionFlops), so bf16_tflops is
// written as the larger of the two measured rates and each efficiency as rate / that peak (the
// faster kind gets exactly 1). Link figures are medians over the rank pairs they stand for.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "calibrate/calibrate_internal.h"
#include "cost/cost_model.h"
#include "spec/units.h"

namespace hexiseq::calibrate {
namespace internal {

std::vector<KindGroup> GroupRanks(const std::vector<RankMeasurement>& ranks, double tolerance) {
  auto close = [tolerance](double a, double b) { return std::abs(a - b) <= tolerance * b; };
  std::vector<KindGroup> groups;
  for (const RankMeasurement& rank : ranks) {
    if (!groups.empty()) {
      const RankMeasurement& first = ranks[groups.back().first_rank];
      if (first.host == rank.host && close(rank.gemm_rate, first.gemm_rate) &&
          close(rank.attention_rate, first.attention_rate)) {
        ++groups.back().num_ranks;
        continue;
      }
    }
    groups.push_back({rank.rank, 1});
  }
  return groups;
}

}  // namespace internal
namespace {

using internal::KindGroup;
using internal::Median;
constexpr double kTera = 1e12;
constexpr double kMicro = 1e-6;

std::string Number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", value);
  return buffer;
}

std::string GroupName(const Calibration& calibration, const KindGroup& group) {
  const int last = group.first_rank + group.num_ranks - 1;
  std::string name =
      calibration.ranks[group.first_rank].host + "-r" + std::to_string(group.first_rank);
  if (last != group.first_rank) name += "-" + std::to_string(last);
  return name;
}

int GroupOf(const std::vector<KindGroup>& groups, int rank) {
  for (size_t index = 0; index < groups.size(); ++index) {
    if (rank < groups[index].first_rank + groups[index].num_ranks) return static_cast<int>(index);
  }
  return -1;
}

// Median bandwidth and latency over the pairs with one rank in group_a and one in group_b.
struct LinkFigures {
  double bytes_per_second = 0, latency_seconds = 0;
  bool measured = false;
};
LinkFigures Between(const Calibration& calibration, const std::vector<KindGroup>& groups,
                    int group_a, int group_b) {
  std::vector<double> bandwidths, latencies;
  for (const PairMeasurement& pair : calibration.pairs) {
    const int a = GroupOf(groups, pair.a), b = GroupOf(groups, pair.b);
    if ((a == group_a && b == group_b) || (a == group_b && b == group_a)) {
      bandwidths.push_back(pair.bytes_per_second);
      latencies.push_back(pair.latency_seconds);
    }
  }
  return {Median(bandwidths), Median(latencies), !bandwidths.empty()};
}

LinkFigures AllPairs(const Calibration& calibration) {
  std::vector<double> bandwidths, latencies;
  for (const PairMeasurement& pair : calibration.pairs) {
    bandwidths.push_back(pair.bytes_per_second);
    latencies.push_back(pair.latency_seconds);
  }
  return {Median(bandwidths), Median(latencies), !bandwidths.empty()};
}

// A single-rank world has no pair: a link figure is still required by the format, and unused.
constexpr double kUnusedBytesPerSecond = 1e9, kUnusedLatencySeconds = 1e-6;

// A kind's `rate_curve:` (the cost model reads each rank's rates at its own shard from it): per
// probe size, the group's mean measured rate over its rate at the even split (`gemm`,
// `attention`; so the even split's point is 1). Empty when the curve has one point.
std::string RateCurveYaml(const Calibration& calibration, const KindGroup& group, double gemm,
                          double attention) {
  const RankMeasurement& first = calibration.ranks[group.first_rank];
  const size_t points = first.gemm.size();
  if (points < 2 || first.attention.size() != points) return "";
  std::string tokens_list, gemm_list, attention_list;
  for (size_t point = 0; point < points; ++point) {
    double gemm_at = 0, attention_at = 0;
    for (int rank = group.first_rank; rank < group.first_rank + group.num_ranks; ++rank) {
      gemm_at += calibration.ranks[rank].gemm[point].flops_per_second() / group.num_ranks;
      attention_at += calibration.ranks[rank].attention[point].flops_per_second() / group.num_ranks;
    }
    const std::string separator = point == 0 ? "" : ", ";
    tokens_list += separator + std::to_string(first.gemm[point].tokens);
    gemm_list += separator + Number(gemm_at / gemm);
    attention_list += separator + Number(attention_at / attention);
  }
  return "    # rates at other sizes (a rank's tokens for GEMMs, its group's for attention), as "
         "multiples of the rates above\n"
         "    rate_curve: {tokens: [" +
         tokens_list + "], gemm: [" + gemm_list + "], attention: [" + attention_list + "]}\n";
}

std::string KindYaml(const Calibration& calibration, const std::vector<KindGroup>& groups,
                     int index, const LinkFigures& fallback) {
  const KindGroup& group = groups[index];
  double gemm = 0, attention = 0, memory_bandwidth = 0;
  for (int rank = group.first_rank; rank < group.first_rank + group.num_ranks; ++rank) {
    gemm += calibration.ranks[rank].gemm_rate / group.num_ranks;
    attention += calibration.ranks[rank].attention_rate / group.num_ranks;
    memory_bandwidth +=
        internal::OptimizerBytesPerSecond(calibration.ranks[rank].optimizer) / group.num_ranks;
  }
  const double peak = std::max(gemm, attention);
  int ranks_on_host = 0;
  for (const RankMeasurement& rank : calibration.ranks) {
    ranks_on_host += rank.host == calibration.ranks[group.first_rank].host ? 1 : 0;
  }
  const LinkFigures intra = Between(calibration, groups, index, index);
  const LinkFigures inside = intra.measured ? intra : fallback;
  double nic = 0;
  for (int other = 0; other < static_cast<int>(groups.size()); ++other) {
    if (other != index)
      nic = std::max(nic, Between(calibration, groups, index, other).bytes_per_second);
  }
  if (nic <= 0) nic = inside.bytes_per_second;
  const std::string name = GroupName(calibration, group);
  std::string yaml = "  - name: " + name + "\n";
  yaml += "    # ranks " + std::to_string(group.first_rank) + ".." +
          std::to_string(group.first_rank + group.num_ranks - 1) + ": GEMM " + Number(gemm / 1e9) +
          " GFLOP/s, attention " + Number(attention / 1e9) + " GFLOP/s (fp32, measured)\n";
  yaml += "    # hbm_bandwidth: the optimizer step's " +
          Number(CostConstants{}.optimizer_step_bytes_per_param) +
          " bytes per parameter over its measured time\n";
  yaml += "    gpu: {name: " + name + ", bf16_tflops: " + Number(peak / kTera) +
          ", memory: " + Number(calibration.host_memory_bytes / ranks_on_host / kGiB) +
          " GiB, hbm_bandwidth: " + Number(memory_bandwidth / kGB) + " GB/s}\n";
  yaml += "    count: 1\n    gpus_per_node: " + std::to_string(group.num_ranks) + "\n";
  yaml += "    gemm_efficiency: " + Number(gemm / peak) + "\n";
  yaml += "    attention_efficiency: " + Number(attention / peak) + "\n";
  yaml += "    intra_node: " + Number(inside.bytes_per_second / kGB) + " GB/s\n";
  yaml += "    nic: " + Number(nic / kGB) + " GB/s\n";
  yaml += "    latency: " + Number(inside.latency_seconds / kMicro) + " us\n";
  yaml += RateCurveYaml(calibration, group, gemm, attention);
  return yaml;
}

}  // namespace

std::string ClusterYaml(const Calibration& calibration, const CalibrateOptions& options,
                        const std::string& name) {
  const std::vector<KindGroup> groups =
      internal::GroupRanks(calibration.ranks, options.merge_tolerance);
  LinkFigures everywhere = AllPairs(calibration);
  if (!everywhere.measured) everywhere = {kUnusedBytesPerSecond, kUnusedLatencySeconds, false};
  std::vector<double> inter_latencies;
  std::string links;
  for (int a = 0; a < static_cast<int>(groups.size()); ++a) {
    for (int b = a + 1; b < static_cast<int>(groups.size()); ++b) {
      const LinkFigures link = Between(calibration, groups, a, b);
      inter_latencies.push_back(link.latency_seconds);
      links += "  - {between: [" + GroupName(calibration, groups[a]) + ", " +
               GroupName(calibration, groups[b]) +
               "], bandwidth: " + Number(link.bytes_per_second / kGB) + " GB/s}\n";
    }
  }
  std::string yaml =
      "# Measured by `hexiseq calibrate` for model " + calibration.model_name +
      ", S = " + std::to_string(calibration.seq_len) + ", " +
      std::to_string(calibration.num_ranks) + " ranks; rates read at the even split of " +
      std::to_string(calibration.even_shard_tokens) +
      " tokens per rank,\n# rate_curve: the rates at other sizes, from S / 4N up to S.\n"
      "# GEMM rate probe: " +
      calibration.linear_probe + ".\n# Optimizer step probe: " + calibration.optimizer_probe +
      ".\n"
      "# Speeds are measured fp32 rates: bf16_tflops x gemm_efficiency = GEMM FLOP/s and\n"
      "# bf16_tflops x attention_efficiency = attention FLOP/s, counted as the cost model counts\n"
      "# them (forward + backward + recompute). Links: medians of ping-pong over rank pairs.\n"
      "# Raw figures (every curve, every pair, all-to-all): the sidecar .measurements.json.\n";
  if (!calibration.combined_from.empty()) {
    yaml += "# Combined: every timed figure is the median of " +
            std::to_string(calibration.combined_from.size()) + " calibrations (" +
            calibration.combined_from.front() + " ...).\n";
  }
  if (!calibration.slowdown_padding.empty()) {
    yaml += "# --slowdown padding: " + calibration.slowdown_padding + ".\n";
  }
  yaml += "name: " + name + "\n";
  const double inter_latency =
      inter_latencies.empty() ? everywhere.latency_seconds : Median(inter_latencies);
  yaml += "inter_node_latency: " + Number(inter_latency / kMicro) + " us\n";
  yaml += "nodes:\n";
  for (int index = 0; index < static_cast<int>(groups.size()); ++index) {
    yaml += KindYaml(calibration, groups, index, everywhere);
  }
  if (!links.empty()) yaml += "links:\n" + links;
  return yaml;
}

std::string CalibrationJson(const Calibration& calibration) {
  using nlohmann::json;
  auto curve = [](const std::vector<RatePoint>& points) {
    json out = json::array();
    for (const RatePoint& point : points) {
      out.push_back({{"tokens", point.tokens},
                     {"flops", point.flops},
                     {"seconds", point.seconds},
                     {"flops_per_second", point.flops_per_second()}});
    }
    return out;
  };
  json ranks = json::array();
  for (const RankMeasurement& rank : calibration.ranks) {
    json entry = {{"rank", rank.rank},
                  {"host", rank.host},
                  {"slowdown", rank.slowdown},
                  {"gemm_flops_per_second", rank.gemm_rate},
                  {"attention_flops_per_second", rank.attention_rate},
                  {"gemm_curve", curve(rank.gemm)},
                  {"attention_curve", curve(rank.attention)},
                  {"optimizer_params", rank.optimizer.params},
                  {"optimizer_seconds", rank.optimizer.seconds}};
    if (!calibration.combined_from.empty()) {
      entry["gemm_flops_per_second_runs"] = rank.gemm_rate_runs;
      entry["attention_flops_per_second_runs"] = rank.attention_rate_runs;
    }
    ranks.push_back(std::move(entry));
  }
  json pairs = json::array();
  for (const PairMeasurement& pair : calibration.pairs) {
    pairs.push_back({{"ranks", {pair.a, pair.b}},
                     {"latency_seconds", pair.latency_seconds},
                     {"bytes_per_second", pair.bytes_per_second},
                     {"message_bytes", pair.bytes},
                     {"one_way_seconds", pair.half_rtt}});
  }
  json all_to_all = json::array();
  for (const AllToAllMeasurement& row : calibration.all_to_all) {
    all_to_all.push_back({{"bytes_per_peer", row.bytes_per_peer},
                          {"seconds", row.seconds},
                          {"alpha_beta_seconds", row.predicted_seconds}});
  }
  json out = {{"format", "hexiseq.calibration/1"},
              {"model", calibration.model_name},
              {"seq_len", calibration.seq_len},
              {"num_ranks", calibration.num_ranks},
              {"even_shard_tokens", calibration.even_shard_tokens},
              {"slowdown_padding", calibration.slowdown_padding},
              {"linear_probe", calibration.linear_probe},
              {"optimizer_probe", calibration.optimizer_probe},
              {"ranks", ranks},
              {"pairs", pairs},
              {"all_to_all", all_to_all},
              {"host_memory_bytes", calibration.host_memory_bytes}};
  if (!calibration.combined_from.empty()) out["combined_from"] = calibration.combined_from;
  return out.dump(2) + "\n";
}

}  // namespace hexiseq::calibrate
