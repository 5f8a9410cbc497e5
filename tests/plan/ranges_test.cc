// Causal pair counting against brute force, and the range helpers.
#include "plan/ranges.h"

#include <gtest/gtest.h>

#include <random>

#include "spec/limits.h"

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

// Pairs (q, k) with 0 <= q < x, 0 <= k < y and k <= q, in 128 bits (an independent closed form:
// CausalPairs([a, b), [c, d)) follows by inclusion-exclusion).
__int128 PairsBelow(int64_t x, int64_t y) {
  const __int128 xs = x, ys = y;
  if (ys >= xs) return xs * (xs + 1) / 2;
  return ys * (ys + 1) / 2 + (xs - ys) * ys;
}

__int128 InclusionExclusionPairs(Range q, Range k) {
  return PairsBelow(q.end, k.end) - PairsBelow(q.begin, k.end) - PairsBelow(q.end, k.begin) +
         PairsBelow(q.begin, k.begin);
}

TEST(CausalPairs, LongestSequenceDoesNotOverflow) {
  // At 3G tokens S(S+1) passes 2^63; the bound is kMaxSeqLen and every count up to it is exact.
  const int64_t seq = kMaxSeqLen;
  const __int128 want = static_cast<__int128>(seq) * (seq + 1) / 2;
  EXPECT_EQ(static_cast<__int128>(CausalPrefixPairs({{0, seq}})), want);
  EXPECT_EQ(static_cast<__int128>(CausalPairs({0, seq}, {0, seq})), want);
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    Range ranges[2];
    for (Range& r : ranges) {
      int64_t a = std::uniform_int_distribution<int64_t>(0, seq)(rng);
      int64_t b = std::uniform_int_distribution<int64_t>(0, seq)(rng);
      r = {std::min(a, b), std::max(a, b)};
    }
    ASSERT_EQ(static_cast<__int128>(CausalPairs(ranges[0], ranges[1])),
              InclusionExclusionPairs(ranges[0], ranges[1]))
        << "trial " << trial << ": [" << ranges[0].begin << ", " << ranges[0].end << ") x ["
        << ranges[1].begin << ", " << ranges[1].end << ")";
  }
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
