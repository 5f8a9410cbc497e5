// The event engine against closed forms: one message (latency + bytes / bandwidth), fair sharing
// of a port, NIC pools, compute priorities; and independence from the order ops are added.
#include "sim/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "sim_test_util.h"

namespace hexiseq::sim {
namespace {

Op Message(int from, int to, double bytes) {
  Op op;
  op.kind = OpKind::kMessage;
  op.rank = from;
  op.peer = to;
  op.bytes = bytes;
  return op;
}
Op Compute(int rank, int64_t ns, uint32_t priority) {
  Op op;
  op.kind = OpKind::kCompute;
  op.rank = rank;
  op.duration_ns = ns;
  op.priority = priority;
  return op;
}

TEST(Engine, OneMessageTakesLatencyPlusBytesOverBandwidth) {
  const Cluster cluster = simtest::SingleNode("H100-SXM", 2);
  Engine engine(cluster);
  const int id = engine.Add(Message(0, 1, 1e9));
  const EngineResult r = engine.Run();
  const double expect = cluster.Latency(0, 1) + 1e9 / cluster.Bandwidth(0, 1);
  EXPECT_NEAR(r.timings[id].end_ns * 1e-9, expect, 1e-8);
  EXPECT_EQ(r.ranks[0].comm_ns, r.makespan_ns);
  EXPECT_EQ(r.ranks[0].comm_exposed_ns, r.makespan_ns);
}

TEST(Engine, TwoFlowsFromOnePortShareIt) {
  const Cluster cluster = simtest::SingleNode("A100-SXM-80G", 3);
  Engine engine(cluster);
  const int a = engine.Add(Message(0, 1, 1e9));
  const int b = engine.Add(Message(0, 2, 1e9));
  const EngineResult r = engine.Run();
  const double expect = cluster.Latency(0, 1) + 2e9 / cluster.Bandwidth(0, 1);
  EXPECT_NEAR(r.timings[a].end_ns * 1e-9, expect, 1e-8);
  EXPECT_EQ(r.timings[a].end_ns, r.timings[b].end_ns);
}

TEST(Engine, MaxMinGivesLeftoverToTheUnconstrainedFlow) {
  // 0->2 and 1->2 share 2's ingress; 0->3 shares 0's egress with 0->2. Max-min: 0->2 and 1->2
  // get half of 2's ingress; 0->3 gets the other half of 0's egress.
  const Cluster cluster = simtest::SingleNode("A100-SXM-80G", 4);
  Engine engine(cluster);
  engine.Add(Message(0, 2, 1e9));
  engine.Add(Message(1, 2, 1e9));
  const int c = engine.Add(Message(0, 3, 1e9));
  const EngineResult r = engine.Run();
  EXPECT_NEAR(r.timings[c].end_ns * 1e-9, cluster.Latency(0, 3) + 2e9 / cluster.Bandwidth(0, 3),
              1e-6);
}

TEST(Engine, NodesSharingOneNicSlowDownConcurrentFlows) {
  const Cluster cluster =
      simtest::EightGpuNodes({"H100-SXM"}, {2}, 25e9);  // ranks 0-7 node 0, 8-15 node 1
  for (int nics : {0, 1}) {
    Engine engine(cluster, EngineOptions{nics});
    for (int rank = 0; rank < 4; ++rank) engine.Add(Message(rank, 8 + rank, 1e9));
    const EngineResult r = engine.Run();
    const double one = 1e9 / 25e9 + cluster.Latency(0, 8);
    const double shared = 4e9 / 25e9 + cluster.Latency(0, 8);
    EXPECT_NEAR(r.makespan_ns * 1e-9, nics == 0 ? one : shared, 1e-6) << nics;
  }
}

TEST(Engine, ReadyComputeRunsByPriority) {
  const Cluster cluster = simtest::SingleNode("H100-SXM", 1);
  Engine engine(cluster);
  const int late = engine.Add(Compute(0, 100, 5));
  const int early = engine.Add(Compute(0, 100, 1));
  const EngineResult r = engine.Run();
  EXPECT_EQ(r.timings[early].start_ns, 0);
  EXPECT_EQ(r.timings[late].start_ns, 100);
  EXPECT_EQ(r.ranks[0].busy_ns, 200);
}

// A random DAG of compute and messages on two 4-GPU nodes, built in two different op orders.
TEST(Engine, ResultDoesNotDependOnInsertionOrder) {
  const Cluster cluster =
      MakeCluster({simtest::Device("H100-SXM"), simtest::Device("L40S")}, {1, 1}, 4, 25e9);
  std::mt19937_64 rng(7);
  const int n = 400;
  std::vector<Op> ops;
  std::vector<std::pair<int, int>> edges;
  for (int i = 0; i < n; ++i) {
    const int rank = static_cast<int>(rng() % 8);
    if (rng() % 2) {
      ops.push_back(Compute(rank, 1000 + static_cast<int64_t>(rng() % 50000), i));
    } else {
      int peer = static_cast<int>(rng() % 8);
      if (peer == rank) peer = (peer + 1) % 8;
      ops.push_back(Message(rank, peer, 1e6 * (1 + rng() % 100)));
    }
    for (int d = 0; d < 2 && i > 0; ++d) {
      const int before = static_cast<int>(rng() % i);
      if (rng() % 3 == 0) edges.push_back({before, i});
    }
  }
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);  // perm[old] = new
  Engine a(cluster), b(cluster);
  std::vector<Op> permuted(n);
  for (int i = 0; i < n; ++i) permuted[perm[i]] = ops[i];
  for (const Op& op : ops) a.Add(op);
  for (const Op& op : permuted) b.Add(op);
  for (const auto& [x, y] : edges) a.Depend(x, y);
  std::shuffle(edges.begin(), edges.end(), rng);
  for (const auto& [x, y] : edges) b.Depend(perm[x], perm[y]);
  const EngineResult ra = a.Run(), rb = b.Run();
  EXPECT_EQ(ra.makespan_ns, rb.makespan_ns);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(ra.timings[i].start_ns, rb.timings[perm[i]].start_ns) << i;
    EXPECT_EQ(ra.timings[i].end_ns, rb.timings[perm[i]].end_ns) << i;
  }
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(ra.ranks[rank].busy_ns, rb.ranks[rank].busy_ns);
    EXPECT_EQ(ra.ranks[rank].comm_ns, rb.ranks[rank].comm_ns);
    EXPECT_EQ(ra.ranks[rank].comm_exposed_ns, rb.ranks[rank].comm_exposed_ns);
  }
}

}  // namespace
}  // namespace hexiseq::sim
