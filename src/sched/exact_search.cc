// The exact search (strategy "exact") for clusters of at most kExactMaxRanks ranks: every
// grouping (set partition, optionally one group idle), ring orders, head splits and sequence
// splits, scored with the same cost model. Two stages: every discrete choice is scored with a
// compute-proportional sequence split; the best kExactRefine are then searched on a sequence grid
// and from balanced, compute- and sqrt-proportional starts, each refined by the class-level
// sequence search and a coordinate descent down to 1-token steps; the baseline plans are refined
// the same way as further starts. Identical ranks (same device, same node) are
// interchangeable, so structures equal up to swapping them are scored once.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "sched/scheduler.h"
#include "sched/scheduler_internal.h"

namespace hexiseq {
namespace {

using namespace sched_internal;

constexpr int kExactRefine = 16;         // discrete candidates refined in stage 2
constexpr int kExactRefineInfeasible = 64;  // ... distinct groupings when none fits before it
constexpr int kHeadSplitsPerGroup = 4;    // best head splits (by attention balance) per group
constexpr int kHeadSlack = 2;             // head counts within this of the proportional share
constexpr int kHeadCombosPerGrouping = 16;
constexpr int kFullRingOrdersUpTo = 4;    // all cyclic orders for up to this many groups
constexpr int kGridSteps = 16;            // sequence grid: 1/16 of S, for up to 3 groups
constexpr int64_t kExactDescentTrials = 20000;
constexpr int kExactClassEvaluations = 200;  // class-level sequence search before each descent

// Set partitions by restricted growth strings.
void Partitions(int n, std::vector<int>& label, int index, int blocks,
                std::vector<std::vector<std::vector<int>>>& out) {
  if (index == n) {
    std::vector<std::vector<int>> p(blocks);
    for (int r = 0; r < n; ++r) p[label[r]].push_back(r);
    out.push_back(std::move(p));
    return;
  }
  for (int b = 0; b <= blocks; ++b) {
    label[index] = b;
    Partitions(n, label, index + 1, std::max(blocks, b + 1), out);
  }
}

// Head splits of a group: every composition of H whose counts lie within kHeadSlack heads of the
// attention-proportional share (identical members non-increasing), ranked by the slowest
// member's attention time; the best `keep`.
std::vector<std::vector<int>> HeadSplits(const CostModel& model, const std::vector<int>& ranks,
                                         int keep) {
  const int heads = model.model().heads;
  const int m = static_cast<int>(ranks.size());
  const Cluster& cluster = model.cluster();
  double total_rate = 0;
  for (int rank : ranks) total_rate += cluster.device(rank).AttentionFlops();
  std::vector<int> lo(m), hi(m);
  const int slack = std::max(kHeadSlack, model.model().heads_per_kv());
  for (int i = 0; i < m; ++i) {
    const double share = heads * cluster.device(ranks[i]).AttentionFlops() / total_rate;
    lo[i] = std::max(0, static_cast<int>(std::floor(share)) - slack);
    hi[i] = std::min(heads, static_cast<int>(std::ceil(share)) + slack);
  }
  std::vector<std::pair<double, std::vector<int>>> all;
  std::vector<int> h(m, 0);
  auto same = [&](int a, int b) {
    return cluster.ranks[ranks[a]].kind == cluster.ranks[ranks[b]].kind &&
           cluster.ranks[ranks[a]].node == cluster.ranks[ranks[b]].node;
  };
  auto rec = [&](auto&& self, int i, int left) -> void {
    if (i == m - 1) {
      if (left < lo[i] || left > hi[i]) return;
      if (i > 0 && same(i, i - 1) && left > h[i - 1]) return;
      h[i] = left;
      double worst = 0;
      for (int j = 0; j < m; ++j)
        worst = std::max(worst, h[j] / cluster.device(ranks[j]).AttentionFlops());
      all.push_back({worst, h});
      return;
    }
    int top = std::min(left, hi[i]);
    if (i > 0 && same(i, i - 1)) top = std::min(top, h[i - 1]);
    for (int v = top; v >= lo[i]; --v) {
      h[i] = v;
      self(self, i + 1, left - v);
    }
  };
  rec(rec, 0, heads);
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<int>> out;
  for (size_t i = 0; i < all.size() && static_cast<int>(i) < keep; ++i) out.push_back(all[i].second);
  if (out.empty()) out.push_back(HeadsByAttention(model, ranks));
  return out;
}

// A signature of a structure up to swapping identical ranks.
std::string Signature(const Cluster& cluster, const Structure& s,
                      const std::vector<std::vector<int>>& heads) {
  std::string sig;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    sig += "[";
    for (size_t i = 0; i < s.groups[g].size(); ++i) {
      const RankInfo& r = cluster.ranks[s.groups[g][i]];
      sig += std::to_string(r.kind) + "." + std::to_string(r.node) + ":" +
             std::to_string(heads[g][i]) + ",";
    }
    sig += "]";
  }
  sig += "idle";
  for (int rank : s.idle) sig += std::to_string(cluster.ranks[rank].kind) + "." +
                                 std::to_string(cluster.ranks[rank].node) + ",";
  return sig;
}

struct Discrete {
  Structure structure;
  std::vector<std::vector<int>> heads;
  Objective score;
  std::string name;
};

Layout WithHeads(Layout layout, const std::vector<std::vector<int>>& heads) {
  for (size_t g = 0; g < heads.size(); ++g)
    if (layout[g].total() > 0) layout[g].heads = heads[g];
  return layout;
}

}  // namespace

