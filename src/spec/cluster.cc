// Cluster files (DESIGN.md "Cluster file") into Cluster values, plus the pairwise link model.
// Link model: same node -> the node kind's intra_node; different nodes -> a `links:` override
// between the two node kinds when one is given, else the smaller of the two NICs. Latency is one
// constant per node kind inside a node and one cluster-wide constant between nodes. Ignores
// switch topology, rail alignment and NIC sharing (the simulator models sharing).
//
// Syntax accepted (a complete example is examples/clusters/custom-4.yaml):
//   name: my-cluster                 # optional; defaults to the file name
//   description: free text           # optional
//   nodes:                           # node kinds, in rank order
//     - name: fast                   # optional; lets `links:` name this kind
//       gpu: H100-SXM                # catalog name, or {name, bf16_tflops, memory, ...}
//       count: 2                     # nodes of this kind
//       gpus_per_node: 8
//       intra_node: 450 GB/s         # optional; default: the device's catalog figure
//       nic: 25 GB/s                 # optional; default: inter_node, else the catalog figure
//       gemm_efficiency: 0.7         # optional per-kind overrides of the catalog
//       attention_efficiency: 0.6
//       latency: 3 us                # optional; per message inside the node
//       rate_curve:                  # optional (hexiseq calibrate writes it): the rates' factors
//         {tokens: [256, 512, 1024], gemm: [0.97, 1, 1], attention: [0.85, 0.93, 1]}
//   inter_node: 25 GB/s              # optional default NIC for kinds that give none
//   inter_node_latency: 5 us         # optional; per message between nodes
//   links:                           # optional overrides between node kinds, named by their
//     - {between: [fast, A100-SXM-80G], bandwidth: 12 GB/s}   # `name:` or their gpu name
#include "spec/cluster.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "spec/limits.h"
#include "spec/spec_input.h"
#include "spec/units.h"

