// The simulator simulates the layer schedule's messages: for random plans (uneven groups, split KV
// groups with replicas, idle ranks), the (source, destination, bytes) multiset of one explicit
// layer's messages equals the schedule's all-to-all pieces and ring messages, forward (once more
// for the next layer's staggered start, and again under full recompute) and backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

#include "plan/layer_schedule.h"
#include "sim/engine.h"
#include "sim/graph.h"
#include "sim_test_util.h"

namespace hexiseq::sim {
namespace {

using MessageKey = std::tuple<int, int, int64_t>;  // source, destination, bytes

std::vector<MessageKey> SimulatedMessages(const Plan& plan, const CostModel& cost) {
  Engine engine(cost.cluster());
  BuildLayerGraph(plan, cost, GraphOptions{}, engine);
  std::vector<MessageKey> messages;
  for (const Op& op : engine.ops())
    if (op.kind == OpKind::kMessage)
      messages.push_back({op.rank, op.peer, static_cast<int64_t>(op.bytes)});
  std::sort(messages.begin(), messages.end());
  return messages;
}

// The schedule's element sizes for the cost model's model and workload.
ScheduleSizes SizesOf(const CostModel& cost) {
  ScheduleSizes sizes;
  sizes.head_dim = cost.model().head_dim;
  sizes.element_bytes = cost.workload().bytes_per_element;
  sizes.lse_bytes = kFp32Bytes;
  return sizes;
}

std::vector<MessageKey> ScheduledMessages(const Plan& plan, const CostModel& cost) {
  auto schedule = BuildLayerSchedule(plan, SizesOf(cost));
  EXPECT_TRUE(schedule.has_value());
  std::vector<MessageKey> messages;
  auto add_direction = [&](Direction direction) {
    for (bool inbound : {true, false})
      ForEachAllToAllPiece(*schedule, direction, inbound, [&](int from, int to, int64_t bytes) {
        messages.push_back({from, to, bytes});
      });
    ForEachRingMessage(*schedule, direction, [&](const RingMessage& message) {
      messages.push_back({message.source_rank, message.dest_rank, message.bytes});
    });
  };
  add_direction(Direction::kForward);
  // One explicit layer of a model with more layers also simulates the next layer's forward (its
  // staggered start, GraphOptions::explicit_layers).
  if (cost.model().layers > 1) add_direction(Direction::kForward);
  if (cost.workload().recompute == Recompute::kFull) add_direction(Direction::kForward);
  add_direction(Direction::kBackward);
  std::sort(messages.begin(), messages.end());
  return messages;
}

struct AgreementCase {
  const char* name;
  Cluster cluster;
  const char* model;
  Recompute recompute;
  simtest::GroupShape shape;
};

TEST(ScheduleAgreement, SimulatedMessagesAreTheSchedulesMessages) {
  const std::vector<AgreementCase> cases = {
      {"2x8 H100/A100 gpt-7b (MHA: multi-primary rings)",
       simtest::EightGpuNodes({"H100-SXM", "A100-SXM-80G"}, {1, 1}, 25e9), "gpt-7b",
       Recompute::kNone, simtest::GroupShape::kAny},
      {"2x8 H100/L40S llama3-8b (GQA: replicas)",
       simtest::EightGpuNodes({"H100-SXM", "L40S"}, {1, 1}, 25e9), "llama3-8b", Recompute::kFull,
       simtest::GroupShape::kWithinNode},
      {"6x1 mixed gpt-3b", simtest::OneGpuPerNode({"H100-SXM", "A100-SXM-80G", "L40S"}, 12.5e9),
       "gpt-3b", Recompute::kSelective, simtest::GroupShape::kAny},
  };
  std::mt19937_64 rng(11);
  for (const AgreementCase& c : cases) {
    Workload workload;
    workload.seq_len = 65537;  // prime-ish odd length: uneven shards
    workload.recompute = c.recompute;
    const CostModel cost(c.cluster, *LoadModel(c.model), workload);
    for (int trial = 0; trial < 6; ++trial) {
      const Plan plan = simtest::RandomPlan(cost, rng, c.shape, 0.4, trial % 2 == 0);
      const std::vector<MessageKey> simulated = SimulatedMessages(plan, cost);
      const std::vector<MessageKey> scheduled = ScheduledMessages(plan, cost);
      ASSERT_FALSE(scheduled.empty()) << c.name;
      ASSERT_EQ(simulated.size(), scheduled.size()) << c.name << " trial " << trial;
      const auto mismatch = std::mismatch(simulated.begin(), simulated.end(), scheduled.begin());
      EXPECT_TRUE(mismatch.first == simulated.end())
          << c.name << " trial " << trial << ": first difference at message "
          << (mismatch.first - simulated.begin()) << " (" << std::get<0>(*mismatch.first) << " -> "
          << std::get<1>(*mismatch.first) << ", " << std::get<2>(*mismatch.first) << " B vs "
          << std::get<0>(*mismatch.second) << " -> " << std::get<1>(*mismatch.second) << ", "
          << std::get<2>(*mismatch.second) << " B)";
    }
  }
}

}  // namespace
}  // namespace hexiseq::sim

