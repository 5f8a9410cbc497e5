// CostModel::ChainIndex against a plain reference written from the layer schedule's rule: walk
// every origin's chain round the ring (each group whose last query is at or after the origin's
// first key), then list per group what it receives and sends, by peer. Random rings of random
// ranges, so the running maxima rise many times, including rings with idle groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "cost/cost_model.h"

namespace hexiseq {
namespace {

using PeerMap = std::map<int, std::pair<int64_t, int>>;  // peer group -> tokens, blocks

struct PlainTraffic {
  PeerMap kv_from, kv_to, sums_from, sums_to;
  int64_t own_return = 0;
  int own_returner = -1;
};

void Add(PeerMap& map, int group, int64_t tokens) {
  map[group].first += tokens;
  ++map[group].second;
}

std::vector<PlainTraffic> PlainChains(const Plan& plan) {
  const int num_groups = static_cast<int>(plan.groups.size());
  std::vector<int> ring;
  for (int g = 0; g < num_groups; ++g)
    if (TotalTokens(plan.groups[g].tokens) > 0) ring.push_back(g);
  std::vector<PlainTraffic> out(num_groups);
  const int size = static_cast<int>(ring.size());
  for (int origin = 0; origin < size; ++origin) {
    const TokenSpan keys = SpanOf(plan.groups[ring[origin]].tokens);
    std::vector<int> chain = {ring[origin]};
    for (int distance = 1; distance < size; ++distance) {
      const int group = ring[(origin + distance) % size];
      if (SpanOf(plan.groups[group].tokens).last >= keys.first) chain.push_back(group);
    }
    for (size_t i = 1; i < chain.size(); ++i) {
      Add(out[chain[i - 1]].kv_to, chain[i], keys.tokens);
      Add(out[chain[i]].kv_from, chain[i - 1], keys.tokens);
      if (i + 1 < chain.size()) {
        Add(out[chain[i]].sums_to, chain[i + 1], keys.tokens);
        Add(out[chain[i + 1]].sums_from, chain[i], keys.tokens);
      } else {
        Add(out[chain[i]].sums_to, chain[0], keys.tokens);
        out[chain[0]].own_return = keys.tokens;
        out[chain[0]].own_returner = chain[i];
      }
    }
  }
  return out;
}

PeerMap MapOf(const std::vector<CostModel::PeerTraffic>& list, bool& duplicate) {
  PeerMap map;
  for (const CostModel::PeerTraffic& peer : list) {
    if (map.count(peer.group)) duplicate = true;
    map[peer.group] = {peer.tokens, peer.blocks};
  }
  return map;
}

// A random partition of [0, seq) into `num_groups` groups of 0-3 ranges each, in random order.
Plan RandomPlan(std::mt19937_64& rng, int num_groups, int64_t seq) {
  const int pieces = std::uniform_int_distribution<int>(1, 3 * num_groups)(rng);
  std::vector<int64_t> cuts = {0, seq};
  for (int i = 1; i < pieces; ++i)
    cuts.push_back(std::uniform_int_distribution<int64_t>(1, seq - 1)(rng));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  Plan plan;
  plan.groups.resize(num_groups);
  std::uniform_int_distribution<int> pick(0, num_groups - 1);
  for (size_t i = 0; i + 1 < cuts.size(); ++i)
    plan.groups[pick(rng)].tokens.push_back({cuts[i], cuts[i + 1]});
  return plan;
}

TEST(ChainIndex, EqualsEveryOriginsChainWalkedRoundTheRing) {
  std::mt19937_64 rng(41);
  CostModel::ChainIndex chains;
  CostModel::ChainTraffic traffic;
  int with_bands = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int num_groups = std::uniform_int_distribution<int>(1, trial < 300 ? 9 : 60)(rng);
    // Short sequences make equal first and last positions (ties) common.
    const int64_t seq = trial % 2 == 0 ? 1000 : 3 * num_groups + 2;
    const Plan plan = RandomPlan(rng, num_groups, seq);
    const std::vector<PlainTraffic> expected = PlainChains(plan);
    chains.Build(plan);
    for (int g = 0; g < num_groups; ++g) {
      chains.Traffic(g, traffic);
      bool duplicate = false;
      const std::string where = "trial " + std::to_string(trial) + " group " + std::to_string(g);
      EXPECT_EQ(MapOf(traffic.kv_from, duplicate), expected[g].kv_from) << where;
      EXPECT_EQ(MapOf(traffic.kv_to, duplicate), expected[g].kv_to) << where;
      EXPECT_EQ(MapOf(traffic.sums_from, duplicate), expected[g].sums_from) << where;
      EXPECT_EQ(MapOf(traffic.sums_to, duplicate), expected[g].sums_to) << where;
      EXPECT_FALSE(duplicate) << where << ": a peer listed twice";
      EXPECT_EQ(traffic.own_return, expected[g].own_return) << where;
      EXPECT_EQ(traffic.own_returner, expected[g].own_returner) << where;
      if (traffic.kv_to.size() + traffic.kv_from.size() > 2) ++with_bands;
    }
  }
  EXPECT_GT(with_bands, 100);  // the random rings do reach several peers per group
}

// A zigzag ring of `num_groups` groups (group g holds chunk g and chunk 2G - 1 - g), as the
// scheduler lays tokens out.
Plan ZigzagPlan(int num_groups) {
  constexpr int64_t kChunk = 64;
  Plan plan;
  plan.groups.resize(num_groups);
  for (int g = 0; g < num_groups; ++g) {
    const int64_t back = 2 * int64_t{num_groups} - 1 - g;
    plan.groups[g].tokens = {{g * kChunk, (g + 1) * kChunk}, {back * kChunk, (back + 1) * kChunk}};
  }
  return plan;
}

// Seconds to list every group's traffic (the best of a few runs).
double WholeRingSeconds(const Plan& plan) {
  constexpr int kRuns = 5;
  CostModel::ChainIndex chains;
  CostModel::ChainTraffic traffic;
  double best = 1e30;
  int64_t checksum = 0;
  for (int run = 0; run < kRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    chains.Build(plan);
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      chains.Traffic(static_cast<int>(g), traffic);
      checksum += traffic.kv_in();
    }
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  EXPECT_GT(checksum, 0);
  return best;
}

// A ring 16x longer costs about 16 x log(16 x G) / log(G) (~22x) as much, not 256x as the
// per-origin walk did (every group visited by every other). A ratio measured in one run.
TEST(ChainIndex, WholeRingCostsGroupsLogGroups) {
  constexpr int kSmall = 2000, kLarge = 32000;
  constexpr double kMaxRatio = 64.0;
  const double small = WholeRingSeconds(ZigzagPlan(kSmall));
  const double large = WholeRingSeconds(ZigzagPlan(kLarge));
  EXPECT_LT(large, kMaxRatio * small)
      << large << " s for " << kLarge << " groups, " << small << " s for " << kSmall;
}

}  // namespace
}  // namespace hexiseq
