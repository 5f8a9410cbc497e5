// Causal pair counting against brute force, and the range helpers.
#include "plan/ranges.h"

#include <gtest/gtest.h>

#include <random>

namespace hexiseq {
namespace {

int64_t BruteForcePairs(const Ranges& queries, const Ranges& keys) {
  int64_t pairs = 0;
  for (const Range& q : queries)
    for (int64_t qi = q.begin; qi < q.end; ++qi)
      for (const Range& k : keys)
        for (int64_t ki = k.begin; ki < k.end; ++ki) pairs += ki <= qi;
  return pairs;
}

Ranges RandomRanges(std::mt19937& rng, int64_t seq) {
  Ranges out;
  const int n = std::uniform_int_distribution<int>(0, 4)(rng);
  for (int i = 0; i < n; ++i) {
    int64_t a = std::uniform_int_distribution<int64_t>(0, seq)(rng);
    int64_t b = std::uniform_int_distribution<int64_t>(0, seq)(rng);
    if (a > b) std::swap(a, b);
    out.push_back({a, b});
  }
  return out;
}

TEST(CausalPairs, MatchesBruteForceOnRandomRangeSets) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t seq = std::uniform_int_distribution<int64_t>(1, 97)(rng);
    const Ranges q = RandomRanges(rng, seq), k = RandomRanges(rng, seq);
    ASSERT_EQ(CausalPairs(q, k), BruteForcePairs(q, k)) << "trial " << trial;
    ASSERT_EQ(CausalPrefixPairs(q), BruteForcePairs(q, {{0, seq}})) << "trial " << trial;
  }
}

TEST(CausalPairs, ClosedFormForOneRange) {
  // (b - a)(a + b + 1) / 2 for [a, b) against the whole prefix.
  EXPECT_EQ(CausalPrefixPairs({{0, 4}}), 10);
  EXPECT_EQ(CausalPrefixPairs({{3, 7}}), 4 * 11 / 2);
  EXPECT_EQ(CausalPrefixPairs({{0, 1048576}}), int64_t{1048576} * 1048577 / 2);
}

TEST(Ranges, NormalizeMergesAndSorts) {
  EXPECT_EQ(Normalize({{5, 7}, {0, 2}, {2, 3}, {4, 4}}), (Ranges{{0, 3}, {5, 7}}));
}

TEST(Ranges, SliceByOffsetWalksConcatenation) {
  const Ranges r = {{0, 4}, {10, 14}};
  EXPECT_EQ(SliceByOffset(r, 0, 3), (Ranges{{0, 3}}));
  EXPECT_EQ(SliceByOffset(r, 3, 3), (Ranges{{3, 4}, {10, 12}}));
  EXPECT_EQ(SliceByOffset(r, 6, 2), (Ranges{{12, 14}}));
  EXPECT_EQ(SliceByOffset(r, 8, 1), Ranges{});
}

TEST(Ranges, IntersectAndTotal) {
  EXPECT_EQ(Intersect({{0, 5}, {8, 12}}, {{3, 9}}), (Ranges{{3, 5}, {8, 9}}));
  EXPECT_EQ(TotalTokens({{0, 5}, {8, 12}}), 9);
}

}  // namespace
}  // namespace hexiseq