namespace hexiseq::sim {
namespace {

// The cost model's closed-form all-to-all bytes (CostModel::AllToAllBytes, the expressions its
// local phase charges) equal the schedule's split tables: inbound exactly (Q, K, V), outbound up to
// the schedule's fp32 log-sum-exp per row and query head, which the model leaves out.
TEST(ScheduleAgreement, CostModelAllToAllBytesAreTheSchedules) {
  const Cluster cluster = simtest::EightGpuNodes({"H100-SXM", "L40S"}, {1, 1}, 25e9);
  Workload workload;
  workload.seq_len = 40961;
  const CostModel cost(cluster, *LoadModel("llama3-8b"), workload);
  const ScheduleSizes sizes = SizesOf(cost);
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 8; ++trial) {
    const Plan plan = simtest::RandomPlan(cost, rng, simtest::GroupShape::kAny, 0.4);
    auto schedule = BuildLayerSchedule(plan, sizes);
    ASSERT_TRUE(schedule.has_value());
    for (const GroupSchedule& group : schedule->groups) {
      const PlanGroup& plan_group = plan.groups[group.plan_index];
      const auto inbound = cost.AllToAllBytes(plan_group, /*inbound=*/true);
      const auto outbound = cost.AllToAllBytes(plan_group, /*inbound=*/false);
      for (int sender = 0; sender < group.qkv_in.members; ++sender)
        for (int receiver = 0; receiver < group.qkv_in.members; ++receiver) {
          if (sender == receiver) continue;
          EXPECT_EQ(static_cast<int64_t>(inbound[sender][receiver]),
                    group.qkv_in.Bytes(sender, receiver))
              << "trial " << trial << " group " << group.plan_index << " " << sender << "->"
              << receiver;
          const int64_t lse =
              group.member_tokens[receiver] * group.member_query_heads[sender] * kFp32Bytes;
          EXPECT_EQ(static_cast<int64_t>(outbound[sender][receiver]) + lse,
                    group.output_out.Bytes(sender, receiver))
              << "trial " << trial << " group " << group.plan_index << " " << sender << "->"
              << receiver;
        }
    }
  }
}

}  // namespace
}  // namespace hexiseq::sim

#include <map>

#include "sched/baselines.h"

