// The sub-ring chains of a plan's ring, every group at once (CostModel::ChainIndex).
//
// The layer schedule's rule: ring group q needs origin o's K/V block when q's last query is at or
// after o's first key. Origin o's chain runs from o round the ring through the groups that need
// it; K/V passes along it, and the dK/dV sums follow and end back at o.
//
// Going round the ring from group s, the running maximum of the groups' last queries rises at a
// few positions r_1 < r_2 < ... (r_1 is s's next group) to the values v_1 < v_2 < .... An origin
// whose first key lies in (v_(k-1), v_k] is at or after r_k, and r_k is the first group after s
// that needs it: its block goes from s to r_k, unless the origin is r_k itself, whose chain ends
// at s (s returns the sums to it). So each band of first keys moves as one peer entry, summed
// from the first keys in sorted order. Going backward gives where the blocks come from.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cost/cost_model.h"

namespace hexiseq {
namespace {

constexpr int64_t kBeforeEveryToken = -1;  // below every first key (token positions are >= 0)

}  // namespace

void CostModel::ChainIndex::Build(const Plan& plan) {
  const int num_groups = static_cast<int>(plan.groups.size());
  ring_of_group_.assign(num_groups, -1);
  group_of_ring_.clear();
  first_.clear();
  last_.clear();
  tokens_.clear();
  for (int g = 0; g < num_groups; ++g) {
    const TokenSpan span = SpanOf(plan.groups[g].tokens);
    if (span.tokens == 0) continue;
    ring_of_group_[g] = static_cast<int>(group_of_ring_.size());
    group_of_ring_.push_back(g);
    first_.push_back(span.first);
    last_.push_back(span.last);
    tokens_.push_back(span.tokens);
  }
  ring_size_ = static_cast<int>(group_of_ring_.size());

  std::vector<int> by_first(ring_size_);
  for (int i = 0; i < ring_size_; ++i) by_first[i] = i;
  std::sort(by_first.begin(), by_first.end(),
            [&](int lhs, int rhs) { return first_[lhs] < first_[rhs]; });
  sorted_first_.resize(ring_size_);
  tokens_before_.assign(ring_size_ + 1, 0);
  for (int i = 0; i < ring_size_; ++i) {
    sorted_first_[i] = first_[by_first[i]];
    tokens_before_[i + 1] = tokens_before_[i] + tokens_[by_first[i]];
  }

  // Next and previous strictly later last query over the ring written twice (monotone stacks).
  const int doubled = 2 * ring_size_;
  auto last_at = [&](int position) { return last_[position % ring_size_]; };
  std::vector<int> stack;
  next_later_.assign(doubled, doubled);
  for (int position = doubled - 1; position >= 0; --position) {
    while (!stack.empty() && last_at(stack.back()) <= last_at(position)) stack.pop_back();
    if (!stack.empty()) next_later_[position] = stack.back();
    stack.push_back(position);
  }
  stack.clear();
  previous_later_.assign(doubled, -1);
  for (int position = 0; position < doubled; ++position) {
    while (!stack.empty() && last_at(stack.back()) <= last_at(position)) stack.pop_back();
    if (!stack.empty()) previous_later_[position] = stack.back();
    stack.push_back(position);
  }
}

CostModel::ChainIndex::Band CostModel::ChainIndex::BandOf(int64_t below, int64_t top,
                                                          int self) const {
  Band band;
  if (top <= below) return band;
  const auto lo = std::upper_bound(sorted_first_.begin(), sorted_first_.end(), below);
  const auto hi = std::upper_bound(lo, sorted_first_.end(), top);
  const size_t lo_index = lo - sorted_first_.begin(), hi_index = hi - sorted_first_.begin();
  band.tokens = tokens_before_[hi_index] - tokens_before_[lo_index];
  band.blocks = static_cast<int>(hi_index - lo_index);
  if (first_[self] > below && first_[self] <= top) {  // a group is not its own origin
    band.tokens -= tokens_[self];
    --band.blocks;
  }
  return band;
}

// Going round the ring from `self` (forward or backward), each group where the running maximum
// of the last queries rises, until it covers every origin that visits `self`.
template <typename Visit>
void CostModel::ChainIndex::Walk(int self, bool forward, Visit&& visit) const {
  const int64_t needed = last_[self];  // origins with a first key up to here visit `self`
  int64_t below = kBeforeEveryToken;
  int position = forward ? self + 1 : self + ring_size_ - 1;
  while (forward ? position < self + ring_size_ : position > self) {
    const int ring_group = position % ring_size_;
    const int64_t top = last_[ring_group];
    Stop stop;
    stop.group = group_of_ring_[ring_group];
    stop.band = BandOf(below, std::min(top, needed), self);
    if (first_[ring_group] > below && first_[ring_group] <= needed)
      stop.origin = {tokens_[ring_group], 1};
    stop.own = first_[self] > below && first_[self] <= top;
    visit(stop);
    if (top >= needed) return;
    below = top;
    position = forward ? next_later_[position] : previous_later_[position];
  }
}

void CostModel::ChainIndex::Traffic(int group_index, ChainTraffic& out) const {
  out.kv_from.clear();
  out.kv_to.clear();
  out.sums_from.clear();
  out.sums_to.clear();
  out.own_return = 0;
  out.own_returner = -1;
  const int self = ring_of_group_[group_index];
  if (self < 0 || ring_size_ <= 1) return;
  // Forward: where the visiting blocks go next. The band's origin at a stop ends its chain at
  // `self`, which returns its sums to it and passes it no K/V; `self`'s own block first goes to
  // the stop whose band holds its first key.
  Walk(self, /*forward=*/true, [&](const Stop& stop) {
    if (stop.band.blocks > 0)
      out.sums_to.push_back({stop.group, stop.band.tokens, stop.band.blocks});
    PeerTraffic kv{stop.group, stop.band.tokens - stop.origin.tokens,
                   stop.band.blocks - stop.origin.blocks};
    if (stop.own) {
      kv.tokens += tokens_[self];
      ++kv.blocks;
    }
    if (kv.blocks > 0) out.kv_to.push_back(kv);
  });
  // Backward: where they come from. The band's origin at a stop sends its block itself (no sums
  // from it); the stop whose band holds `self`'s first key ends its chain and returns its sums.
  Walk(self, /*forward=*/false, [&](const Stop& stop) {
    if (stop.band.blocks > 0)
      out.kv_from.push_back({stop.group, stop.band.tokens, stop.band.blocks});
    const PeerTraffic sums{stop.group, stop.band.tokens - stop.origin.tokens,
                           stop.band.blocks - stop.origin.blocks};
    if (sums.blocks > 0) out.sums_from.push_back(sums);
    if (stop.own) {
      out.own_return = tokens_[self];
      out.own_returner = stop.group;
    }
  });
}

CostModel::ChainTraffic CostModel::GroupChainTraffic(const Plan& plan, int group_index) const {
  ChainTraffic out;
  GroupChainTraffic(plan, group_index, out);
  return out;
}

void CostModel::GroupChainTraffic(const Plan& plan, int group_index, ChainTraffic& out) const {
  thread_local ChainIndex chains;
  chains.Build(plan);
  chains.Traffic(group_index, out);
}

}  // namespace hexiseq
