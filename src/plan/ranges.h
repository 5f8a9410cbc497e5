// Token ranges: half-open [begin, end) intervals of global sequence positions, and exact causal
// (query, key) pair counting over sets of them. Closed forms; no per-token loops.
// REQUIRES (everywhere below): endpoints in [0, kMaxSeqLen] (spec/limits.h), as the plan reader
// and the planners guarantee; then sizes and pair counts (at most S(S+1)/2 < 2^62) cannot overflow.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hexiseq {

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};
using Ranges = std::vector<Range>;

int64_t TotalTokens(const Ranges& ranges);
// The first and last position of a set of ranges and its token count (tokens == 0: empty, and
// then first and last mean nothing).
struct TokenSpan {
  int64_t first = 0, last = -1, tokens = 0;
};
TokenSpan SpanOf(const Ranges& ranges);
// "[low, high)" when `closed` is false, "[low, high]" when true (for messages).
std::string IntervalText(int64_t low, int64_t high, bool closed = false);

// Pairs (q, k) with q in [qa, qb), k in [kc, kd), k <= q.
int64_t CausalPairs(Range queries, Range keys);
// Sum over all range pairs (summed in 128 bits; the total must fit int64_t, which holds for
// non-overlapping ranges inside [0, kMaxSeqLen]).
int64_t CausalPairs(const Ranges& queries, const Ranges& keys);
// Pairs (q, k) with q in `queries` and 0 <= k <= q: the full causal work of these queries,
// (b - a)(a + b + 1) / 2 per range [a, b).
int64_t CausalPrefixPairs(const Ranges& queries);

// Sorted by begin, with adjacent ranges merged and empty ones dropped.
Ranges Normalize(Ranges ranges);
void NormalizeInPlace(Ranges& ranges);  // the same, keeping the vector's storage
// The sub-ranges of `ranges` covering token offsets [offset, offset + count) when the ranges are
// concatenated in order (used to carve members' shards out of a group's ranges).
Ranges SliceByOffset(const Ranges& ranges, int64_t offset, int64_t count);
void SliceByOffset(const Ranges& ranges, int64_t offset, int64_t count, Ranges& out);  // into out
// Intersection of two normalized range sets.
Ranges Intersect(const Ranges& a, const Ranges& b);

}  // namespace hexiseq