namespace hexiseq::sim {
namespace {

// The cost model's closed-form sub-ring bytes per rank (CostModel::RingBytesPerRank, from
// GroupChainTraffic, what its ring term charges) equal the schedule's per-rank K/V and dK/dV
// bytes, forward and backward: random uneven plans (contiguous groups, replicas, MHA rings with
// several primaries per group) and the zigzag baselines (ring, usp, hetero-ring).
void ExpectRingBytesMatch(const Plan& plan, const CostModel& cost, const std::string& where) {
  auto schedule = BuildLayerSchedule(plan, SizesOf(cost));
  ASSERT_TRUE(schedule.has_value()) << where;
  for (Direction direction : {Direction::kForward, Direction::kBackward}) {
    const bool backward = direction == Direction::kBackward;
    const PhaseBytes scheduled = BytesPerRank(*schedule, direction);
    const std::vector<CostModel::RingRankBytes> modelled = cost.RingBytesPerRank(plan, backward);
    for (int rank = 0; rank < plan.num_ranks; ++rank) {
      const std::string at =
          where + (backward ? " backward" : " forward") + " rank " + std::to_string(rank);
      EXPECT_EQ(static_cast<int64_t>(modelled[rank].kv_sent), scheduled.kv_ring[rank].sent) << at;
      EXPECT_EQ(static_cast<int64_t>(modelled[rank].kv_received), scheduled.kv_ring[rank].received)
          << at;
      EXPECT_EQ(static_cast<int64_t>(modelled[rank].dkv_sent), scheduled.dkv_return[rank].sent)
          << at;
      EXPECT_EQ(static_cast<int64_t>(modelled[rank].dkv_received),
                scheduled.dkv_return[rank].received)
          << at;
    }
  }
}

// Per (sending group, receiving group): the schedule's K/V block bytes and dK/dV sum bytes equal
// the model's per-peer traffic (GroupChainTraffic), so each block is charged to the link it
// crosses.
void ExpectChainLinksMatch(const Plan& plan, const CostModel& cost, const std::string& where) {
  const ScheduleSizes sizes = SizesOf(cost);
  auto schedule = BuildLayerSchedule(plan, sizes);
  ASSERT_TRUE(schedule.has_value()) << where;
  using Link = std::pair<int, int>;  // plan group indices
  std::map<Link, int64_t> scheduled_kv, scheduled_sums, modelled_kv, modelled_sums;
  auto group_of = [&](int rank) {
    return schedule->groups[schedule->places[rank].group].plan_index;
  };
  ForEachRingMessage(*schedule, Direction::kBackward, [&](const RingMessage& message) {
    const Link link{group_of(message.source_rank), group_of(message.dest_rank)};
    if (message.kind == RingMessageKind::kKvBlock) scheduled_kv[link] += message.bytes;
    if (message.kind == RingMessageKind::kDkvReturn) scheduled_sums[link] += message.bytes;
  });
  const double block_bytes_per_token =
      2.0 * sizes.head_dim * sizes.element_bytes * cost.model().kv_heads;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const CostModel::ChainTraffic traffic = cost.GroupChainTraffic(plan, static_cast<int>(g));
    for (const CostModel::PeerTraffic& peer : traffic.kv_to)
      modelled_kv[{static_cast<int>(g), peer.group}] +=
          static_cast<int64_t>(peer.tokens * block_bytes_per_token);
    for (const CostModel::PeerTraffic& peer : traffic.sums_to)
      modelled_sums[{static_cast<int>(g), peer.group}] +=
          static_cast<int64_t>(peer.tokens * block_bytes_per_token);
    int64_t from_kv = 0;
    for (const CostModel::PeerTraffic& peer : traffic.kv_from) {
      from_kv += peer.tokens;
      EXPECT_GT(peer.blocks, 0) << where;
    }
    EXPECT_EQ(from_kv, traffic.kv_in()) << where;
  }
  EXPECT_EQ(modelled_kv, scheduled_kv) << where;
  EXPECT_EQ(modelled_sums, scheduled_sums) << where;
  // Received side: what a group gets from each peer is what that peer sends it.
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const CostModel::ChainTraffic traffic = cost.GroupChainTraffic(plan, static_cast<int>(g));
    for (const CostModel::PeerTraffic& peer : traffic.kv_from) {
      const Link link{peer.group, static_cast<int>(g)};
      EXPECT_EQ(static_cast<int64_t>(peer.tokens * block_bytes_per_token), scheduled_kv[link])
          << where << " group " << g << " from " << peer.group;
    }
  }
}

TEST(ScheduleAgreement, CostModelRingBytesPerRankAreTheSchedules) {
  const std::vector<std::pair<Cluster, const char*>> cases = {
      {simtest::EightGpuNodes({"H100-SXM", "A100-SXM-80G"}, {1, 1}, 25e9), "gpt-7b"},
      {simtest::EightGpuNodes({"H100-SXM", "L40S"}, {1, 1}, 25e9), "llama3-8b"},
      {simtest::OneGpuPerNode({"H100-SXM", "A100-SXM-80G", "L40S"}, 12.5e9), "gpt-3b"},
  };
  std::mt19937_64 rng(23);
  int with_returns = 0;
  for (const auto& [cluster, model] : cases) {
    Workload workload;
    workload.seq_len = 32771;
    const CostModel cost(cluster, *LoadModel(model), workload);
    for (int trial = 0; trial < 10; ++trial) {
      const Plan plan = simtest::RandomPlan(cost, rng, simtest::GroupShape::kAny, 0.4, trial % 2);
      ExpectRingBytesMatch(plan, cost, std::string(model) + " trial " + std::to_string(trial));
      ExpectChainLinksMatch(plan, cost, std::string(model) + " trial " + std::to_string(trial));
      for (const CostModel::RingRankBytes& bytes : cost.RingBytesPerRank(plan, true))
        with_returns += bytes.dkv_received > 0 ? 1 : 0;
    }
    for (const StrategyResult& baseline :
         {RingBaseline(cost.problem()), UspBaseline(cost.problem()),
          HeteroRingBaseline(cost.problem())})
      if (baseline.applicable && !baseline.plan.groups.empty()) {
        ExpectRingBytesMatch(baseline.plan, cost, std::string(model) + " " + baseline.strategy);
        ExpectChainLinksMatch(baseline.plan, cost, std::string(model) + " " + baseline.strategy);
      }
    if (HasFailure()) return;
  }
  EXPECT_GT(with_returns, 30);  // the sample exercises chains, not only single-group plans
}

}  // namespace
}  // namespace hexiseq::sim
