#include "plan/ranges.h"

#include <algorithm>
#include <limits>

#include "spec/error.h"

namespace hexiseq {

std::string IntervalText(int64_t low, int64_t high, bool closed) {
  std::string text = "[";  // built stepwise: g++ 12 warns falsely (-Wrestrict) on "[" + string
  text += std::to_string(low);
  text += ", ";
  text += std::to_string(high);
  text += closed ? "]" : ")";
  return text;
}

int64_t TotalTokens(const Ranges& ranges) {
  int64_t total = 0;
  for (const Range& r : ranges) total += r.size();
  return total;
}

TokenSpan SpanOf(const Ranges& ranges) {
  TokenSpan span;
  for (const Range& range : ranges) {
    if (range.size() <= 0) continue;
    span.first = span.tokens == 0 ? range.begin : std::min(span.first, range.begin);
    span.last = std::max(span.last, range.end - 1);
    span.tokens += range.size();
  }
  return span;
}

namespace {

// Pair counts are summed in 128 bits: the products below reach 2^63 for ranges near
// kMaxSeqLen before the division, and a sum over many range pairs may exceed int64_t only for
// plans that overlap (which Validate rejects); the final count must fit.
using WidePairs = __int128;

int64_t Narrow(WidePairs pairs) {
  HEXISEQ_CHECK(pairs >= 0 && pairs <= std::numeric_limits<int64_t>::max(),
                "causal pair count fits int64_t (token ranges inside [0, kMaxSeqLen])");
  return static_cast<int64_t>(pairs);
}

WidePairs WideCausalPairs(Range q, Range k) {
  if (q.size() <= 0 || k.size() <= 0) return 0;
  WidePairs pairs = 0;
  // Queries in [c, d): query x sees keys c..x, i.e. x - c + 1 of them.
  const int64_t lo = std::max(q.begin, k.begin), hi = std::min(q.end, k.end);
  if (hi > lo) {
    const WidePairs first = lo - k.begin + 1, last = hi - 1 - k.begin + 1;
    pairs += (first + last) * (hi - lo) / 2;
  }
  // Queries at or after d see every key of [c, d).
  const int64_t after = std::max(q.begin, k.end);
  if (q.end > after) pairs += static_cast<WidePairs>(q.end - after) * k.size();
  return pairs;
}

}  // namespace

int64_t CausalPairs(Range q, Range k) { return Narrow(WideCausalPairs(q, k)); }

int64_t CausalPairs(const Ranges& queries, const Ranges& keys) {
  WidePairs pairs = 0;
  for (const Range& q : queries)
    for (const Range& k : keys) pairs += WideCausalPairs(q, k);
  return Narrow(pairs);
}

int64_t CausalPrefixPairs(const Ranges& queries) {
  WidePairs pairs = 0;
  for (const Range& q : queries) {
    if (q.size() > 0) pairs += static_cast<WidePairs>(q.size()) * (q.begin + q.end + 1) / 2;
  }
  return Narrow(pairs);
}

void NormalizeInPlace(Ranges& ranges) {
  std::erase_if(ranges, [](const Range& r) { return r.size() <= 0; });
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  size_t kept = 0;
  for (const Range& r : ranges) {
    if (kept > 0 && ranges[kept - 1].end >= r.begin)
      ranges[kept - 1].end = std::max(ranges[kept - 1].end, r.end);
    else
      ranges[kept++] = r;
  }
  ranges.resize(kept);
}

Ranges Normalize(Ranges ranges) {
  NormalizeInPlace(ranges);
  return ranges;
}

void SliceByOffset(const Ranges& ranges, int64_t offset, int64_t count, Ranges& out) {
  out.clear();
  int64_t skipped = 0;
  for (const Range& r : ranges) {
    if (count <= 0) break;
    const int64_t size = r.size();
    if (skipped + size <= offset) {
      skipped += size;
      continue;
    }
    const int64_t start = r.begin + std::max<int64_t>(0, offset - skipped);
    const int64_t take = std::min(count, r.end - start);
    if (take > 0) out.push_back({start, start + take});
    count -= take;
    skipped += size;
    offset = std::max(offset, skipped);
  }
}

Ranges SliceByOffset(const Ranges& ranges, int64_t offset, int64_t count) {
  Ranges out;
  SliceByOffset(ranges, offset, count, out);
  return out;
}

Ranges Intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (hi > lo) out.push_back({lo, hi});
    if (a[i].end < b[j].end)
      ++i;
    else
      ++j;
  }
  return out;
}

}  // namespace hexiseq
