#include "sim_test_util.h"

#include <algorithm>
#include <numeric>

#include "spec/error.h"

namespace hexiseq::simtest {
namespace {

std::vector<int64_t> Split(int64_t total, const std::vector<double>& weights) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> out(weights.size());
  std::vector<std::pair<double, size_t>> rest;
  int64_t used = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = total * weights[i] / sum;
    out[i] = static_cast<int64_t>(exact);
    used += out[i];
    rest.push_back({exact - out[i], i});
  }
  std::sort(rest.begin(), rest.end(), [](auto a, auto b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (size_t i = 0; used < total; ++i, ++used) ++out[rest[i % rest.size()].second];
  return out;
}

}  // namespace

DeviceSpec Device(const char* name) {
  auto device = DeviceCatalog{}.Find(name, "test");
  HEXISEQ_CHECK(device.has_value(), "catalog device");
  return *device;
}

Cluster SingleNode(const char* device, int gpus) {
  return MakeCluster({Device(device)}, {1}, gpus, 0);
}

Cluster OneGpuPerNode(const std::vector<const char*>& devices, double nic) {
  std::vector<DeviceSpec> specs;
  std::vector<int> counts;
  for (const char* d : devices) {
    specs.push_back(Device(d));
    counts.push_back(1);
  }
  return MakeCluster(specs, counts, 1, nic);
}

Cluster EightGpuNodes(const std::vector<const char*>& devices, const std::vector<int>& nodes,
                      double nic) {
  std::vector<DeviceSpec> specs;
  for (const char* d : devices) specs.push_back(Device(d));
  return MakeCluster(specs, nodes, 8, nic);
}

Plan RandomPlan(const CostModel& cost, std::mt19937_64& rng, GroupShape shape, double spread,
                bool equal_blocks) {
  const Cluster& cluster = cost.cluster();
  const ModelSpec& model = cost.model();
  const int n = cluster.num_ranks();
  std::uniform_real_distribution<double> jitter(1 - spread, 1 + spread);

  // Groups.
  std::vector<std::vector<int>> groups;
  if (shape == GroupShape::kWithinNode) {
    for (const NodeInfo& node : cluster.nodes) {
      std::vector<int> ranks(node.num_ranks);
      std::iota(ranks.begin(), ranks.end(), node.first_rank);
      // Split the node into 1 or 2 groups at random.
      const int cut = node.num_ranks > 1 && rng() % 3 == 0
                          ? 1 + static_cast<int>(rng() % (node.num_ranks - 1))
                          : node.num_ranks;
      groups.push_back({ranks.begin(), ranks.begin() + cut});
      if (cut < node.num_ranks) groups.push_back({ranks.begin() + cut, ranks.end()});
    }
  } else {
    std::vector<int> ranks(n);
    std::iota(ranks.begin(), ranks.end(), 0);
    std::shuffle(ranks.begin(), ranks.end(), rng);
    const int k = 1 + static_cast<int>(rng() % n);
    groups.resize(k);
    for (int i = 0; i < n; ++i) groups[i < k ? i : rng() % k].push_back(ranks[i]);
    for (auto& g : groups) std::sort(g.begin(), g.end());
  }
  std::shuffle(groups.begin(), groups.end(), rng);  // ring order

  // Zigzag sequence split by attention capability x jitter.
  const int64_t seq = cost.workload().seq_len;
  std::vector<double> group_weight;
  for (const auto& g : groups) {
    double w = 0;
    for (int r : g) w += cluster.device(r).AttentionFlops();
    group_weight.push_back(equal_blocks ? 1.0 : w * jitter(rng));
  }
  const int64_t half = seq / 2;
  const std::vector<int64_t> sizes = Split(half, group_weight);
  Plan plan;
  plan.strategy = "random";
  plan.model = model.name;
  plan.seq_len = seq;
  plan.batch = cost.workload().batch;
  plan.recompute = RecomputeName(cost.workload().recompute);
  plan.zero_stage = cost.workload().zero_stage;
  plan.num_heads = model.heads;
  plan.num_kv_heads = model.kv_heads;
  plan.num_ranks = n;
  int64_t pos = 0;
  for (size_t k = 0; k < groups.size(); ++k) {
    PlanGroup group;
    group.ranks = groups[k];
    Ranges tokens{{pos, pos + sizes[k]}, {seq - pos - sizes[k], seq - pos}};
    if (k + 1 == groups.size() && seq % 2 == 1) tokens.push_back({half, half + 1});
    pos += sizes[k];
    group.tokens = Normalize(tokens);
    const int64_t group_tokens = TotalTokens(group.tokens);
    // Member tokens by GEMM speed, heads by attention speed, both jittered.
    std::vector<double> tw, hw;
    for (int r : groups[k]) {
      tw.push_back(cluster.device(r).GemmFlops() * jitter(rng));
      hw.push_back(cluster.device(r).AttentionFlops() * jitter(rng));
    }
    const std::vector<int64_t> member_tokens = Split(group_tokens, tw);
    const std::vector<int64_t> member_heads = Split(model.heads, hw);
    std::vector<int> head_ids(model.heads);
    std::iota(head_ids.begin(), head_ids.end(), 0);
    if (rng() % 4 == 0) std::shuffle(head_ids.begin(), head_ids.end(), rng);  // scattered heads
    int64_t offset = 0, head_pos = 0;
    for (size_t i = 0; i < groups[k].size(); ++i) {
      PlanMember m;
      m.rank = groups[k][i];
      m.device = cluster.device(m.rank).name;
      m.node = cluster.ranks[m.rank].node;
      m.tokens =
          group_tokens > 0 ? SliceByOffset(group.tokens, offset, member_tokens[i]) : Ranges{};
      offset += member_tokens[i];
      if (group_tokens > 0) {
        m.heads.assign(head_ids.begin() + head_pos, head_ids.begin() + head_pos + member_heads[i]);
        std::sort(m.heads.begin(), m.heads.end());
        head_pos += member_heads[i];
      }
      group.members.push_back(std::move(m));
    }
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

}  // namespace hexiseq::simtest
