// The layer schedule against independent references and against what the runtime really sends.
// - Brute force: per-token causal pair counts, chains (ring order, causally useless groups
//   skipped), segments (per KV head, the members that need it) on random plans.
// - Recording Comm: the runtime runs a plan over a Comm that records every point-to-point message
//   and all-to-all piece; the (source, destination, bytes) multiset of each direction equals the
//   schedule's, on random plans with zero-token ranks, idle groups, KV-cutting head sets and
//   groups of different sizes, and on the baseline shapes.
// Lives with the runtime tests because it runs the runtime and shares its plan generators.
#include "plan/layer_schedule.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <set>
#include <tuple>

#include "runtime/attention_kernels.h"
#include "runtime/dist_attention.h"
#include "runtime/plan_gen_util.h"
#include "runtime/recording_comm.h"

namespace hexiseq::runtime {
namespace {

using hexiseq::testing::RandomPlan;
using hexiseq::testing::RandomPlanOptions;
using hexiseq::testing::RingPlan;
using hexiseq::testing::UlyssesPlan;
using hexiseq::testing::UspPlan;

constexpr int kHeadDim = 4;

ScheduleSizes Fp32Sizes(int head_dim) {
  ScheduleSizes sizes;
  sizes.head_dim = head_dim;
  sizes.element_bytes = kFp32Bytes;
  sizes.lse_bytes = kFp32Bytes;
  return sizes;
}

std::vector<int64_t> Positions(const Ranges& ranges) {
  std::vector<int64_t> positions;
  for (const Range& range : ranges) {
    for (int64_t position = range.begin; position < range.end; ++position) {
      positions.push_back(position);
    }
  }
  return positions;
}

// Pairs (query, key) with key <= query, one by one.
int64_t BruteForcePairs(const Ranges& queries, const Ranges& keys) {
  int64_t pairs = 0;
  for (int64_t query : Positions(queries)) {
    for (int64_t key : Positions(keys)) pairs += key <= query ? 1 : 0;
  }
  return pairs;
}

RandomPlanOptions RandomOptions(std::mt19937_64& rng) {
  RandomPlanOptions options;
  options.num_ranks = std::uniform_int_distribution<int>(1, 8)(rng);
  const std::vector<int64_t> lengths = {2, 3, 13, 31, 67, 97, 131};
  options.seq_len = lengths[std::uniform_int_distribution<size_t>(0, lengths.size() - 1)(rng)];
  const std::vector<std::pair<int, int>> heads = {{4, 2}, {8, 2}, {6, 3}, {4, 4}, {8, 1}};
  const auto [num_heads, num_kv_heads] =
      heads[std::uniform_int_distribution<size_t>(0, heads.size() - 1)(rng)];
  options.num_heads = num_heads;
  options.num_kv_heads = num_kv_heads;
  return options;
}

TEST(LayerSchedule, ChainsPairCountsAndSegmentsMatchBruteForce) {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 200; ++trial) {
    const Plan plan = RandomPlan(rng, RandomOptions(rng));
    SCOPED_TRACE(PlanToJson(plan, -1));
    auto schedule = BuildLayerSchedule(plan, Fp32Sizes(kHeadDim));
    ASSERT_TRUE(schedule) << schedule.error().message;
    const int ring_groups = schedule->num_ring_groups();
    for (int origin = 0; origin < ring_groups; ++origin) {
      const Ranges& keys = plan.groups[schedule->ring[origin]].tokens;
      const BlockChain& chain = schedule->chains[origin];
      EXPECT_EQ(chain.own_pairs, BruteForcePairs(keys, keys));
      std::vector<ChainHop> expected;
      for (int distance = 1; distance < ring_groups; ++distance) {
        const int ring_pos = (origin + distance) % ring_groups;
        const int64_t pairs = BruteForcePairs(plan.groups[schedule->ring[ring_pos]].tokens, keys);
        if (pairs > 0) expected.push_back(ChainHop{ring_pos, pairs});
      }
      EXPECT_EQ(chain.hops, expected) << "origin " << origin;
      for (int ring_pos = 0; ring_pos < ring_groups; ++ring_pos) {
        int expected_index = -1;
        for (size_t hop = 0; hop < expected.size(); ++hop) {
          if (expected[hop].ring_pos == ring_pos) expected_index = static_cast<int>(hop);
        }
        EXPECT_EQ(schedule->HopIndex(origin, ring_pos), expected_index);
      }
    }
    // Every KV head is in exactly one segment, whose holders in each ring group are exactly the
    // members with a query head on it.
    std::multiset<int> covered;
    for (const KvSegment& segment : schedule->segments) {
      covered.insert(segment.kv_heads.begin(), segment.kv_heads.end());
      for (int kv : segment.kv_heads) {
        for (int ring_pos = 0; ring_pos < ring_groups; ++ring_pos) {
          std::vector<int> needing;
          for (const PlanMember& member : plan.groups[schedule->ring[ring_pos]].members) {
            for (int head : member.heads) {
              if (KvHeadOf(head, plan.num_heads, plan.num_kv_heads) == kv) {
                needing.push_back(member.rank);
                break;
              }
            }
          }
          EXPECT_EQ(segment.holders[ring_pos], needing) << "kv " << kv << " ring " << ring_pos;
        }
      }
    }
    if (ring_groups > 0) {
      EXPECT_EQ(static_cast<int>(covered.size()), plan.num_kv_heads);
    }
    EXPECT_EQ(std::set<int>(covered.begin(), covered.end()).size(), covered.size());
  }
}

TEST(LayerSchedule, ContiguousRingSendsEachBlockOnlyForward) {
  // Contiguous ring of 4: block 0 visits 1, 2, 3; block 1 visits 2, 3; block 2 visits 3.
  const Plan plan = RingPlan(4, 400, 4, 2, false);
  auto schedule = BuildLayerSchedule(plan, Fp32Sizes(8));
  ASSERT_TRUE(schedule);
  const int64_t block = 2 * 2 * 100 * 8 * kFp32Bytes;
  const PhaseBytes forward = BytesPerRank(*schedule, Direction::kForward);
  const PhaseBytes backward = BytesPerRank(*schedule, Direction::kBackward);
  std::vector<int64_t> sent, received, returned;
  for (int rank = 0; rank < 4; ++rank) {
    sent.push_back(forward.kv_ring[rank].sent);
    received.push_back(forward.kv_ring[rank].received);
    returned.push_back(backward.dkv_return[rank].received);
    EXPECT_EQ(forward.dkv_return[rank], RankBytes{});
    EXPECT_EQ(backward.kv_ring[rank], forward.kv_ring[rank]);
  }
  EXPECT_EQ(sent, (std::vector<int64_t>{block, 2 * block, 3 * block, 0}));
  EXPECT_EQ(received, (std::vector<int64_t>{0, block, 2 * block, 3 * block}));
  // Along the chain (the policy): block 0's sum goes 1 -> 2 -> 3 -> 0, block 1's 2 -> 3 -> 1,
  // block 2's 3 -> 2.
  EXPECT_EQ(returned, (std::vector<int64_t>{block, block, 2 * block, 2 * block}));
  std::vector<int64_t> returns_sent;
  for (int rank = 0; rank < 4; ++rank) returns_sent.push_back(backward.dkv_return[rank].sent);
  EXPECT_EQ(returns_sent, (std::vector<int64_t>{0, block, 2 * block, 3 * block}));
  // Direct return: the owner of block j gets one dK/dV message from each group that used it.
  auto direct = BuildLayerSchedule(plan, Fp32Sizes(8), DkvRoute::kDirectToOwner);
  ASSERT_TRUE(direct);
  const PhaseBytes direct_backward = BytesPerRank(*direct, Direction::kBackward);
  std::vector<int64_t> direct_returned;
  for (int rank = 0; rank < 4; ++rank) {
    direct_returned.push_back(direct_backward.dkv_return[rank].received);
  }
  EXPECT_EQ(direct_returned, (std::vector<int64_t>{3 * block, 2 * block, block, 0}));
  // One group per rank: no all-to-all traffic.
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(forward.inbound_alltoall[rank], RankBytes{});
}

TEST(LayerSchedule, SplitTablesOfUlyssesCountRowsAndHeads) {
  // 2 ranks, 4 heads, 2 KV heads, 10 tokens: rank 0 holds tokens 0-4 and heads 0-1 (KV 0).
  const Plan plan = UlyssesPlan(2, 10, 4, 2);
  const int head_dim = 3;
  ScheduleSizes sizes = Fp32Sizes(head_dim);
  sizes.element_bytes = kBf16Bytes;
  auto schedule = BuildLayerSchedule(plan, sizes);
  ASSERT_TRUE(schedule);
  const GroupSchedule& group = schedule->groups[0];
  const int64_t rows = 5;
  EXPECT_EQ(group.qkv_in.Bytes(0, 1), rows * (2 + 2 * 1) * head_dim * kBf16Bytes);
  EXPECT_EQ(group.output_out.Bytes(1, 0), rows * 2 * (head_dim * kBf16Bytes + kFp32Bytes));
  EXPECT_EQ(group.grad_output_in.Bytes(0, 1), rows * 2 * head_dim * kBf16Bytes);
  EXPECT_EQ(group.grads_out.Bytes(1, 0), rows * (2 + 2 * 1) * head_dim * kBf16Bytes);
  EXPECT_EQ(group.qkv_in.SentBy(0), group.qkv_in.Bytes(0, 1));
  EXPECT_EQ(group.qkv_in.ReceivedBy(0), group.qkv_in.Bytes(1, 0));
  EXPECT_TRUE(schedule->chains.size() == 1 && schedule->chains[0].hops.empty());
}

TEST(LayerSchedule, BadSizesAndBadPlansAreErrors) {
  const Plan plan = UlyssesPlan(2, 10, 4, 2);
  auto schedule = BuildLayerSchedule(plan, Fp32Sizes(0));
  ASSERT_FALSE(schedule);
  EXPECT_EQ(schedule.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(schedule.error().message.find("head_dim = 0"), std::string::npos);
  Plan broken = plan;
  broken.groups[0].members[1].tokens = {{5, 9}};
  schedule = BuildLayerSchedule(broken, Fp32Sizes(4));
  ASSERT_FALSE(schedule);
  EXPECT_NE(schedule.error().message.find("do not partition"), std::string::npos)
      << schedule.error().message;
}

// A left-out rank (a data-parallel replica's plan leaves every other rank out) is in no group and
// takes no part in any message: the schedule is the one of the same plan without that rank.
TEST(LayerSchedule, LeftOutRanksSendAndReceiveNothing) {
  const Plan plan = RingPlan(3, 31, 4, 2, /*zigzag=*/true);
  Plan with_left_out = plan;
  with_left_out.num_ranks = 4;
  with_left_out.left_out = {3};
  auto expected = BuildLayerSchedule(plan, Fp32Sizes(kHeadDim));
  auto schedule = BuildLayerSchedule(with_left_out, Fp32Sizes(kHeadDim));
  ASSERT_TRUE(expected) << expected.error().message;
  ASSERT_TRUE(schedule) << schedule.error().message;
  for (Direction direction : {Direction::kForward, Direction::kBackward}) {
    std::multiset<std::tuple<int, int, int64_t>> want, got;
    ForEachRingMessage(*expected, direction, [&](const RingMessage& message) {
      want.insert({message.source_rank, message.dest_rank, message.bytes});
    });
    ForEachRingMessage(*schedule, direction, [&](const RingMessage& message) {
      got.insert({message.source_rank, message.dest_rank, message.bytes});
    });
    for (bool inbound : {true, false}) {
      ForEachAllToAllPiece(*expected, direction, inbound, [&](int from, int to, int64_t bytes) {
        want.insert({from, to, bytes});
      });
      ForEachAllToAllPiece(*schedule, direction, inbound, [&](int from, int to, int64_t bytes) {
        got.insert({from, to, bytes});
      });
    }
    EXPECT_FALSE(want.empty());
    EXPECT_EQ(got, want);
  }
  Plan missing = with_left_out;
  missing.left_out.clear();
  schedule = BuildLayerSchedule(missing, Fp32Sizes(kHeadDim));
  ASSERT_FALSE(schedule);
  EXPECT_NE(schedule.error().message.find("rank 3 is in no group and not left out"),
            std::string::npos)
      << schedule.error().message;
  Plan both = with_left_out;
  both.left_out = {2, 3};
  schedule = BuildLayerSchedule(both, Fp32Sizes(kHeadDim));
  ASSERT_FALSE(schedule);
  EXPECT_NE(schedule.error().message.find("rank 2 is left out and in a group"), std::string::npos)
      << schedule.error().message;
}

TEST(LayerSchedule, ThousandGroupZigzagRingVisitsEveryOtherGroup) {
  // One group per rank at 1024 ranks, zigzag shards: every group needs every other group.
  const int ranks = 1024;
  const Plan plan = RingPlan(ranks, int64_t{1} << 20, 64, 8, true);
  auto schedule = BuildLayerSchedule(plan, Fp32Sizes(128));
  ASSERT_TRUE(schedule) << schedule.error().message;
  int64_t hops = 0;
  for (const BlockChain& chain : schedule->chains) hops += static_cast<int64_t>(chain.hops.size());
  EXPECT_EQ(hops, int64_t{ranks} * (ranks - 1));  // zigzag: every group needs every other
  EXPECT_EQ(schedule->segments.size(), 1u);
}

// ---- Recording Comm -----------------------------------------------------------------------

using Messages = std::vector<RecordedMessage>;

Messages ScheduleMessages(const LayerSchedule& schedule, Direction direction) {
  Messages messages;
  for (bool inbound : {true, false}) {
    ForEachAllToAllPiece(schedule, direction, inbound, [&](int source, int dest, int64_t bytes) {
      messages.push_back({RecordedMessage::Kind::kAllToAll, source, dest, bytes});
    });
  }
  ForEachRingMessage(schedule, direction, [&](const RingMessage& message) {
    messages.push_back({RecordedMessage::Kind::kPointToPoint, message.source_rank,
                        message.dest_rank, message.bytes});
  });
  std::sort(messages.begin(), messages.end());
  return messages;
}

// Runs forward and backward of `plan` over recording communicators; returns what each direction
// sent.
std::pair<Messages, Messages> RecordRun(const Plan& plan, int head_dim) {
  auto log = std::make_shared<MessageLog>();
  Messages forward, backward;
  std::mutex mutex;
  RunInProcess(plan.num_ranks, [&](Comm& world) {
    RecordingComm recording(world, log);
    auto attention = DistributedAttention::Create(plan, recording, head_dim);
    ASSERT_TRUE(attention) << attention.error().message;
    const int64_t rows = (*attention)->num_tokens();
    std::vector<float> q(rows * plan.num_heads * head_dim, 0.5f);
    std::vector<float> kv(rows * plan.num_kv_heads * head_dim, 0.25f);
    world.Barrier();
    if (world.rank() == 0) log->TakeSorted();  // drop the set-up traffic
    world.Barrier();
    ASSERT_TRUE((*attention)->Forward(q, kv, kv));
    world.Barrier();
    if (world.rank() == 0) forward = log->TakeSorted();
    world.Barrier();
    ASSERT_TRUE((*attention)->Backward(q));
    world.Barrier();
    std::lock_guard lock(mutex);
    if (world.rank() == 0) backward = log->TakeSorted();
  });
  return {forward, backward};
}

void ExpectRuntimeSendsTheSchedule(const Plan& plan, int head_dim) {
  SCOPED_TRACE(PlanToJson(plan, -1));
  auto schedule = BuildLayerSchedule(plan, Fp32Sizes(head_dim));
  ASSERT_TRUE(schedule) << schedule.error().message;
  const auto [forward, backward] = RecordRun(plan, head_dim);
  EXPECT_EQ(forward, ScheduleMessages(*schedule, Direction::kForward));
  EXPECT_EQ(backward, ScheduleMessages(*schedule, Direction::kBackward));
}

class OneBlasThread : public ::testing::Environment {
 public:
  void SetUp() override { SetBlasThreads(1); }
};
const ::testing::Environment* const kOneBlasThread =
    ::testing::AddGlobalTestEnvironment(new OneBlasThread);

TEST(RecordingComm, RuntimeSendsExactlyTheScheduleOnRandomPlans) {
  std::mt19937_64 rng(77);
  int with_ring_traffic = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const Plan plan = RandomPlan(rng, RandomOptions(rng));
    ExpectRuntimeSendsTheSchedule(plan, kHeadDim);
    auto schedule = BuildLayerSchedule(plan, Fp32Sizes(kHeadDim));
    bool has_ring = false;
    ForEachRingMessage(*schedule, Direction::kBackward,
                       [&](const RingMessage&) { has_ring = true; });
    with_ring_traffic += has_ring ? 1 : 0;
    if (HasFailure()) return;
  }
  EXPECT_GT(with_ring_traffic, 20);  // the sample exercises the sub-rings, not only all-to-alls
}

TEST(RecordingComm, RuntimeSendsExactlyTheScheduleOnBaselineShapes) {
  ExpectRuntimeSendsTheSchedule(RingPlan(4, 97, 4, 2, true), 8);
  ExpectRuntimeSendsTheSchedule(RingPlan(3, 61, 4, 1, false), 8);
  ExpectRuntimeSendsTheSchedule(UlyssesPlan(8, 67, 8, 2), 8);  // KV heads replicated
  ExpectRuntimeSendsTheSchedule(UspPlan(2, 3, 73, 6, 2), 8);   // primaries and replicas
  ExpectRuntimeSendsTheSchedule(UspPlan(4, 2, 89, 4, 4), 8);
}

}  // namespace
}  // namespace hexiseq::runtime
