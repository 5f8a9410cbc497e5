// Distributed attention over the in-process transport against the naive single-process
// reference (through RunAttnCheck): random valid plans with prime lengths, zero-token ranks,
// head-less ranks, non-contiguous and KV-cutting head sets, groups of different sizes, idle
// groups, the ring / Ulysses / USP shapes; plus plan agreement and layout checks.
#include "runtime/dist_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <random>

#include "runtime/attention_kernels.h"
#include "runtime/attn_check.h"
#include "runtime/plan_gen_util.h"

namespace hexiseq::runtime {
namespace {

using hexiseq::testing::RandomPlan;
using hexiseq::testing::RandomPlanOptions;
using hexiseq::testing::RingPlan;
using hexiseq::testing::UlyssesPlan;
using hexiseq::testing::UspPlan;

constexpr double kTolerance = 1e-5;

// Ranks are threads here: keep OpenBLAS single-threaded like one MPI rank per core.
class OneBlasThread : public ::testing::Environment {
 public:
  void SetUp() override { SetBlasThreads(1); }
};
const ::testing::Environment* const kOneBlasThread =
    ::testing::AddGlobalTestEnvironment(new OneBlasThread);

std::string Describe(const Plan& plan) {
  std::string text = "S=" + std::to_string(plan.seq_len) + " H=" + std::to_string(plan.num_heads) +
                     " G=" + std::to_string(plan.num_kv_heads) + "\n" + PlanToJson(plan, -1);
  return text;
}

void ExpectExact(const Plan& plan, int head_dim = 16, uint64_t seed = 1) {
  SCOPED_TRACE(Describe(plan));
  ASSERT_TRUE(ValidateStructure(plan)) << ValidateStructure(plan).error().message;
  SetBlasThreads(1);
  AttnCheckOptions options;
  options.head_dim = head_dim;
  options.seed = seed;
  options.tolerance = kTolerance;
  std::mutex mu;
  RunInProcess(plan.num_ranks, [&](Comm& comm) {
    auto report = RunAttnCheck(plan, comm, options);
    std::lock_guard lock(mu);
    ASSERT_TRUE(report.has_value()) << "rank " << comm.rank() << ": " << report.error().message;
    EXPECT_TRUE(report->passed);
    if (comm.rank() == 0) {
      ASSERT_TRUE(report->has_errors);
      for (const ErrorStats& stats : report->errors) {
        EXPECT_LE(stats.relative(), kTolerance)
            << stats.name << ": max abs " << stats.max_abs << ", rel " << stats.relative()
            << ", first worst flat index " << stats.worst;
      }
    }
  });
}

TEST(DistributedAttention, RandomPlansWithPrimeLengths) {
  std::mt19937_64 rng(2024);
  const int64_t primes[] = {2, 3, 5, 13, 31, 97, 131, 257, 389};
  const std::pair<int, int> heads[] = {{1, 1}, {4, 1}, {4, 2}, {6, 3}, {8, 2}, {8, 8}, {12, 4}};
  for (int trial = 0; trial < 150; ++trial) {
    RandomPlanOptions options;
    options.num_ranks = 1 + trial % 8;
    options.seq_len = primes[std::uniform_int_distribution<int>(0, 8)(rng)];
    std::tie(options.num_heads, options.num_kv_heads) =
        heads[std::uniform_int_distribution<int>(0, 6)(rng)];
    const Plan plan = RandomPlan(rng, options);
    SCOPED_TRACE("trial " + std::to_string(trial));
    ExpectExact(plan, trial % 3 == 0 ? 8 : 16, trial);
    if (HasFatalFailure()) return;
  }
}

TEST(DistributedAttention, BaselineShapes) {
  ExpectExact(RingPlan(1, 131, 4, 2, true));
  ExpectExact(RingPlan(4, 257, 4, 2, true));
  ExpectExact(RingPlan(3, 127, 4, 1, false));
  ExpectExact(RingPlan(5, 7, 2, 1, true));  // some ranks get no tokens
  ExpectExact(UlyssesPlan(4, 131, 8, 2));
  ExpectExact(UlyssesPlan(4, 97, 6, 3));   // uneven heads: 1, 2, 1, 2
  ExpectExact(UlyssesPlan(8, 101, 8, 2));  // HP degree > KV heads: KV heads replicated
  ExpectExact(UspPlan(2, 2, 257, 8, 4));
  ExpectExact(UspPlan(2, 3, 193, 6, 2));
  ExpectExact(UspPlan(4, 2, 211, 4, 4));
}

// A hand-written asymmetric plan: groups of sizes 3, 1, 2 and an idle group; a zero-token rank
// with heads, a rank with tokens and no heads, non-contiguous heads that cut KV groups,
// non-contiguous token ranges, ring order different from sequence order.
Plan AsymmetricPlan() {
  Plan plan;
  plan.strategy = "hand";
  plan.seq_len = 211;
  plan.num_heads = 8;
  plan.num_kv_heads = 2;
  plan.num_ranks = 8;
  auto member = [](int rank, Ranges tokens, std::vector<int> heads) {
    PlanMember m;
    m.rank = rank;
    m.tokens = std::move(tokens);
    m.heads = std::move(heads);
    return m;
  };
  PlanGroup a;
  a.ranks = {5, 0, 2};
  a.tokens = {{0, 40}, {150, 211}};
  a.members = {member(5, {{0, 20}, {200, 211}}, {0, 3, 5}), member(0, {}, {1, 2, 7}),
               member(2, {{20, 40}, {150, 200}}, {4, 6})};
  PlanGroup b;
  b.ranks = {3};
  b.tokens = {{100, 150}};
  b.members = {member(3, {{100, 150}}, {0, 1, 2, 3, 4, 5, 6, 7})};
  PlanGroup idle;
  idle.ranks = {6, 7};
  idle.members = {member(6, {}, {}), member(7, {}, {})};
  PlanGroup c;
  c.ranks = {1, 4};
  c.tokens = {{40, 100}};
  c.members = {member(1, {{40, 100}}, {}), member(4, {}, {0, 1, 2, 3, 4, 5, 6, 7})};
  plan.groups = {a, b, idle, c};
  return plan;
}

TEST(DistributedAttention, AsymmetricPlanWithIdleGroupAndHeadlessRanks) {
  ExpectExact(AsymmetricPlan(), 16, 3);
  ExpectExact(AsymmetricPlan(), 64, 4);
}

TEST(DistributedAttention, SequenceShorterThanRanks) {
  ExpectExact(UlyssesPlan(4, 3, 4, 2));
  ExpectExact(RingPlan(6, 1, 1, 1, true));
}

TEST(AttentionLayout, SegmentsAreTheCommonRefinementOfHeadPartitions) {
  const Plan plan = AsymmetricPlan();
  auto layout = AttentionLayout::Build(plan);
  ASSERT_TRUE(layout) << layout.error().message;
  const LayerSchedule& schedule = layout->schedule;
  // Ring: groups a, b, c (the idle group is skipped).
  EXPECT_EQ(schedule.ring, (std::vector<int>{0, 1, 3}));
  // KV 0 (heads 0-3): a -> members 0, 1 (ranks 5, 0); b -> 0; c -> 1 (rank 4).
  // KV 1 (heads 4-7): a -> members 0, 1, 2; b -> 0; c -> 1. Different signatures: 2 segments.
  ASSERT_EQ(schedule.segments.size(), 2u);
  EXPECT_EQ(schedule.segments[0].kv_heads, std::vector<int>{0});
  EXPECT_EQ(schedule.segments[0].holders[0], (std::vector<int>{5, 0}));
  EXPECT_EQ(schedule.segments[0].holder_query_heads[0], (std::vector<int>{2, 2}));
  EXPECT_EQ(schedule.segments[1].holders[0], (std::vector<int>{5, 0, 2}));
  EXPECT_EQ(schedule.segments[1].holder_query_heads[0], (std::vector<int>{1, 1, 2}));
  EXPECT_EQ(schedule.segments[0].Primary(2), 4);
  EXPECT_TRUE(layout->roles[1].segments.empty());  // tokens, no heads
  EXPECT_EQ(layout->roles[6].ring_pos, -1);        // idle
  // Causality: c (tokens 40..99) does not need b (100..149); a needs everyone.
  auto chain_of = [&](int origin) {
    std::vector<int> positions;
    for (const ChainHop& hop : schedule.chains[origin].hops) positions.push_back(hop.ring_pos);
    return positions;
  };
  EXPECT_EQ(chain_of(1), std::vector<int>{0});       // b -> a only (c skipped)
  EXPECT_EQ(chain_of(2), (std::vector<int>{0, 1}));  // c -> a -> b
  EXPECT_EQ(schedule.HopIndex(1, 2), -1);
  EXPECT_EQ(schedule.HopIndex(2, 1), 1);
}

TEST(AttentionLayout, RejectsPlansTheRuntimeCannotExecute) {
  Plan plan = AsymmetricPlan();
  plan.groups[0].members[1].heads = {1, 2};  // head 7 now missing in group a
  auto layout = AttentionLayout::Build(plan);
  ASSERT_FALSE(layout);
  EXPECT_EQ(layout.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(layout.error().message.find("groups[0]: query head 7 is held by 0 members"),
            std::string::npos)
      << layout.error().message;
  plan = AsymmetricPlan();
  plan.groups[3].members[0].tokens = {{40, 90}};
  layout = AttentionLayout::Build(plan);
  ASSERT_FALSE(layout);
  EXPECT_NE(layout.error().message.find("do not partition the group's tokens"), std::string::npos)
      << layout.error().message;
}

TEST(DistributedAttention, CausallyUselessBlocksAreNotSent) {
  // Contiguous ring of 4: block 0 goes to 1, 2, 3; block 1 to 2, 3; block 2 to 3; block 3 nowhere.
  const int64_t S = 400, d = 8;
  const Plan plan = RingPlan(4, S, 4, 2, false);
  std::vector<double> sent(4);
  RunInProcess(4, [&](Comm& comm) {
    auto attention = DistributedAttention::Create(plan, comm, d);
    ASSERT_TRUE(attention) << attention.error().message;
    const int64_t s = (*attention)->num_tokens();
    std::vector<float> q(s * 4 * d, 0.5f), kv(s * 2 * d, 0.25f);
    ASSERT_TRUE((*attention)->Forward(q, kv, kv));
    sent[comm.rank()] = (*attention)->forward_times().ring_bytes_sent;
  });
  const double block = 2.0 * 2 * (S / 4) * d * sizeof(float);  // K and V, 2 KV heads
  // Rank 1 sends its block and forwards block 0; rank 2 sends its own and forwards 0 and 1.
  EXPECT_EQ(sent, (std::vector<double>{block, 2 * block, 3 * block, 0}));
}

TEST(DistributedAttention, KvHeadsGoOnlyWhereNeeded) {
  // Ulysses over 4 ranks with 4 KV heads: each rank needs exactly one KV head, so the forward
  // all-to-all carries Q for 2 heads and K, V for 1 KV head per (source, destination) pair:
  // checked through the ring-free case and the exactness of the result.
  const Plan plan = UlyssesPlan(4, 64, 8, 4);
  auto layout = AttentionLayout::Build(plan);
  ASSERT_TRUE(layout);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(layout->roles[rank].kv_heads.size(), 1u);
  ExpectExact(plan);
}

TEST(DistributedAttention, PlanMismatchIsReportedOnEveryRankNamingTheRanks) {
  const Plan plan = UspPlan(2, 2, 64, 4, 2);
  Plan other = plan;
  std::swap(other.groups[1].members[0].heads, other.groups[1].members[1].heads);
  std::vector<std::string> messages(4);
  RunInProcess(4, [&](Comm& comm) {
    auto attention = DistributedAttention::Create(comm.rank() == 2 ? other : plan, comm, 16);
    ASSERT_FALSE(attention);
    messages[comm.rank()] = attention.error().message;
  });
  for (const std::string& message : messages) {
    EXPECT_EQ(message, messages[0]);
    EXPECT_NE(message.find("plan mismatch across ranks"), std::string::npos) << message;
    EXPECT_NE(message.find("ranks 0, 1, 3 loaded plan hash"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 2 loaded plan hash"), std::string::npos) << message;
  }
}

TEST(DistributedAttention, WrongProcessCountAndBadHeadDimAreErrorsOnEveryRank) {
  const Plan plan = UlyssesPlan(3, 64, 4, 2);
  RunInProcess(2, [&](Comm& comm) {
    auto attention = DistributedAttention::Create(plan, comm, 16);
    ASSERT_FALSE(attention);
    EXPECT_NE(attention.error().message.find("num_ranks = 3 but 2 processes are running"),
              std::string::npos)
        << attention.error().message;
  });
  RunInProcess(3, [&](Comm& comm) {
    auto attention = DistributedAttention::Create(plan, comm, comm.rank() == 1 ? 32 : 16);
    ASSERT_FALSE(attention);
    EXPECT_NE(attention.error().message.find("head_dim mismatch across ranks: ranks 0, 2 use "
                                             "head_dim 16; rank 1 use head_dim 32"),
              std::string::npos)
        << attention.error().message;
  });
  RunInProcess(3, [&](Comm& comm) {
    auto attention = DistributedAttention::Create(plan, comm, 0);
    ASSERT_FALSE(attention);
    EXPECT_EQ(attention.error().code, ErrorCode::kInvalidArgument);
  });
}

TEST(DistributedAttention, InvalidPlanIsAnErrorOnEveryRank) {
  Plan plan = UlyssesPlan(2, 64, 4, 2);
  plan.groups[0].members[1].heads = {3};  // head 2 missing
  RunInProcess(2, [&](Comm& comm) {
    auto attention = DistributedAttention::Create(plan, comm, 16);
    ASSERT_FALSE(attention);
    EXPECT_NE(attention.error().message.find("head 2 is missing"), std::string::npos)
        << attention.error().message;
  });
}

TEST(DistributedAttention, RepeatedStepsGiveTheSameResults) {
  // Tags and buffers are reused across calls (layers, steps): a second forward + backward on the
  // same object must match the first.
  std::mt19937_64 rng(77);
  RandomPlanOptions options;
  options.num_ranks = 6;
  options.seq_len = 211;
  const Plan plan = RandomPlan(rng, options);
  const Plan asym = AsymmetricPlan();
  for (const Plan* p : {&plan, &asym}) {
    RunInProcess(p->num_ranks, [&](Comm& comm) {
      const int d = 8;
      auto attention = DistributedAttention::Create(*p, comm, d);
      ASSERT_TRUE(attention) << attention.error().message;
      const int64_t s = (*attention)->num_tokens();
      std::vector<float> q(s * p->num_heads * d), kv(s * p->num_kv_heads * d);
      for (size_t index = 0; index < q.size(); ++index) q[index] = std::sin(0.1f * index);
      for (size_t index = 0; index < kv.size(); ++index) kv[index] = std::cos(0.3f * index);
      std::vector<std::vector<float>> first;
      for (int step = 0; step < 3; ++step) {
        auto out = (*attention)->Forward(q, kv, kv);
        ASSERT_TRUE(out);
        auto grads = (*attention)->Backward(out->o);
        ASSERT_TRUE(grads);
        std::vector<std::vector<float>> all = {out->o, out->lse, grads->dq, grads->dk, grads->dv};
        if (step == 0) {
          first = all;
          continue;
        }
        for (size_t part = 0; part < all.size(); ++part) {
          ASSERT_EQ(all[part].size(), first[part].size());
          for (size_t index = 0; index < all[part].size(); ++index) {
            // Arrival order may change the merge order: equal up to rounding.
            ASSERT_NEAR(all[part][index], first[part][index],
                        1e-5 * (1 + std::abs(first[part][index])))
                << "step " << step << " part " << part << " index " << index;
          }
        }
      }
    });
  }
}

TEST(DistributedAttention, BackwardBeforeForwardIsAnError) {
  const Plan plan = UlyssesPlan(1, 8, 2, 1);
  RunInProcess(1, [&](Comm& comm) {
    auto attention = DistributedAttention::Create(plan, comm, 4);
    ASSERT_TRUE(attention);
    std::vector<float> d_o(8 * 2 * 4);
    auto grads = (*attention)->Backward(d_o);
    ASSERT_FALSE(grads);
    EXPECT_NE(grads.error().message.find("before Forward"), std::string::npos);
  });
}

}  // namespace
}  // namespace hexiseq::runtime