Result<StrategyResult> ExactSearch(const CostModel& model, const ScheduleOptions& options) {
  const Cluster& cluster = model.cluster();
  const int n = cluster.num_ranks();
  if (n > kExactMaxRanks)
    return NotSupported("--strategy exact: the cluster has " + std::to_string(n) +
                        " ranks; the exhaustive search supports at most " +
                        std::to_string(kExactMaxRanks) + " (hint: use --strategy hexiseq)");
  Clock clock(options.time_limit_seconds);
  const int heads = model.model().heads;
  const int64_t seq = model.workload().seq_len;

  std::vector<std::vector<std::vector<int>>> partitions;
  std::vector<int> label(n, 0);
  Partitions(n, label, 0, 0, partitions);

  std::set<std::string> seen;
  std::map<std::vector<int>, std::vector<std::vector<int>>> split_cache;
  std::vector<Discrete> pool;
  size_t done = 0;
  for (const auto& partition : partitions) {
    if (options.progress) options.progress(0.6 * done++ / partitions.size());
    if (clock.Expired()) break;
    bool fits = true;
    for (const auto& block : partition) fits = fits && static_cast<int>(block.size()) <= heads;
    if (!fits) continue;
    const int k = static_cast<int>(partition.size());
    for (int idle = -1; idle < (k > 1 ? k : 0); ++idle) {
      std::vector<int> active;
      for (int b = 0; b < k; ++b)
        if (b != idle) active.push_back(b);
      // Ring orders: the first group fixed (rotations are the same ring).
      std::vector<std::vector<int>> orders;
      if (static_cast<int>(active.size()) <= kFullRingOrdersUpTo) {
        std::vector<int> rest(active.begin() + 1, active.end());
        do {
          std::vector<int> o = {active[0]};
          o.insert(o.end(), rest.begin(), rest.end());
          orders.push_back(o);
        } while (std::next_permutation(rest.begin(), rest.end()));
      } else {
        orders.push_back(active);
        orders.emplace_back(active.rbegin(), active.rend());
      }
      // Head splits per block (independent of the order).
      std::vector<std::vector<std::vector<int>>> splits(k);
      for (int b : active) {
        auto it = split_cache.find(partition[b]);
        if (it == split_cache.end())
          it = split_cache.emplace(partition[b], HeadSplits(model, partition[b], kHeadSplitsPerGroup))
                   .first;
        splits[b] = it->second;
      }
      for (const std::vector<int>& order : orders) {
        Structure s;
        for (int b : order) s.groups.push_back(partition[b]);
        if (idle >= 0) s.idle = partition[idle];
        // Head combinations, in mixed-radix order, capped.
        std::vector<size_t> digit(order.size(), 0);
        for (int combo = 0; combo < kHeadCombosPerGrouping; ++combo) {
          std::vector<std::vector<int>> h;
          for (size_t g = 0; g < order.size(); ++g) h.push_back(splits[order[g]][digit[g]]);
          const std::string sig = Signature(cluster, s, h);
          if (seen.insert(sig).second) {
            const std::vector<int64_t> by_rate = LargestRemainder(seq, RateWeights(model, s));
            PlanState st(model, WithHeads(MakeLayout(model, s, by_rate), h));
            pool.push_back({s, h, st.score(), ""});
          }
          size_t pos = 0;
          while (pos < digit.size() && ++digit[pos] == splits[order[pos]].size()) digit[pos++] = 0;
          if (pos == digit.size()) break;
        }
      }
    }
  }
  if (pool.empty()) return Internal("exact search: no grouping fits the head count");
  std::vector<size_t> order(pool.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return Less(pool[a].score, pool[b].score); });

  Layout best_layout;
  Objective best_score;
  bool have = false;
  // When nothing fits before refinement, the stage-1 memory figures rank structures poorly (the
  // descent fits memory by uneven token and head splits): refine the best of every distinct
  // grouping instead, up to kExactRefineInfeasible, from the balanced start only.
  std::vector<size_t> chosen;
  const bool memory_bound = !pool[order[0]].score.feasible;
  if (!memory_bound) {
    chosen.assign(order.begin(), order.begin() + std::min<size_t>(order.size(), kExactRefine));
  } else {
    std::set<std::vector<std::vector<int>>> groupings;
    for (size_t index : order) {
      if (chosen.size() >= static_cast<size_t>(kExactRefineInfeasible)) break;
      std::vector<std::vector<int>> key = pool[index].structure.groups;
      std::sort(key.begin(), key.end());
      key.push_back(pool[index].structure.idle);
      if (groupings.insert(key).second) chosen.push_back(index);
    }
  }
  const size_t refine = chosen.size();
  for (size_t rank = 0; rank < refine; ++rank) {
    if (options.progress) options.progress(0.6 + 0.4 * rank / refine);
    const Discrete& d = pool[chosen[rank]];
    int k = static_cast<int>(d.structure.groups.size());
    std::vector<std::vector<int64_t>> starts;
    const std::vector<int64_t> by_rate = LargestRemainder(seq, RateWeights(model, d.structure));
    starts.push_back(BalanceTokens(model, d.structure, by_rate, 3));
    if (memory_bound) k = 0;  // the balanced start only
    if (k > 0) starts.push_back(by_rate);
    if (k > 0) {
      std::vector<double> sqrt_rates;
      for (double r : RateWeights(model, d.structure)) sqrt_rates.push_back(std::sqrt(r));
      starts.push_back(LargestRemainder(seq, sqrt_rates));
    }
    if (k >= 2 && k <= 3) {  // the sequence grid
      std::vector<int64_t> grid_best;
      Objective grid_score;
      bool any = false;
      for (int a = 0; a <= kGridSteps; ++a)
        for (int b = 0; b <= (k == 3 ? kGridSteps - a : 0); ++b) {
          std::vector<double> w = {double(a), k == 3 ? double(b) : double(kGridSteps - a)};
          if (k == 3) w.push_back(kGridSteps - a - b);
          if (std::accumulate(w.begin(), w.end(), 0.0) <= 0) continue;
          const std::vector<int64_t> t = LargestRemainder(seq, w);
          PlanState st(model, WithHeads(MakeLayout(model, d.structure, t), d.heads));
          if (!any || Less(st.score(), grid_score)) {
            grid_score = st.score();
            grid_best = t;
            any = true;
          }
        }
      if (any) starts.push_back(grid_best);
    }
    for (const std::vector<int64_t>& t : starts) {
      Layout start = ClassSearch(model, WithHeads(MakeLayout(model, d.structure, t), d.heads),
                                 kExactClassEvaluations, clock);
      PlanState st(model, std::move(start));
      Descend(st, kExactDescentTrials, [&] { return clock.Expired(); });
      if (!have || Less(st.score(), best_score)) {
        best_score = st.score();
        best_layout = st.layout();
        have = true;
      }
    }
  }
  // The baselines' sequence splits as further starts (the grid above is coarse; a memory-capped
  // speed-proportional split can sit in a basin the grid starts miss).
  for (const StrategyResult& b : AllBaselines(model)) {
    Layout layout;
    if (!b.applicable || !LayoutFromPlan(b.plan, layout)) continue;
    PlanState st(model, std::move(layout));
    Descend(st, kExactDescentTrials, [&] { return clock.Expired(); });
    if (!have || Less(st.score(), best_score)) {
      best_score = st.score();
      best_layout = st.layout();
      have = true;
    }
  }
  StrategyResult result =
      Score(model, BuildPlan(model, best_layout, "exact", "exhaustive"), "exhaustive");
  result.strategy = "exact";
  if (options.progress) options.progress(1);
  if (!result.cost.feasible) return Infeasible(ExplainInfeasible(model));
  return result;
}

}  // namespace hexiseq
