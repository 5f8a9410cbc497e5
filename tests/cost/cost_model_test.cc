// The analytical cost model against closed forms and hand computation.
#include "cost/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "spec/units.h"

namespace hexiseq {
namespace {

DeviceSpec Device(const std::string& name, double tflops, double gemm_eff, double attn_eff,
                  double memory_gib = 80) {
  DeviceSpec d;
  d.name = name;
  d.peak_flops = tflops * 1e12;
  d.memory_bytes = memory_gib * kGiB;
  d.hbm_bytes_per_second = 2e12;
  d.intra_node_bytes_per_second = 450e9;
  d.nic_bytes_per_second = 50e9;
  d.gemm_efficiency = gemm_eff;
  d.attention_efficiency = attn_eff;
  return d;
}

ModelSpec Tiny() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 8;
  m.ffn_hidden = 128;
  m.vocab = 256;
  m.gated_mlp = true;
  return m;
}

ModelSpec Llama8b() {  // llama3-8b shapes
  ModelSpec m;
  m.name = "llama3-8b";
  m.layers = 32;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.ffn_hidden = 14336;
  m.vocab = 128256;
  return m;
}

// Ring plan: one rank per group, uniform contiguous halves mirrored (zigzag), all heads.
Plan RingPlan(int n, int64_t seq, const ModelSpec& model) {
  Plan p;
  p.seq_len = seq;
  p.num_heads = model.heads;
  p.num_kv_heads = model.kv_heads;
  p.num_ranks = n;
  const int64_t chunk = seq / (2 * n);
  std::vector<int> heads;
  for (int h = 0; h < model.heads; ++h) heads.push_back(h);
  for (int r = 0; r < n; ++r) {
    Ranges t = {{r * chunk, (r + 1) * chunk}, {seq - (r + 1) * chunk, seq - r * chunk}};
    p.groups.push_back({{r}, t, {{r, "", 0, t, heads}}});
  }
  return p;
}

TEST(CostModel, IsOneFunctionOfTheProblemAndThePlan) {
  const ModelSpec model = Llama8b();
  const Cluster cluster =
      MakeCluster({Device("X", 1000, 0.8, 0.6), Device("Y", 300, 0.7, 0.5)}, {1, 1}, 4, 25e9);
  Workload w;
  w.seq_len = 65536;
  const Problem problem{cluster, model, w};
  Plan plan = RingPlan(8, w.seq_len, model);
  for (PlanGroup& group : plan.groups)
    for (PlanMember& member : group.members) member.node = cluster.ranks[member.rank].node;
  ASSERT_TRUE(Validate(plan, cluster, model)) << Validate(plan, cluster, model).error().message;
  const PlanCost direct = Evaluate(problem, plan);
  const PlanCost held = CostModel(cluster, model, w).Evaluate(plan);
  EXPECT_EQ(direct.iteration_seconds, held.iteration_seconds);
  EXPECT_GT(direct.iteration_seconds, 0);
  EXPECT_EQ(CostModel(problem).problem(), problem);
  EXPECT_EQ(CostModel(problem).InputHash(), InputHash(problem));
}

TEST(CostModel, HomogeneousRingMatchesTextbookFlops) {
  const ModelSpec model = Llama8b();
  const Cluster cluster = MakeCluster({Device("X", 1000, 0.8, 0.6)}, {1}, 8, 0);
  Workload w;
  w.seq_len = 131072;
  const CostModel cm(cluster, model, w);
  const Plan plan = RingPlan(8, w.seq_len, model);
  ASSERT_TRUE(Validate(plan, cluster, model)) << Validate(plan, cluster, model).error().message;
  const PlanCost cost = cm.Evaluate(plan);

  // Textbook: causal attention forward = 2 matmuls x 2 FLOP/MAC x d_model x S(S+1)/2 pairs;
  // backward 2.5x, full recompute +1x. Linear: 2 FLOP per parameter per token, x(1 + 2 + 1).
  const double s = w.seq_len, d = model.hidden;
  const double attn = 4.0 * d * s * (s + 1) / 2 * model.layers * (1 + 2.5 + 1);
  const double layer_params = d * d * 2 + 2 * d * 1024 + 3 * d * 14336;  // Q, O, K+V (GQA), MLP
  const double linear = 2 * layer_params * s * model.layers * 4 + 2 * s * model.vocab * d * 3;
  double attn_seen = 0, linear_seen = 0;
  for (const RankCost& rc : cost.ranks) {
    attn_seen += rc.attention_seconds * 1000e12 * 0.6;
    linear_seen += rc.linear_seconds * 1000e12 * 0.8;
  }
  EXPECT_NEAR(attn_seen / attn, 1.0, 1e-9);
  EXPECT_NEAR(linear_seen / linear, 1.0, 1e-9);
  EXPECT_NEAR(cm.TotalAttentionFlops() / attn, 1.0, 1e-9);
  EXPECT_NEAR(cm.TotalLinearFlops() / linear, 1.0, 1e-9);
  // Zigzag makes every rank's attention work equal, so the ring is close to the ideal.
  for (const RankCost& rc : cost.ranks)
    EXPECT_NEAR(rc.attention_seconds / cost.ranks[0].attention_seconds, 1.0, 1e-6);
  EXPECT_GT(cm.IdealIterationSeconds() / cost.iteration_seconds, 0.9);
  EXPECT_LE(cm.IdealIterationSeconds(), cost.iteration_seconds);
  EXPECT_TRUE(cost.feasible) << cost.infeasible_reason;
}

// A calibrated rate curve: a rank's rates are read at its own shard. Two ranks of one device,
// rank 0 with 3/4 of the sequence (past the curve's last point: its plain rates), rank 1 with
// 1/4 (half way in log(tokens) from S/8 to S/2: GEMM 0.75x, attention 0.625x).
TEST(CostModel, RateCurveReadsEachRankAtItsOwnShard) {
  const ModelSpec model = Tiny();
  Workload w;
  w.seq_len = 4096;
  const int64_t s = w.seq_len;
  Cluster plain = MakeCluster({Device("X", 1000, 0.8, 0.6)}, {1}, 2, 0);
  Cluster curved = plain;
  curved.kinds[0].device.rate_curve = {{s / 8.0, s / 2.0}, {0.5, 1.0}, {0.25, 1.0}};
  Plan plan = RingPlan(2, s, model);
  plan.groups[0].tokens = plan.groups[0].members[0].tokens = {{0, 3 * s / 8}, {5 * s / 8, s}};
  plan.groups[1].tokens = plan.groups[1].members[0].tokens = {{3 * s / 8, 5 * s / 8}};
  ASSERT_TRUE(Validate(plan, curved, model)) << Validate(plan, curved, model).error().message;
  const PlanCost without = CostModel(plain, model, w).Evaluate(plan);
  const CostModel curved_model(curved, model, w);
  const PlanCost with = curved_model.Evaluate(plan);
  EXPECT_DOUBLE_EQ(with.ranks[0].linear_seconds, without.ranks[0].linear_seconds);
  EXPECT_DOUBLE_EQ(with.ranks[0].attention_seconds, without.ranks[0].attention_seconds);
  EXPECT_NEAR(with.ranks[1].linear_seconds, without.ranks[1].linear_seconds / 0.75, 1e-12);
  EXPECT_NEAR(with.ranks[1].attention_seconds, without.ranks[1].attention_seconds / 0.625, 1e-12);
  EXPECT_DOUBLE_EQ(curved_model.LinearRate(1, s / 4), 0.75 * 800e12);
  EXPECT_DOUBLE_EQ(curved_model.AttentionRate(1, s / 4), 0.625 * 600e12);
  EXPECT_GT(with.iteration_seconds, without.iteration_seconds);
  // The ideal is a bound at each device's fastest point: a factor above 1 raises it.
  EXPECT_DOUBLE_EQ(curved_model.IdealIterationSeconds(),
                   CostModel(plain, model, w).IdealIterationSeconds());
  curved.kinds[0].device.rate_curve.gemm = {2.0, 2.0};
  curved.kinds[0].device.rate_curve.attention = {2.0, 2.0};
  EXPECT_NEAR(CostModel(curved, model, w).IdealIterationSeconds(),
              CostModel(plain, model, w).IdealIterationSeconds() / 2, 1e-12);
}

TEST(CostModel, AllToAllBytesTwoRanksUneven) {
  // H = 4, G = 2, d_h = 8, bf16. Rank 0: 3 tokens, heads {0,1,2} (KV 0,1); rank 1: 5 tokens,
  // head {3} (KV 1).
  const ModelSpec model = Tiny();
  const Cluster cluster = MakeCluster({Device("X", 100, 0.8, 0.6)}, {1}, 2, 0);
  Workload w;
  w.seq_len = 8;
  const CostModel cm(cluster, model, w);
  PlanGroup g{{0, 1}, {{0, 8}}, {{0, "", 0, {{0, 3}}, {0, 1, 2}}, {1, "", 0, {{3, 8}}, {3}}}};
  const auto in = cm.AllToAllBytes(g, true), out = cm.AllToAllBytes(g, false);
  EXPECT_EQ(in[0][1], 3 * (1 + 2 * 1) * 8 * 2);  // Q of head 3 + K,V of KV head 1, 3 tokens
  EXPECT_EQ(in[1][0], 5 * (3 + 2 * 2) * 8 * 2);  // Q of 3 heads + K,V of 2 KV heads, 5 tokens
  EXPECT_EQ(out[0][1], 5 * 3 * 8 * 2);           // O of rank 1's 5 tokens for heads 0..2
  EXPECT_EQ(out[1][0], 3 * 1 * 8 * 2);           // O of rank 0's 3 tokens for head 3
  EXPECT_EQ(in[0][0], 0);
}

// --dtype fp32: the all-to-all messages and the gradient bucket carry 4 bytes per
// element where bf16 carries 2.
TEST(CostModel, Fp32DoublesMessagesAndGradients) {
  const ModelSpec model = Tiny();
  const Cluster cluster = MakeCluster({Device("X", 100, 0.8, 0.6)}, {1}, 2, 0);
  Workload bf16, fp32;
  bf16.seq_len = fp32.seq_len = 8;
  fp32.bytes_per_element = 4;
  const CostModel half(cluster, model, bf16), full(cluster, model, fp32);
  PlanGroup g{{0, 1}, {{0, 8}}, {{0, "", 0, {{0, 3}}, {0, 1, 2}}, {1, "", 0, {{3, 8}}, {3}}}};
  EXPECT_EQ(full.AllToAllBytes(g, true)[1][0], 2 * half.AllToAllBytes(g, true)[1][0]);
  EXPECT_DOUBLE_EQ(full.GradBucketBytes(), 2 * half.GradBucketBytes());
}

TEST(CostModel, AllToAllBytesThreeRanksUneven) {
  // Rank 0: 2 tokens, heads {0} (KV 0); rank 1: 7 tokens, heads {1, 2} (KV 0, 1 - cut);
  // rank 2: 0 tokens, head {3} (KV 1).
  const ModelSpec model = Tiny();
  const Cluster cluster = MakeCluster({Device("X", 100, 0.8, 0.6)}, {1}, 3, 0);
  Workload w;
  w.seq_len = 9;
  const CostModel cm(cluster, model, w);
  PlanGroup g{{0, 1, 2},
              {{0, 9}},
              {{0, "", 0, {{0, 2}}, {0}}, {1, "", 0, {{2, 9}}, {1, 2}}, {2, "", 0, {}, {3}}}};
  const auto in = cm.AllToAllBytes(g, true);
  EXPECT_EQ(in[0][1], 2 * (2 + 2 * 2) * 16);
  EXPECT_EQ(in[0][2], 2 * (1 + 2 * 1) * 16);
  EXPECT_EQ(in[1][0], 7 * (1 + 2 * 1) * 16);
  EXPECT_EQ(in[1][2], 7 * (1 + 2 * 1) * 16);
  EXPECT_EQ(in[2][0], 0);
  EXPECT_EQ(in[2][1], 0);
  const auto out = cm.AllToAllBytes(g, false);
  EXPECT_EQ(out[2][0], 2 * 1 * 16);  // rank 2 returns O of head 3 for rank 0's 2 tokens
  EXPECT_EQ(out[2][1], 7 * 1 * 16);
  EXPECT_EQ(out[1][2], 0);  // rank 2 has no tokens
}

TEST(CostModel, MemoryHandComputedForSmallModel) {
  // Tiny model on 2 ranks, one group of two (Ulysses), S = 32, 16 tokens and 2 heads each.
  const ModelSpec model = Tiny();
  const Cluster cluster = MakeCluster({Device("X", 100, 0.8, 0.6, 1)}, {1}, 2, 0);
  Workload w;
  w.seq_len = 32;
  w.zero_stage = 3;
  w.recompute = Recompute::kFull;
  w.memory_reserve = 0.1;
  const CostModel cm(cluster, model, w);
  Plan p;
  p.seq_len = 32;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.num_ranks = 2;
  p.groups = {{{0, 1}, {{0, 32}}, {{0, "", 0, {{0, 16}}, {0, 1}}, {1, "", 0, {{16, 32}}, {2, 3}}}}};
  const PlanCost cost = cm.Evaluate(p);
  const RankCost& rc = cost.ranks[0];
  // Parameters: per layer 64*32 (Q) + 2*64*16 (K, V) + 32*64 (O) + 3*64*128 (MLP) = 30720,
  // + 2*64 norms; 2 layers; embedding + head 2*256*64; final norm 64.
  const double layer = 64 * 32 + 2 * 64 * 16 + 32 * 64 + 3 * 64 * 128;
  const double params = 2 * (layer + 128) + 2 * 256 * 64 + 64;
  EXPECT_DOUBLE_EQ(model.TotalParams(), params);
  // ZeRO-3 over 2 ranks: bf16 weights / 2 + two prefetched layers, bf16 grads / 2, 12 B Adam / 2.
  EXPECT_DOUBLE_EQ(rc.memory.weights, 2 * params / 2 + 2 * 2 * layer);
  EXPECT_DOUBLE_EQ(rc.memory.gradients, 2 * params / 2);
  EXPECT_DOUBLE_EQ(rc.memory.optimizer, 12 * params / 2);
  // Full recompute: layer inputs (16 tokens x 64 x 2 B x 2 layers) + one layer's activations
  // (16 x 2 B x (4*64 + 3*128)) + head layout Q, O (2 heads) and K, V (1 KV head) for the group's
  // 32 tokens x 8 dims x 2 B, plus LSE (32 x 2 heads x 4 B).
  const double act =
      16 * 64 * 2 * 2 + 16 * 2 * (4 * 64 + 3 * 128) + 32 * (8 * 2 * (4 + 2)) + 32 * 2 * 4;
  EXPECT_DOUBLE_EQ(rc.memory.activations, act);
  // Backward working set: dO (bf16) + dQ (fp32) for 2 heads, dK + dV (fp32) for 1 KV head.
  EXPECT_DOUBLE_EQ(rc.memory.attention_working, 32 * 8 * (2 * (2 + 4) + 1 * 2 * 4));
  EXPECT_DOUBLE_EQ(rc.memory.ring_buffers, 0);           // one group: no ring
  EXPECT_DOUBLE_EQ(rc.memory.logits, 16 * 256 * 4 * 2);  // logits + grad, fp32
  EXPECT_DOUBLE_EQ(rc.memory_capacity_bytes, 0.9 * kGiB);
  EXPECT_DOUBLE_EQ(rc.memory_bytes, rc.memory.total());
}

// Two replicas of one GPU each (3 and 1 sequences) and a third GPU left out, by hand: every
// replica is a single GPU (no communication inside it), so its time is its FLOPs over its rates;
// the gradient all-reduce (ZeRO-1: one reduce-scatter + one all-gather per iteration) is a ring
// over the two participating nodes, one step of half a bucket each pass.
TEST(CostModel, TwoReplicasAndALeftOutRankHandComputed) {
  const ModelSpec model = Tiny();
  const Cluster cluster =
      MakeCluster({Device("Fast", 200, 0.8, 0.5), Device("Slow", 100, 0.7, 0.4)}, {1, 2}, 1, 10e9);
  Workload w;
  w.seq_len = 64;
  w.batch = 4;
  w.zero_stage = 1;
  w.recompute = Recompute::kFull;
  const CostModel cm(cluster, model, w);
  Plan p;
  p.seq_len = 64;
  p.batch = 4;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.num_ranks = 3;
  p.zero_stage = 1;
  p.replica_sequences = {3, 1};
  for (int rank = 0; rank < 2; ++rank)
    p.groups.push_back({{rank}, {{0, 64}}, {{rank, "", -1, {{0, 64}}, {0, 1, 2, 3}}}, rank});
  p.left_out = {2};
  ASSERT_TRUE(Validate(p, cluster, model)) << Validate(p, cluster, model).error().message;
  const PlanCost cost = cm.Evaluate(p);

  const double layer_params = 64 * 32 + 2 * 64 * 16 + 32 * 64 + 3 * 64 * 128;
  const double s = 64, layers = 2;
  // Full recompute: linear x (1 + 2 + 1), attention x (1 + 2.5 + 1); LM head x (1 + 2).
  const double linear = layers * 4 * 2 * layer_params * s + 3 * 2 * s * 256 * 64;
  const double attention = layers * 4.5 * 4 * 8 * 4 * (s * (s + 1) / 2);
  const double fast = linear / (200e12 * 0.8) + attention / (200e12 * 0.5);
  const double slow = linear / (100e12 * 0.7) + attention / (100e12 * 0.4);
  const double busy = std::max(3 * fast, 1 * slow);
  // ZeRO-1: each replica produces its gradients in its last sequence's recompute and backward
  // (linear x (1 + 2), attention x (1 + 2.5), no LM head), at the end of its busy time. A bucket
  // is reduced once both replicas have produced it: the sync opens when the later of the two
  // last backwards starts and hides until the slower replica ends.
  const double backward_linear = layers * 3 * 2 * layer_params * s;
  const double backward_attention = layers * 3.5 * 4 * 8 * 4 * (s * (s + 1) / 2);
  const double fast_backward =
      backward_linear / (200e12 * 0.8) + backward_attention / (200e12 * 0.5);
  const double slow_backward =
      backward_linear / (100e12 * 0.7) + backward_attention / (100e12 * 0.4);
  const double window = busy - std::max(3 * fast - fast_backward, slow - slow_backward);
  EXPECT_NEAR(cost.sync_window_seconds / window, 1.0, 1e-9);
  const double bucket = model.TotalParams() * 2 / layers;
  const double pass = cluster.Latency(0, 1) + bucket / 2 / std::min(cluster.Bandwidth(0, 1), 10e9);
  // ZeRO-1's second pass is the all-gather of the updated weights, behind the next forward of one
  // sequence (linear x 1, attention x 1), which the fast replica finishes first: each pass's
  // exposure over its own window, or both passes over the backward's if that is less.
  const double fast_forward = layers * 2 * layer_params * s / (200e12 * 0.8) +
                              layers * 4 * 8 * 4 * (s * (s + 1) / 2) / (200e12 * 0.5);
  auto zero1_sync = [&](double backward_window) {
    const double split = std::max(pass, layers * pass - backward_window) +
                         std::max(pass, layers * pass - fast_forward);
    return std::min(split, std::max(2 * pass, layers * 2 * pass - backward_window));
  };
  const double sync = zero1_sync(window);
  ASSERT_LT(sync, std::max(2 * pass, layers * 2 * pass - window));  // the forward helps here
  // Then the optimizer step: ZeRO-1 gives each participant half of Adam's state to update, 28
  // bytes of traffic per parameter at 2 TB/s.
  const double optimizer = 28 * model.TotalParams() / 2 / 2e12;
  EXPECT_NEAR(cost.optimizer_seconds / optimizer, 1.0, 1e-12);
  EXPECT_NEAR(cost.iteration_seconds / (busy + sync + optimizer), 1.0, 1e-9);
  EXPECT_NEAR(cost.grad_sync_seconds / sync, 1.0, 1e-9);
  EXPECT_NEAR(cost.tokens_per_second / (4 * 64 / (busy + sync + optimizer)), 1.0, 1e-9);
  EXPECT_NEAR(cost.ranks[0].compute_seconds() / (3 * fast), 1.0, 1e-9);
  EXPECT_NEAR(cost.ranks[1].compute_seconds() / slow, 1.0, 1e-9);
  // ZeRO-1 shards Adam's state over the 2 participants; the left-out rank holds nothing.
  EXPECT_DOUBLE_EQ(cost.ranks[0].memory.optimizer, 12 * model.TotalParams() / 2);
  EXPECT_DOUBLE_EQ(cost.ranks[2].memory_bytes, 0);
  EXPECT_DOUBLE_EQ(cost.ranks[2].grad_sync_seconds, 0);
  EXPECT_DOUBLE_EQ(cost.ranks[2].compute_seconds(), 0);
  EXPECT_EQ(cost.ranks[2].rank, 2);
  EXPECT_TRUE(cost.feasible);
  // The left-out rank takes no part in the sync: the same plan with rank 2 in an idle group of
  // replica 1 syncs over all three nodes and shards over three.
  Plan idle = p;
  idle.left_out.clear();
  idle.groups.push_back({{2}, {}, {{2, "", -1, {}, {}}}, 1});
  const PlanCost with_idle = cm.Evaluate(idle);
  EXPECT_GT(with_idle.grad_sync_seconds, cost.grad_sync_seconds);
  EXPECT_DOUBLE_EQ(with_idle.ranks[0].memory.optimizer, 12 * model.TotalParams() / 3);
  // Split 2 : 1 the slow replica is the slowest, but the fast one starts its last backward later:
  // the sync waits for it, so the window is shorter than the slow replica's own backward.
  Plan two_one = p;
  two_one.replica_sequences = {2, 1};
  two_one.batch = 3;
  Workload three = w;
  three.batch = 3;
  const PlanCost later = CostModel(cluster, model, three).Evaluate(two_one);
  ASSERT_GT(slow, 2 * fast);
  const double opening = std::max(2 * fast - fast_backward, slow - slow_backward);
  ASSERT_GT(opening, slow - slow_backward);
  EXPECT_NEAR(later.sync_window_seconds / (slow - opening), 1.0, 1e-9);
  EXPECT_NEAR(later.grad_sync_seconds / zero1_sync(slow - opening), 1.0, 1e-9);
}

// The overlap rule per stage, on round figures (bucket 2 s of two passes, 20 s in all, one
// round): ZeRO 0 and 3 hide both passes behind the backward window; ZeRO 1-2 take the lesser of
// that and each pass behind its own window (the all-gather behind the forward), at least one pass
// each.
TEST(CostModel, StageExposedSyncSplitsZeroOneTwoAcrossTheForward) {
  const Cluster cluster = MakeCluster({Device("Fast", 200, 0.8, 0.5)}, {1}, 1, 10e9);
  for (int stage = 0; stage <= 3; ++stage) {
    Workload w;
    w.zero_stage = stage;
    const CostModel cm(cluster, Tiny(), w);
    const bool split = stage == 1 || stage == 2;
    SCOPED_TRACE("zero " + std::to_string(stage));
    // A short backward window, a long forward: 15 s exposed in the backward alone; split,
    // 10 - 5 = 5 s of reduce-scatter and the all-gather's last pass (1 s).
    EXPECT_DOUBLE_EQ(cm.StageExposedSyncSeconds(2, 20, 5, 12, 1), split ? 6 : 15);
    // A long backward window, a short forward: both passes fit behind the backward (5 s exposed),
    // split would expose 1 + (10 - 4) = 7 s: the lesser is charged.
    EXPECT_DOUBLE_EQ(cm.StageExposedSyncSeconds(2, 20, 15, 4, 1), 5);
    // Everything hidden: one bucket either way (two passes, or one pass of each).
    EXPECT_DOUBLE_EQ(cm.StageExposedSyncSeconds(2, 20, 30, 30, 1), 2);
  }
}

// ZeRO 3 syncs every sequence: each of the rounds exposes one bucket (its first all-gathers and
// its last reduce-scatter), unless the sync exceeds the window by more. Round figures: bucket 3 s
// of three passes, 4 rounds, 30 s in all.
TEST(CostModel, StageExposedSyncExposesOneBucketPerSequenceAtZeroThree) {
  const Cluster cluster = MakeCluster({Device("Fast", 200, 0.8, 0.5)}, {1}, 1, 10e9);
  Workload w;
  w.zero_stage = 3;
  const CostModel cm(cluster, Tiny(), w);
  EXPECT_DOUBLE_EQ(cm.StageExposedSyncSeconds(3, 30, 100, 40, 4), 12);  // 4 rounds x 3 s
  EXPECT_DOUBLE_EQ(cm.StageExposedSyncSeconds(3, 30, 10, 40, 4), 20);   // 30 - 10 > 12
  EXPECT_DOUBLE_EQ(cm.StageExposedSyncSeconds(3, 30, 100, 40, 1), 3);   // one sequence
  w.zero_stage = 2;  // below ZeRO 3 the rounds are 1 (one sync per iteration)
  EXPECT_DOUBLE_EQ(CostModel(cluster, Tiny(), w).StageExposedSyncSeconds(3, 30, 100, 100, 1), 3);
}

// The gradient sync hides behind the last sequence's backward at ZeRO 0-2 (earlier sequences
// only accumulate), so more sequences per replica do not hide more of it; under ZeRO-3 each
// sequence syncs during its own passes, behind the whole busy time. Two single-GPU nodes on a
// slow NIC, one group each (a ring), so that the sync exceeds the backward.
TEST(CostModel, GradientSyncHidesBehindTheLastBackwardOnly) {
  const ModelSpec model = Tiny();
  const Cluster cluster =
      MakeCluster({Device("Fast", 200, 0.8, 0.5), Device("Fast", 200, 0.8, 0.5)}, {1, 1}, 1, 1e6);
  auto evaluate = [&](int batch, int zero_stage, Recompute recompute) {
    Workload w;
    w.seq_len = 64;
    w.batch = batch;
    w.zero_stage = zero_stage;
    w.recompute = recompute;
    const CostModel cm(cluster, model, w);
    Plan p;
    p.seq_len = 64;
    p.batch = batch;
    p.num_heads = 4;
    p.num_kv_heads = 2;
    p.num_ranks = 2;
    p.zero_stage = zero_stage;
    for (int rank = 0; rank < 2; ++rank) {
      const Ranges shard = {{rank * 32, rank * 32 + 32}};
      p.groups.push_back({{rank}, shard, {{rank, "", -1, shard, {0, 1, 2, 3}}}, rank});
    }
    return std::pair{cm.Evaluate(p), cm.GradSyncBucketSeconds(p)};
  };
  for (Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
    const auto [one, bucket] = evaluate(1, 1, recompute);
    const auto [four, unused] = evaluate(4, 1, recompute);
    const double busy_one = one.iteration_seconds - one.grad_sync_seconds - one.optimizer_seconds;
    EXPECT_GT(one.grad_sync_seconds, bucket);      // the window hides only part of it
    EXPECT_LT(one.sync_window_seconds, busy_one);  // not the forward
    EXPECT_GT(one.sync_window_seconds, 0);
    // Four sequences: four times the compute, the same window, the same exposed sync.
    EXPECT_NEAR(four.sync_window_seconds, one.sync_window_seconds, 1e-12);
    EXPECT_NEAR(four.grad_sync_seconds, one.grad_sync_seconds, 1e-12);
    EXPECT_NEAR(four.iteration_seconds - four.grad_sync_seconds - four.optimizer_seconds,
                4 * busy_one, 1e-9);
    // ZeRO-3: the window is the whole busy time.
    const auto [zero3, unused3] = evaluate(4, 3, recompute);
    EXPECT_NEAR(zero3.sync_window_seconds,
                zero3.iteration_seconds - zero3.grad_sync_seconds - zero3.optimizer_seconds, 1e-12);
  }
}

// Replicas alike on other ranks (same kinds, same node pattern, same layout) are evaluated once
// and copied rank by rank; every rank's figures must equal those of its replica evaluated on its
// own. Replica 0 is one node; replicas 1 and 2 each span two nodes (alike); replica 3 is the
// slow node, laid out as replica 0.
TEST(CostModel, ReplicasAlikeOnOtherRanksMatchEachReplicaEvaluatedAlone) {
  const ModelSpec model = Tiny();
  const Cluster cluster = MakeCluster(
      {Device("Fast", 200, 0.8, 0.5, 1e-4), Device("Slow", 100, 0.7, 0.4, 1e-4)}, {3, 1}, 2, 10e9);
  Workload w;
  w.seq_len = 64;
  w.batch = 5;
  w.zero_stage = 1;
  Plan p;
  p.seq_len = 64;
  p.batch = 5;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.num_ranks = 8;
  p.zero_stage = 1;
  p.replica_sequences = {1, 1, 1, 2};  // 0 and 1 differ only in their node pattern
  const std::vector<std::pair<int, int>> pairs = {{0, 1}, {2, 4}, {3, 5}, {6, 7}};
  for (int replica = 0; replica < 4; ++replica) {
    const auto [a, b] = pairs[replica];
    p.groups.push_back({{a, b},
                        {{0, 64}},
                        {{a, "", -1, {{0, 40}}, {0, 1, 2}}, {b, "", -1, {{40, 64}}, {3}}},
                        replica});
  }
  ASSERT_TRUE(Validate(p, cluster, model)) << Validate(p, cluster, model).error().message;
  const CostModel cm(cluster, model, w);
  const PlanCost cost = cm.Evaluate(p);
  EXPECT_FALSE(cost.feasible);  // 0.1 MiB: every replica fails, the first is named
  EXPECT_EQ(cost.infeasible_reason.rfind("replica 0: ", 0), 0u) << cost.infeasible_reason;
  for (int replica = 0; replica < 4; ++replica) {
    Workload alone = w;
    alone.batch = p.replica_sequences[replica];
    alone.shard_ranks = 8;
    const PlanCost reference = CostModel(cluster, model, alone).Evaluate(ReplicaPlan(p, replica));
    EXPECT_DOUBLE_EQ(cost.replica_busy_seconds[replica], reference.replica_busy_seconds.front());
    for (int rank : {pairs[replica].first, pairs[replica].second}) {
      const RankCost& got = cost.ranks[rank];
      const RankCost& want = reference.ranks[rank];
      EXPECT_EQ(got.rank, rank);
      EXPECT_EQ(got.group, want.group);
      EXPECT_DOUBLE_EQ(got.linear_seconds, want.linear_seconds) << "rank " << rank;
      EXPECT_DOUBLE_EQ(got.attention_seconds, want.attention_seconds) << "rank " << rank;
      EXPECT_DOUBLE_EQ(got.all_to_all_seconds, want.all_to_all_seconds) << "rank " << rank;
      EXPECT_DOUBLE_EQ(got.ring_comm_seconds, want.ring_comm_seconds) << "rank " << rank;
      EXPECT_DOUBLE_EQ(got.memory_bytes, want.memory_bytes) << "rank " << rank;
      EXPECT_DOUBLE_EQ(got.grad_sync_seconds, cost.grad_sync_seconds);
    }
  }
  // Replicas 1 and 2 cross nodes, replica 0 does not: their all-to-alls differ.
  EXPECT_NE(cost.ranks[0].all_to_all_seconds, cost.ranks[2].all_to_all_seconds);
}

TEST(CostModel, InfeasibleNamesRankNeedsAndHas) {
  const ModelSpec model = Llama8b();
  const Cluster cluster = MakeCluster({Device("Small", 100, 0.8, 0.6, 8)}, {1}, 2, 0);
  Workload w;
  w.seq_len = 1 << 20;
  const CostModel cm(cluster, model, w);
  const PlanCost cost = cm.Evaluate(RingPlan(2, w.seq_len, model));
  EXPECT_FALSE(cost.feasible);
  EXPECT_NE(cost.infeasible_reason.find("rank 0 (Small) needs"), std::string::npos)
      << cost.infeasible_reason;
  EXPECT_NE(cost.infeasible_reason.find("has 7.2 GiB"), std::string::npos)
      << cost.infeasible_reason;
}

TEST(CostModel, IdealIsLowerBoundAndUsesSpecialisation) {
  // Two devices, one good at GEMMs, one at attention: the LP bound lets each do what it is best
  // at, so it is below the time of any same-mix split.
  const ModelSpec model = Llama8b();
  const Cluster cluster =
      MakeCluster({Device("G", 1000, 0.9, 0.3), Device("A", 1000, 0.3, 0.9)}, {1, 1}, 1, 0);
  Workload w;
  w.seq_len = 65536;
  const CostModel cm(cluster, model, w);
  const double lin = cm.TotalLinearFlops(), att = cm.TotalAttentionFlops();
  const double same_mix = (lin + att) / (2 * (lin + att) / (lin / 900e12 + att / 300e12));
  EXPECT_LT(cm.IdealIterationSeconds(), same_mix);
  EXPECT_GE(cm.IdealIterationSeconds(), (lin + att) / (2 * 900e12) * (1 - 1e-9));
}

TEST(CostModel, SlowerLinksNeverFaster) {
  const ModelSpec model = Llama8b();
  Workload w;
  w.seq_len = 262144;
  const Plan plan = RingPlan(16, w.seq_len, model);
  const Cluster fast = MakeCluster({Device("X", 1000, 0.8, 0.6)}, {2}, 8, 50e9);
  const Cluster slow = MakeCluster({Device("X", 1000, 0.8, 0.6)}, {2}, 8, 1e9);
  const double t_fast = CostModel(fast, model, w).Evaluate(plan).iteration_seconds;
  const double t_slow = CostModel(slow, model, w).Evaluate(plan).iteration_seconds;
  EXPECT_GT(t_slow, t_fast);
}

// Latency only (links so fast that bytes cost nothing): a 2-rank zigzag ring on two 1-GPU nodes.
// Each rank needs the other's block. Forward: one K/V message in and one out per rank; backward:
// the K/V block again, and its own block's dK/dV sum back from the other rank (the chain's last
// group). A message carries every KV head of its block, so each costs one latency however many
// KV heads the model has: ring comm per rank = layers x (fwd + recompute + bwd) latencies
// = layers x (1 + 1 + 2) x latency.
TEST(CostModel, RingPaysOneLatencyPerMessageNotPerKvHead) {
  constexpr double kFreeBytesPerSecond = 1e18;
  for (int kv_heads : {1, 8, 32}) {
    ModelSpec model = Llama8b();
    model.kv_heads = kv_heads;
    const Cluster cluster = MakeCluster({Device("X", 1000, 0.8, 0.6)}, {2}, 1, kFreeBytesPerSecond);
    Workload w;
    w.seq_len = 4096;
    const CostModel cm(cluster, model, w);
    Plan plan = RingPlan(2, w.seq_len, model);
    for (PlanGroup& group : plan.groups) group.members[0].node = cluster.ranks[group.ranks[0]].node;
    ASSERT_TRUE(Validate(plan, cluster, model)) << Validate(plan, cluster, model).error().message;
    const PlanCost cost = cm.Evaluate(plan);
    const double latencies = model.layers * (1 + 1 + 2);
    for (const RankCost& rc : cost.ranks)
      EXPECT_NEAR(rc.ring_comm_seconds / (latencies * cluster.Latency(0, 1)), 1.0, 1e-3)
          << "kv_heads " << kv_heads << " rank " << rc.rank;
  }
}

}  // namespace
}  // namespace hexiseq
