// Helpers for the report tests (see report_test_util.h).
#include "report/report_test_util.h"

#include <gtest/gtest.h>

#include "sched/baselines.h"

namespace hexiseq::reporttest {
namespace {

Cluster Parse(const std::string& yaml) {
  auto cluster = ParseCluster(yaml, "test.yaml", DeviceCatalog());
  EXPECT_TRUE(cluster.has_value()) << (cluster ? "" : cluster.error().message);
  return cluster ? *cluster : Cluster{};
}

}  // namespace

Cluster TwoByTwo(const std::string& name) {
  std::string quoted;
  for (const char c : name) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return Parse("name: \"" + quoted +
               "\"\nnodes:\n"
               "  - {gpu: H100-SXM, count: 1, gpus_per_node: 2}\n"
               "  - {gpu: A100-SXM-80G, count: 1, gpus_per_node: 2}\n"
               "inter_node: 25 GB/s\n");
}

Cluster EightGpuNodes(int nodes) {
  const std::string half = std::to_string(nodes / 2);
  return Parse("name: big\nnodes:\n  - {gpu: H100-SXM, count: " + half +
               ", gpus_per_node: 8}\n  - {gpu: A100-SXM-80G, count: " + half +
               ", gpus_per_node: 8}\ninter_node: 25 GB/s\n");
}

Cluster OneGpu() {
  return Parse("name: one\nnodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 1}\n");
}

ModelSpec Tiny() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 16;
  m.ffn_hidden = 128;
  m.vocab = 256;
  return m;
}

std::unique_ptr<CostModel> Model(const Cluster& cluster, const ModelSpec& model, int64_t seq_len) {
  Workload workload;
  workload.seq_len = seq_len;
  return std::make_unique<CostModel>(cluster, model, workload);
}

Plan TwoGroupPlan() {
  const Cluster cluster = TwoByTwo();
  const auto model = Model(cluster, Tiny(), 100);
  Plan plan = EmptyPlan(*model, "hand-made");
  plan.config = "two groups";
  AddGroup(plan, cluster, {0, 1}, {{0, 25}, {75, 100}}, {{{0, 25}}, {{75, 100}}}, {{0, 1}, {2, 3}});
  AddGroup(plan, cluster, {2, 3}, {{25, 75}}, {{{25, 50}}, {{50, 75}}}, {{0, 1, 2}, {3}});
  return plan;
}

Plan TwoReplicaPlan() {
  const Cluster cluster = TwoByTwo();
  const auto model = Model(cluster, Tiny(), 100);
  Plan plan = EmptyPlan(*model, "hand-made");
  plan.config = "two replicas";
  AddGroup(plan, cluster, {0, 1}, {{0, 100}}, {{{0, 50}}, {{50, 100}}}, {{0, 1}, {2, 3}});
  AddGroup(plan, cluster, {2}, {{0, 100}}, {{{0, 100}}}, {{0, 1, 2, 3}});
  plan.groups[1].replica = 1;
  plan.replica_sequences = {2, 1};
  plan.batch = 3;
  plan.left_out = {3};
  return plan;
}

int Count(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++count;
  return count;
}

std::set<std::string> Fills(const std::string& svg, const std::string& marker) {
  std::set<std::string> fills;
  for (size_t at = svg.find(marker); at != std::string::npos; at = svg.find(marker, at + 1)) {
    const size_t open = svg.rfind('<', at);
    const size_t fill = svg.find("fill=\"", open);
    if (fill == std::string::npos || fill > at) continue;
    fills.insert(svg.substr(fill + 6, svg.find('"', fill + 6) - fill - 6));
  }
  return fills;
}

}  // namespace hexiseq::reporttest