namespace hexiseq {
namespace {

using spec_internal::CheckedEntries;
using spec_internal::EqualsIgnoreCase;
using spec_internal::FieldMessage;
using spec_internal::Get;
using spec_internal::JoinList;
using spec_internal::Quote;
using spec_internal::Trim;

// Per-message latency inside a node (NVLink / PCIe P2P, NCCL small-message figure). The
// cross-node default is Cluster::inter_node_latency_seconds (5 us, one RDMA hop).
constexpr double kDefaultIntraNodeLatencySeconds = 3e-6;

constexpr const char* kExample = "start from examples/clusters/h100-a100-16.yaml";

const std::vector<std::string> kTopKeys = {"name",       "description",        "nodes",
                                           "inter_node", "inter_node_latency", "links"};
const std::vector<std::string> kKindKeys = {
    "name",       "gpu",       "count",           "gpus_per_node",
    "intra_node", "nic",       "gemm_efficiency", "attention_efficiency",
    "latency",    "rate_curve"};
const std::vector<std::string> kRateCurveKeys = {"tokens", "gemm", "attention"};
const std::vector<std::string> kLinkKeys = {"between", "bandwidth"};

// True when the two kinds differ at most in their node count.
bool SameExceptCount(const NodeKind& a, NodeKind b) {
  b.count = a.count;
  return a == b;
}

// Adjacent node kinds that are identical (same device, links, efficiencies and latency; no
// `links:` entry names either) become one kind with their counts added. Rank numbering does not
// change, and the planner, whose work grows with the number of kinds, sees one kind instead of
// thousands of identical one-GPU entries.
void MergeIdenticalNeighbours(Cluster& cluster) {
  std::vector<bool> linked(cluster.kinds.size(), false);
  for (const LinkOverride& link : cluster.links) linked[link.kind_a] = linked[link.kind_b] = true;
  std::vector<int> new_index(cluster.kinds.size());
  std::vector<NodeKind> merged;
  for (size_t kind = 0; kind < cluster.kinds.size(); ++kind) {
    const NodeKind& current = cluster.kinds[kind];
    if (kind > 0 && !linked[kind] && !linked[kind - 1] && SameExceptCount(merged.back(), current)) {
      merged.back().count += current.count;
    } else {
      merged.push_back(current);
    }
    new_index[kind] = static_cast<int>(merged.size()) - 1;
  }
  for (LinkOverride& link : cluster.links) {
    link.kind_a = new_index[link.kind_a];
    link.kind_b = new_index[link.kind_b];
  }
  cluster.kinds = std::move(merged);
}

using Entries = std::vector<std::pair<std::string, YAML::Node>>;

// The file's own fields: name, description, inter_node_latency into `cluster`; returns
// inter_node (every kind's default NIC bandwidth), if given.
Result<std::optional<double>> ParseClusterFields(const Entries& top, const std::string& file,
                                                 Cluster& cluster) {
  auto field = [&file](const std::string& path) { return file + ": " + path; };
  cluster.name = spec_internal::FileStem(file);
  if (YAML::Node name = Get(top, "name"); name.IsDefined()) {
    auto text = spec_internal::ScalarText(name, field("name"), "the cluster's name, a string",
                                          "write name: my-cluster");
    if (!text) return std::unexpected(text.error());
    cluster.name = *text;
  }
  if (YAML::Node description = Get(top, "description"); description.IsDefined()) {
    auto text =
        spec_internal::ScalarText(description, field("description"), "free text", "quote it");
    if (!text) return std::unexpected(text.error());
  }
  std::optional<double> inter_node;
  if (YAML::Node node = Get(top, "inter_node"); node.IsDefined()) {
    auto value = spec_internal::ReadBandwidth(node, field("inter_node"));
    if (!value) return std::unexpected(value.error());
    inter_node = *value;
  }
  if (YAML::Node node = Get(top, "inter_node_latency"); node.IsDefined()) {
    auto value = spec_internal::ReadDuration(node, field("inter_node_latency"));
    if (!value) return std::unexpected(value.error());
    cluster.inter_node_latency_seconds = *value;
  }
  return inter_node;
}

// The `nodes:` list: present, a non-empty list, at most kMaxNodeKinds entries.
Result<YAML::Node> NodesList(const Entries& top, const std::string& field) {
  const std::string nodes_rule =
      "a cluster needs a non-empty `nodes:` list of node kinds, each with gpu, count and "
      "gpus_per_node";
  YAML::Node nodes = Get(top, "nodes");
  if (!nodes.IsDefined() || nodes.IsNull()) {
    return InvalidArgument(FieldMessage(field, "", "missing", nodes_rule, kExample));
  }
  if (!nodes.IsSequence() || nodes.size() == 0) {
    return InvalidArgument(FieldMessage(field, "", nodes.IsSequence() ? "empty list" : "not a list",
                                        nodes_rule, "write each node kind as `- gpu: H100-SXM`"));
  }
  if (static_cast<int64_t>(nodes.size()) > kMaxNodeKinds) {
    return InvalidArgument(
        FieldMessage(field, "", std::to_string(nodes.size()) + " node kinds",
                     "at most " + std::to_string(kMaxNodeKinds) + " node kinds (docs/limits.md)",
                     "give identical nodes as one kind with a count"));
  }
  return nodes;
}

// A node kind's `gpu:`: a catalog name or an inline device.
Result<DeviceSpec> ParseKindDevice(const Entries& entries, const std::string& where,
                                   const std::string& file, const DeviceCatalog& catalog) {
  const YAML::Node gpu = Get(entries, "gpu");
  const std::string gpu_rule =
      "a device-catalog name, case-insensitive, or an inline device {name, bf16_tflops, "
      "memory}";
  if (gpu.IsDefined() && gpu.IsMap())
    return spec_internal::ParseDeviceRow(gpu, where + ".gpu", nullptr, "inline device in " + file);
  auto text = spec_internal::ScalarText(gpu, where + ".gpu", gpu_rule,
                                        "write gpu: H100-SXM (see docs/devices.md)");
  if (!text) return std::unexpected(text.error());
  return catalog.Find(*text, where + ".gpu");
}

// A node kind's count and gpus_per_node; `total_ranks` counts the cluster's GPUs so far.
Result<void> ParseKindSize(const Entries& entries, const std::string& where, NodeKind& kind,
                           int64_t& total_ranks) {
  auto count = spec_internal::ReadInt(Get(entries, "count"), where + ".count", 1, kMaxRanks,
                                      "count is the number of nodes of this kind, a whole "
                                      "number >= 1",
                                      "write count: 2, or remove the node kind");
  if (!count) return std::unexpected(count.error());
  kind.count = static_cast<int>(*count);
  auto per_node = spec_internal::ReadInt(
      Get(entries, "gpus_per_node"), where + ".gpus_per_node", 1, kMaxRanks,
      "gpus_per_node is the number of GPUs in each node, a whole number >= 1",
      "write gpus_per_node: 8");
  if (!per_node) return std::unexpected(per_node.error());
  kind.gpus_per_node = static_cast<int>(*per_node);
  total_ranks += *count * *per_node;
  if (total_ranks > kMaxRanks) {
    return InvalidArgument(
        FieldMessage(where, "", "the cluster has " + std::to_string(total_ranks) + " GPUs so far",
                     "at most " + std::to_string(kMaxRanks) + " GPUs in a cluster (docs/limits.md)",
                     "check count and gpus_per_node"));
  }
  return {};
}

// A node kind's links (intra_node, nic: the device's unless given; inter_node the default NIC),
// efficiencies and latency.
Result<void> ParseKindLinks(const Entries& entries, const std::string& where,
                            std::optional<double> inter_node, NodeKind& kind) {
  kind.intra_node_bytes_per_second = kind.device.intra_node_bytes_per_second;
  if (YAML::Node node = Get(entries, "intra_node"); node.IsDefined()) {
    auto value = spec_internal::ReadBandwidth(node, where + ".intra_node");
    if (!value) return std::unexpected(value.error());
    kind.intra_node_bytes_per_second = *value;
  }
  kind.nic_bytes_per_second = inter_node.value_or(kind.device.nic_bytes_per_second);
  if (YAML::Node node = Get(entries, "nic"); node.IsDefined()) {
    auto value = spec_internal::ReadBandwidth(node, where + ".nic");
    if (!value) return std::unexpected(value.error());
    kind.nic_bytes_per_second = *value;
  }
  // Keep the device row consistent with the links this kind actually has.
  kind.device.intra_node_bytes_per_second = kind.intra_node_bytes_per_second;
  kind.device.nic_bytes_per_second = kind.nic_bytes_per_second;

  if (auto efficiencies = spec_internal::ReadEfficiencies(entries, where, kind.device);
      !efficiencies)
    return std::unexpected(efficiencies.error());

  kind.latency_seconds = kDefaultIntraNodeLatencySeconds;
  if (YAML::Node node = Get(entries, "latency"); node.IsDefined()) {
    auto value = spec_internal::ReadDuration(node, where + ".latency");
    if (!value) return std::unexpected(value.error());
    kind.latency_seconds = *value;
  }
  return {};
}

// One list of a rate_curve: `count` numbers (1 to kMaxRateCurvePoints when 0), each checked by
// `read`.
template <class Read>
Result<std::vector<double>> ReadCurveList(const YAML::Node& node, const std::string& where,
                                          size_t count, Read read) {
  const std::string hint =
      "write rate_curve: {tokens: [256, 512, 1024], gemm: [0.97, 1, 1], "
      "attention: [0.85, 0.93, 1]}";
  const std::string rule =
      count > 0
          ? "a list of one number per point of rate_curve.tokens (" + std::to_string(count) + ")"
          : "a list of 1 to " + std::to_string(kMaxRateCurvePoints) + " shard sizes";
  if (!node.IsDefined() || !node.IsSequence()) {
    return InvalidArgument(
        FieldMessage(where, "", node.IsDefined() ? "not a list" : "missing", rule, hint));
  }
  const size_t size = node.size();
  if (size == 0 || static_cast<int64_t>(size) > kMaxRateCurvePoints ||
      (count > 0 && size != count)) {
    return InvalidArgument(FieldMessage(
        where, "", "has " + std::to_string(size) + (size == 1 ? " number" : " numbers"), rule,
        hint));
  }
  std::vector<double> values;
  for (size_t index = 0; index < size; ++index) {
    auto value = read(node[index], where + "[" + std::to_string(index) + "]", hint);
    if (!value) return std::unexpected(value.error());
    values.push_back(*value);
  }
  return values;
}

// A node kind's `rate_curve:` (optional) into kind.device.rate_curve.
Result<void> ParseRateCurve(const Entries& entries, const std::string& where, NodeKind& kind) {
  const YAML::Node node = Get(entries, "rate_curve");
  if (!node.IsDefined()) return {};
  const std::string field = where + ".rate_curve";
  auto curve = CheckedEntries(node, field, kRateCurveKeys, "a rate curve");
  if (!curve) return std::unexpected(curve.error());
  const std::string tokens_rule =
      "shard sizes in tokens per rank, increasing, each in [1, " + std::to_string(kMaxSeqLen) + "]";
  double previous = 0;
  auto read_tokens = [&](const YAML::Node& value_node, const std::string& at,
                         const std::string& hint) -> Result<double> {
    auto value = spec_internal::ReadPositive(value_node, at, false, tokens_rule, hint);
    if (!value) return std::unexpected(value.error());
    if (*value <= previous || *value < 1 || *value > static_cast<double>(kMaxSeqLen)) {
      return InvalidArgument(
          FieldMessage(at, Trim(value_node.Scalar()),
                       *value <= previous ? "not above the point before" : "outside [1, 2^31]",
                       tokens_rule, hint));
    }
    previous = *value;
    return *value;
  };
  auto tokens = ReadCurveList(Get(*curve, "tokens"), field + ".tokens", 0, read_tokens);
  if (!tokens) return std::unexpected(tokens.error());
  const std::string factor_rule =
      "the rate at each point as a multiple of the kind's rate, in (0, " +
      std::to_string(static_cast<int>(kMaxRateCurveFactor)) + "]";
  auto read_factor = [&](const YAML::Node& value_node, const std::string& at,
                         const std::string& hint) -> Result<double> {
    auto value = spec_internal::ReadPositive(value_node, at, false, factor_rule, hint);
    if (!value) return std::unexpected(value.error());
    if (*value > kMaxRateCurveFactor) {
      return InvalidArgument(
          FieldMessage(at, Trim(value_node.Scalar()), "too large", factor_rule, hint));
    }
    return *value;
  };
  auto gemm = ReadCurveList(Get(*curve, "gemm"), field + ".gemm", tokens->size(), read_factor);
  if (!gemm) return std::unexpected(gemm.error());
  auto attention =
      ReadCurveList(Get(*curve, "attention"), field + ".attention", tokens->size(), read_factor);
  if (!attention) return std::unexpected(attention.error());
  kind.device.rate_curve = {std::move(*tokens), std::move(*gemm), std::move(*attention)};
  return {};
}

// One entry of `nodes:` into `cluster.kinds`, its `name:` (or "") into `kind_names`.
Result<void> ParseNodeKind(const YAML::Node& node, const std::string& where,
                           const std::string& file, const DeviceCatalog& catalog,
                           std::optional<double> inter_node, int64_t& total_ranks, Cluster& cluster,
                           std::vector<std::string>& kind_names) {
  auto entries = CheckedEntries(node, where, kKindKeys, "a node kind");
  if (!entries) return std::unexpected(entries.error());
  std::string kind_name;
  if (YAML::Node name = Get(*entries, "name"); name.IsDefined()) {
    auto text = spec_internal::ScalarText(name, where + ".name",
                                          "an optional label that `links:` can refer to",
                                          "write name: h100-nodes");
    if (!text) return std::unexpected(text.error());
    kind_name = *text;
  }
  NodeKind kind;
  auto device = ParseKindDevice(*entries, where, file, catalog);
  if (!device) return std::unexpected(device.error());
  kind.device = *device;
  if (auto size = ParseKindSize(*entries, where, kind, total_ranks); !size)
    return std::unexpected(size.error());
  if (auto links = ParseKindLinks(*entries, where, inter_node, kind); !links)
    return std::unexpected(links.error());
  if (auto curve = ParseRateCurve(*entries, where, kind); !curve)
    return std::unexpected(curve.error());
  cluster.kinds.push_back(std::move(kind));
  kind_names.push_back(kind_name);
  return {};
}

// The names `links:` may use: each kind's `name:` and gpu name, once each.
std::vector<std::string> LinkLabels(const Cluster& cluster,
                                    const std::vector<std::string>& kind_names) {
  std::vector<std::string> known;
  for (size_t kind = 0; kind < cluster.kinds.size(); ++kind) {
    for (const std::string& label : {kind_names[kind], cluster.kinds[kind].device.name}) {
      if (!label.empty() && std::find(known.begin(), known.end(), label) == known.end()) {
        known.push_back(label);
      }
    }
  }
  return known;
}

// One side of a link's `between:`: the node kinds with that `name:` or gpu name.
Result<std::vector<int>> LinkSide(const YAML::Node& label_node, const std::string& where,
                                  const Cluster& cluster,
                                  const std::vector<std::string>& kind_names,
                                  const std::vector<std::string>& known) {
  const std::string between_rule =
      "between names two node kinds, each by its `name:` or its gpu name";
  const std::string between_hint = "node kinds here are " + JoinList(known, "and");
  auto label = spec_internal::ScalarText(label_node, where, between_rule, between_hint);
  if (!label) return std::unexpected(label.error());
  std::vector<int> kinds;
  for (size_t kind = 0; kind < cluster.kinds.size(); ++kind) {
    if (EqualsIgnoreCase(*label, kind_names[kind]) ||
        EqualsIgnoreCase(*label, cluster.kinds[kind].device.name)) {
      kinds.push_back(static_cast<int>(kind));
    }
  }
  if (kinds.empty()) {
    const auto closest = spec_internal::ClosestNames(*label, known, 1);
    return InvalidArgument(
        FieldMessage(where, Quote(*label), "no node kind has this name or gpu", between_rule,
                     between_hint + (closest.empty() ? "" : "; did you mean " + closest[0] + "?")));
  }
  return kinds;
}

// `links:`: bandwidth overrides between node kinds, referred to by `name:` or by gpu name.
Result<void> ParseLinks(const YAML::Node& links, const std::string& file,
                        const std::vector<std::string>& kind_names, Cluster& cluster) {
  const std::vector<std::string> known = LinkLabels(cluster, kind_names);
  if (!links.IsSequence()) {
    return InvalidArgument(FieldMessage(file + ": links", "", "not a list",
                                        "links is a list of {between: [A, B], bandwidth}",
                                        "write - {between: [H100-SXM, A100-SXM-80G], "
                                        "bandwidth: 12 GB/s}"));
  }
  for (size_t index = 0; index < links.size(); ++index) {
    const std::string where = file + ": links[" + std::to_string(index) + "]";
    auto entries = CheckedEntries(links[index], where, kLinkKeys, "a link override");
    if (!entries) return std::unexpected(entries.error());
    const YAML::Node between = Get(*entries, "between");
    if (!between.IsDefined() || !between.IsSequence() || between.size() != 2) {
      return InvalidArgument(FieldMessage(
          where + ".between", "", between.IsDefined() ? "not a list of two names" : "missing",
          "between names two node kinds, each by its `name:` or its gpu name",
          "node kinds here are " + JoinList(known, "and")));
    }
    std::vector<int> sides[2];
    for (size_t side = 0; side < 2; ++side) {
      auto kinds = LinkSide(between[side], where + ".between[" + std::to_string(side) + "]",
                            cluster, kind_names, known);
      if (!kinds) return std::unexpected(kinds.error());
      sides[side] = *kinds;
    }
    auto bandwidth = spec_internal::ReadBandwidth(Get(*entries, "bandwidth"), where + ".bandwidth");
    if (!bandwidth) return std::unexpected(bandwidth.error());
    for (int kind_a : sides[0]) {
      for (int kind_b : sides[1]) {
        cluster.links.push_back(LinkOverride{kind_a, kind_b, *bandwidth});
      }
    }
  }
  return {};
}

Result<Cluster> ParseRoot(const YAML::Node& root, const std::string& file,
                          const DeviceCatalog& catalog) {
  auto top = CheckedEntries(root, file + ":", kTopKeys, "a cluster file");
  if (!top) return std::unexpected(top.error());
  Cluster cluster;
  auto inter_node = ParseClusterFields(*top, file, cluster);
  if (!inter_node) return std::unexpected(inter_node.error());
  auto nodes = NodesList(*top, file + ": nodes");
  if (!nodes) return std::unexpected(nodes.error());
  std::vector<std::string> kind_names;  // `name:` of each kind, or "" when not given
  int64_t total_ranks = 0;
  for (size_t index = 0; index < nodes->size(); ++index) {
    auto kind = ParseNodeKind((*nodes)[index], file + ": nodes[" + std::to_string(index) + "]",
                              file, catalog, *inter_node, total_ranks, cluster, kind_names);
    if (!kind) return std::unexpected(kind.error());
  }
  if (YAML::Node links = Get(*top, "links"); links.IsDefined() && !links.IsNull()) {
    if (auto parsed = ParseLinks(links, file, kind_names, cluster); !parsed)
      return std::unexpected(parsed.error());
  }
  MergeIdenticalNeighbours(cluster);
  cluster.Finalize();
  return cluster;
}

}  // namespace

double Cluster::Bandwidth(int a, int b) const {
  const RankInfo& rank_a = ranks[a];
  const RankInfo& rank_b = ranks[b];
  if (a == b) {
    // A local copy; callers should not need it, but it must be finite and positive.
    const DeviceSpec& spec = kinds[rank_a.kind].device;
    return spec.hbm_bytes_per_second > 0 ? spec.hbm_bytes_per_second
                                         : kinds[rank_a.kind].intra_node_bytes_per_second;
  }
  if (rank_a.node == rank_b.node) return kinds[rank_a.kind].intra_node_bytes_per_second;
  return InterNodeBandwidth(links, rank_a.kind, rank_b.kind,
                            kinds[rank_a.kind].nic_bytes_per_second,
                            kinds[rank_b.kind].nic_bytes_per_second);
}

double InterNodeBandwidth(const std::vector<LinkOverride>& links, int kind_a, int kind_b,
                          double nic_a, double nic_b) {
  // The last matching override wins, so a later `links:` entry refines an earlier one.
  for (auto link = links.rbegin(); link != links.rend(); ++link) {
    if ((link->kind_a == kind_a && link->kind_b == kind_b) ||
        (link->kind_a == kind_b && link->kind_b == kind_a)) {
      return link->bytes_per_second;
    }
  }
  return std::min(nic_a, nic_b);
}

double Cluster::Latency(int a, int b) const {
  if (a == b) return 0;
  if (ranks[a].node == ranks[b].node) return kinds[ranks[a].kind].latency_seconds;
  return inter_node_latency_seconds;
}

LinkTable::LinkTable(const Cluster& cluster)
    : num_kinds_(static_cast<int>(cluster.kinds.size())),
      links_(cluster.links),
      inter_latency_(cluster.inter_node_latency_seconds) {
  for (const RankInfo& rank : cluster.ranks) places_.push_back({rank.node, rank.kind});
  local_.assign(num_kinds_, 0.0);
  for (const NodeInfo& node : cluster.nodes)
    local_[node.kind] = cluster.Bandwidth(node.first_rank, node.first_rank);
  for (const NodeKind& kind : cluster.kinds) {
    intra_.push_back(kind.intra_node_bytes_per_second);
    intra_latency_.push_back(kind.latency_seconds);
    nic_.push_back(kind.nic_bytes_per_second);
  }
  if (num_kinds_ > kPairTableKinds) return;
  for (int kind = 0; kind < num_kinds_; ++kind)
    for (int other = 0; other < num_kinds_; ++other)
      inter_.push_back(InterNodeBandwidth(links_, kind, other, nic_[kind], nic_[other]));
}

double Cluster::NicPortBandwidth(int kind) const {
  double bandwidth = kinds[kind].nic_bytes_per_second;
  for (const LinkOverride& link : links)
    if (link.kind_a == kind || link.kind_b == kind)
      bandwidth = std::max(bandwidth, link.bytes_per_second);
  return bandwidth;
}

double Cluster::TotalGemmFlops() const {
  double total = 0;
  for (const RankInfo& rank : ranks) total += kinds[rank.kind].device.GemmFlops();
  return total;
}

double Cluster::TotalAttentionFlops() const {
  double total = 0;
  for (const RankInfo& rank : ranks) total += kinds[rank.kind].device.AttentionFlops();
  return total;
}

void Cluster::Finalize() {
  nodes.clear();
  ranks.clear();
  int next_rank = 0;
  for (size_t kind = 0; kind < kinds.size(); ++kind) {
    for (int copy = 0; copy < kinds[kind].count; ++copy) {
      NodeInfo node;
      node.node = static_cast<int>(nodes.size());
      node.kind = static_cast<int>(kind);
      node.first_rank = next_rank;
      node.num_ranks = kinds[kind].gpus_per_node;
      for (int local = 0; local < kinds[kind].gpus_per_node; ++local) {
        ranks.push_back(RankInfo{next_rank, node.node, node.kind, local});
        ++next_rank;
      }
      nodes.push_back(node);
    }
  }
}

Result<Cluster> ParseCluster(const std::string& text, const std::string& source_name,
                             const DeviceCatalog& catalog) {
  auto root = spec_internal::ParseYamlDocument(
      text, source_name, "cluster file",
      std::string(kExample) +
          " (nodes: a list of {gpu, count, gpus_per_node}; optional name, inter_node, links)",
      false);
  if (!root) return std::unexpected(root.error());
  try {
    return ParseRoot(*root, source_name, catalog);
  } catch (const std::exception& e) {
    // yaml-cpp may still throw on exotic input; never let it escape as a crash.
    return InvalidArgument(source_name + ": cannot read the cluster file: " + e.what() +
                           " (rule: a cluster file is a YAML mapping; hint: " + kExample + ")");
  }
}

Result<Cluster> LoadCluster(const std::string& path, const DeviceCatalog& catalog) {
  auto text = spec_internal::ReadTextFile(path, "cluster file");
  if (!text) return std::unexpected(text.error());
  return ParseCluster(*text, path, catalog);
}

Cluster MakeCluster(const std::vector<DeviceSpec>& devices, const std::vector<int>& node_counts,
                    int gpus_per_node, double nic_bytes_per_second) {
  HEXISEQ_CHECK(devices.size() == node_counts.size(), "one node count per device");
  HEXISEQ_CHECK(gpus_per_node >= 1, "gpus_per_node >= 1");
  Cluster cluster;
  for (size_t index = 0; index < devices.size(); ++index) {
    if (!cluster.name.empty()) cluster.name += "+";
    cluster.name += std::to_string(node_counts[index]) + "x" + std::to_string(gpus_per_node) + "x" +
                    devices[index].name;
    NodeKind kind;
    kind.device = devices[index];
    kind.count = node_counts[index];
    kind.gpus_per_node = gpus_per_node;
    kind.intra_node_bytes_per_second = devices[index].intra_node_bytes_per_second;
    kind.nic_bytes_per_second =
        nic_bytes_per_second > 0 ? nic_bytes_per_second : devices[index].nic_bytes_per_second;
    kind.device.nic_bytes_per_second = kind.nic_bytes_per_second;
    kind.latency_seconds = kDefaultIntraNodeLatencySeconds;
    cluster.kinds.push_back(std::move(kind));
  }
  cluster.Finalize();
  return cluster;
}

}  // namespace hexiseq
