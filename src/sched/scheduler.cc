#include "sched/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "sched/parallel.h"
#include "sched/plan_state.h"
#include "sched/replica_search.h"
#include "sched/scheduler_internal.h"
#include "sched/topology.h"

namespace hexiseq {
namespace sched_internal {
namespace {

constexpr int kBalanceRounds = 2;          // re-fits of the per-group time model
constexpr double kMemoryCapMargin = 0.98;  // memory-capped allocation aims at 98% of capacity
constexpr int kStructurePasses = 2;        // coordinate passes over per-kind group sizes ...
constexpr int kTwoPassesUpTo = 64;         // ... on clusters of at most this many ranks
constexpr int kPerKindPassesUpTo = 32;  // ... kind by kind on clusters of at most this many kinds
constexpr size_t kInfeasibleSeeds = 4;  // fast infeasible candidates also refined
constexpr double kInfeasibleSeedFraction = 2.0;  // ... when within 2x of memory capacity
constexpr int kClassEvaluations = 120;     // full re-scorings per candidate in ClassSearch ...
constexpr int kClassSearchUpTo = 64;       // ... on clusters of at most this many ranks
constexpr int kWidePoliciesUpTo = 256;     // sqrt-compute allocation up to this many ranks
constexpr int kStructureSearchUpTo = 16;   // rank-level structure search on at most this many ranks
constexpr int kStructureSearchStarts = 3;  // ... from this many of the best distinct structures
constexpr int kStructureSearchRounds = 12;  // ... for at most this many improving steps each
constexpr int kSmallClusterTopK = 8;        // candidates refined on such small clusters
constexpr size_t kCloseSeeds = 4;           // ... plus the memberships closest to fitting
constexpr double kCloseToFitting = 1.25;    // ... within 25% of memory capacity
constexpr int kRescueCandidates = 24;       // ... and more when none of them fits memory
constexpr size_t kOrderSearchStarts = 8;    // ... and the best this many try other ring orders
constexpr int kEveryStructureUpTo = 4;      // on at most this many ranks every structure is a
                                            // candidate and every membership is refined

// Per-token costs at the sequence's average causal density (FLOPs per token).
struct TokenFlops {
  double linear = 0, attention = 0;
};
TokenFlops PerToken(const CostModel& model) {
  const double seq_len = static_cast<double>(model.workload().seq_len);
  return {model.TotalLinearFlops() / seq_len, model.TotalAttentionFlops() / seq_len};
}

// Tokens per second a group can absorb at the average density, given its head split.
double GroupRate(const CostModel& model, const std::vector<int>& ranks,
                 const std::vector<int>& heads) {
  const TokenFlops per_token = PerToken(model);
  double gemm = 0, worst_head_time = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const DeviceSpec& dev = model.cluster().device(ranks[i]);
    gemm += dev.GemmFlops();
    worst_head_time = std::max(worst_head_time, heads[i] / dev.AttentionFlops());
  }
  const double attention_seconds = per_token.attention * worst_head_time / model.model().heads;
  return 1.0 / (per_token.linear / gemm + attention_seconds);
}

}  // namespace

void AppendIdleGroup(const Structure& structure, Layout& layout) {
  if (structure.idle.empty()) return;
  GroupLayout idle_group;
  idle_group.ranks = structure.idle;
  idle_group.tokens.assign(idle_group.ranks.size(), 0);
  idle_group.heads.assign(idle_group.ranks.size(), 0);
  layout.push_back(std::move(idle_group));
}

Layout MakeLayout(const CostModel& model, const Structure& structure,
                  const std::vector<int64_t>& group_tokens) {
  Layout layout;
  for (size_t k = 0; k < structure.groups.size(); ++k) {
    GroupLayout group_layout;
    group_layout.ranks = structure.groups[k];
    const int64_t tokens = group_tokens[k];
    group_layout.front = tokens / 2;
    group_layout.back = tokens - group_layout.front;
    group_layout.tokens = TokensByGemm(model, group_layout.ranks, tokens);
    group_layout.heads = tokens > 0 ? HeadsByAttention(model, group_layout.ranks)
                                    : std::vector<int>(group_layout.ranks.size(), 0);
    layout.push_back(std::move(group_layout));
  }
  AppendIdleGroup(structure, layout);
  return layout;
}

std::vector<double> RateWeights(const CostModel& model, const Structure& structure) {
  std::vector<double> weights;
  for (const auto& ranks : structure.groups)
    weights.push_back(GroupRate(model, ranks, HeadsByAttention(model, ranks)));
  return weights;
}

// Bisection on the target time tau: group k takes min(cap_k, tau / a_k) tokens, where a_k is its
// fitted seconds per token and cap_k its memory-capped maximum; tau is set so the groups take S.
std::vector<int64_t> BalanceTokens(const CostModel& model, const Structure& structure,
                                   std::vector<int64_t> tokens, int rounds,
                                   const PlanState* scored) {
  const int64_t seq = model.workload().seq_len;
  const int num_groups = static_cast<int>(structure.groups.size());
  const double state_bytes = model.ModelStateMemory().total();
  for (int round = 0; round < rounds; ++round) {
    std::optional<PlanState> fresh;
    if (round > 0 || scored == nullptr) fresh.emplace(model, MakeLayout(model, structure, tokens));
    const PlanState& state = fresh ? *fresh : *scored;
    std::vector<double> per_token(num_groups), cap(num_groups);
    bool any = false;
    for (int g = 0; g < num_groups; ++g) {
      const GroupCost& cost = state.group_costs()[g];
      const double seconds = 2 * (cost.local_fwd + cost.ring_fwd) + cost.local_bwd + cost.ring_bwd;
      per_token[g] = tokens[g] > 0 ? seconds / tokens[g] : 0;
      cap[g] = static_cast<double>(seq);
      if (tokens[g] > 0 && cost.worst_memory_rank >= 0) {
        double capacity = 0;
        for (const RankCost& rank_cost : cost.members)
          if (rank_cost.rank == cost.worst_memory_rank) capacity = rank_cost.memory_capacity_bytes;
        const double state_fraction = state_bytes / capacity;
        if (cost.max_memory_fraction > state_fraction)
          cap[g] = std::min(cap[g], tokens[g] * (kMemoryCapMargin - state_fraction) /
                                        (cost.max_memory_fraction - state_fraction));
        cap[g] = std::max(cap[g], 0.0);
      }
      any = any || per_token[g] > 0;
    }
    if (!any) break;
    // Groups without tokens: give them the rate estimate of their weight relative to others.
    const std::vector<double> rates = RateWeights(model, structure);
    double ref_ratio = 0;
    for (int g = 0; g < num_groups; ++g)
      if (per_token[g] > 0) ref_ratio = std::max(ref_ratio, per_token[g] * rates[g]);
    for (int g = 0; g < num_groups; ++g)
      if (per_token[g] <= 0) per_token[g] = ref_ratio / std::max(rates[g], 1e-30);
    auto take = [&](double tau) {
      double sum = 0;
      for (int g = 0; g < num_groups; ++g) sum += std::min(cap[g], tau / per_token[g]);
      return sum;
    };
    const double total_cap = std::accumulate(cap.begin(), cap.end(), 0.0);
    std::vector<double> target(num_groups);
    if (total_cap < seq) {
      for (int g = 0; g < num_groups; ++g) target[g] = cap[g] > 0 ? cap[g] : 1e-9;
    } else {
      double lo = 0, hi = 1;
      while (take(hi) < seq) hi *= 2;
      for (int iter = 0; iter < 100; ++iter) {
        const double mid = 0.5 * (lo + hi);
        (take(mid) < seq ? lo : hi) = mid;
      }
      for (int g = 0; g < num_groups; ++g) target[g] = std::min(cap[g], hi / per_token[g]);
    }
    tokens = LargestRemainder(seq, target);
  }
  return tokens;
}

namespace {

// The class of each active group (its sorted device kinds), into `class_of` (-1: inactive);
// returns the number of classes.
int GroupClasses(const Cluster& cluster, const Layout& layout, const std::vector<int>& active,
                 std::vector<int>& class_of) {
  std::map<std::vector<int>, int> class_of_key;
  class_of.assign(layout.size(), -1);
  for (int g : active) {
    std::vector<int> key;
    for (int rank : layout[g].ranks) key.push_back(cluster.ranks[rank].kind);
    std::sort(key.begin(), key.end());
    auto [it, inserted] = class_of_key.emplace(key, static_cast<int>(class_of_key.size()));
    class_of[g] = it->second;
  }
  return static_cast<int>(class_of_key.size());
}

}  // namespace

// Class-level search: groups with the same make-up (device kinds and size) form a class, and
// the descent of single groups cannot move a class whose groups all tie at the maximum. Here each
// class's share of the sequence (a multiplicative factor on its groups' tokens) and its front
// fraction (asymmetric zigzag: cheap front tokens versus costly back tokens) are searched by a
// pattern search with full re-scoring. Returns the improved layout.
Layout ClassSearch(const CostModel& model, Layout layout, int max_evaluations, const Clock& clock) {
  const int64_t seq = model.workload().seq_len;
  std::vector<int> active;
  for (int g = 0; g < static_cast<int>(layout.size()); ++g)
    if (layout[g].total() > 0) active.push_back(g);
  if (active.size() < 2) return layout;
  std::vector<int> class_of;
  const int classes = GroupClasses(model.cluster(), layout, active, class_of);
  const Layout base = layout;
  auto build = [&](const std::vector<double>& factor, const std::vector<double>& front) {
    std::vector<double> weights;
    for (int g : active) weights.push_back(base[g].total() * factor[class_of[g]]);
    const std::vector<int64_t> totals = LargestRemainder(seq, weights);
    Layout out = base;
    for (size_t i = 0; i < active.size(); ++i) {
      GroupLayout& group_layout = out[active[i]];
      const int64_t group_total = totals[i];
      if (group_total == 0) return Layout{};
      const double front_fraction = front[class_of[active[i]]];
      group_layout.front =
          front_fraction < 0
              ? group_layout.front * group_total / std::max<int64_t>(1, group_layout.total())
              : static_cast<int64_t>(std::llround(group_total * front_fraction));
      group_layout.back = group_total - group_layout.front;
      std::vector<double> member_weights(group_layout.tokens.begin(), group_layout.tokens.end());
      group_layout.tokens = LargestRemainder(group_total, member_weights);
    }
    return out;
  };
  std::vector<double> factor(classes, 1.0), front(classes, -1.0);
  Objective best = PlanState(model, layout).score();
  int evaluations = 0;
  for (double step : {0.2, 0.05, 0.0125, 0.003}) {
    bool improved = true;
    while (improved && evaluations < max_evaluations && !clock.Expired()) {
      improved = false;
      for (int class_index = 0; class_index < classes && classes > 1; ++class_index)
        for (double dir : {1.0, -1.0}) {
          std::vector<double> trial_factor = factor;
          trial_factor[class_index] *= 1 + dir * step;
          Layout trial = build(trial_factor, front);
          if (trial.empty()) continue;
          ++evaluations;
          const Objective score = PlanState(model, trial, &best).score();
          if (Less(score, best)) {
            best = score;
            factor = trial_factor;
            layout = std::move(trial);
            improved = true;
          }
        }
      for (int class_index = 0; class_index < classes; ++class_index)
        for (double dir : {1.0, -1.0}) {
          std::vector<double> trial_front = front;
          if (trial_front[class_index] < 0) {
            for (int g : active)
              if (class_of[g] == class_index) {
                trial_front[class_index] = static_cast<double>(base[g].front) / base[g].total();
                break;
              }
          }
          trial_front[class_index] = std::clamp(trial_front[class_index] + dir * step, 0.0, 1.0);
          Layout trial = build(factor, trial_front);
          if (trial.empty()) continue;
          ++evaluations;
          const Objective score = PlanState(model, trial, &best).score();
          if (Less(score, best)) {
            best = score;
            front = trial_front;
            layout = std::move(trial);
            improved = true;
          }
        }
    }
  }
  return layout;
}

}  // namespace sched_internal

namespace {

using namespace sched_internal;

std::string SizesName(const Structure& structure) {
  std::string out;
  std::map<size_t, int> sizes;  // ordered: deterministic
  for (const auto& group : structure.groups) ++sizes[group.size()];
  for (const auto& [size, count] : sizes) {
    if (!out.empty()) out += ",";
    out += std::to_string(count) + "x" + std::to_string(size);
  }
  if (!structure.idle.empty()) out += " idle=" + std::to_string(structure.idle.size());
  return out;
}

// Group structure from per-kind group sizes: a size below the domain size splits each domain into
// equal parts; above it merges consecutive domains of the kind. size 0: the kind is idle.
Structure FromSizes(const Cluster& cluster, const std::vector<Supernode>& domains,
                    const std::vector<int>& size_by_kind, const std::vector<int>& kind_order) {
  Structure structure;
  for (int kind : kind_order) {
    const int size = size_by_kind[kind];
    std::vector<int> pending;
    for (const Supernode& domain : domains) {
      if (domain.kind != kind) continue;
      if (size == 0) {
        structure.idle.insert(structure.idle.end(), domain.ranks.begin(), domain.ranks.end());
        continue;
      }
      const int domain_size = static_cast<int>(domain.ranks.size());
      if (size <= domain_size) {
        for (int start = 0; start < domain_size; start += size)
          structure.groups.emplace_back(domain.ranks.begin() + start,
                                        domain.ranks.begin() + std::min(domain_size, start + size));
      } else {
        pending.insert(pending.end(), domain.ranks.begin(), domain.ranks.end());
        if (static_cast<int>(pending.size()) >= size) {
          structure.groups.push_back(pending);
          pending.clear();
        }
      }
    }
    if (!pending.empty()) structure.groups.push_back(pending);
  }
  (void)cluster;
  return structure;
}

struct Scored {
  std::string name;
  Layout layout;
  Objective score;
  double seconds = 0;
  double max_memory_fraction = 0;
};

class CandidatePool {
 public:
  explicit CandidatePool(const CostModel& model) : model_(model) {}

  // Scores the structure under each sequence-allocation policy; returns the best score.
  Objective Add(const Structure& structure, const std::string& name) {
    Objective best;
    if (structure.groups.empty()) return best;
    for (const Structure& seen : seen_)
      if (seen.groups == structure.groups && seen.idle == structure.idle)
        return seen_scores_[&seen - seen_.data()];
    const int64_t seq = model_.workload().seq_len;
    const std::vector<double> rates = RateWeights(model_, structure);
    std::vector<double> sqrt_rates;
    for (double r : rates) sqrt_rates.push_back(std::sqrt(r));
    const std::vector<int64_t> by_rate = LargestRemainder(seq, rates);
    // The compute-proportional state is also the balancing's first fit.
    Layout compute_layout = MakeLayout(model_, structure, by_rate);
    const PlanState compute_state(model_, compute_layout);
    best = Record(name + " seq=compute", std::move(compute_layout), compute_state);
    std::vector<std::pair<std::string, std::vector<int64_t>>> policies = {
        {"balanced", BalanceTokens(model_, structure, by_rate, kBalanceRounds, &compute_state)},
    };
    if (model_.cluster().num_ranks() <= kWidePoliciesUpTo)
      policies.push_back({"sqrt-compute", LargestRemainder(seq, sqrt_rates)});
    for (const auto& [policy, tokens] : policies) {
      Layout layout = MakeLayout(model_, structure, tokens);
      Objective s = Push(name + " seq=" + policy, std::move(layout));
      if (Less(s, best)) best = s;
    }
    seen_.push_back(structure);
    seen_scores_.push_back(best);
    return best;
  }

  Objective Push(const std::string& name, Layout layout) {
    const PlanState state(model_, layout);
    return Record(name, std::move(layout), state);
  }
  // Adds `layout`, scored as `state`.
  Objective Record(const std::string& name, Layout layout, const PlanState& state) {
    double frac = 0;
    for (const GroupCost& c : state.group_costs()) frac = std::max(frac, c.max_memory_fraction);
    items_.push_back({name, std::move(layout), state.score(), state.IterationSeconds(), frac});
    return state.score();
  }

  // The best `count` candidates, best first (stable on ties): first the best of each distinct
  // membership (MembershipKey), then further distinct layouts.
  std::vector<const Scored*> Top(int count) const {
    std::vector<const Scored*> order;
    for (const Scored& s : items_) order.push_back(&s);
    std::stable_sort(order.begin(), order.end(),
                     [](const Scored* a, const Scored* b) { return Less(a->score, b->score); });
    std::vector<const Scored*> out;
    std::vector<std::vector<std::vector<int>>> structures;
    for (const Scored* s : order) {
      if (static_cast<int>(out.size()) >= count) break;
      std::vector<std::vector<int>> key = MembershipKey(s->layout);
      if (std::find(structures.begin(), structures.end(), key) != structures.end()) continue;
      structures.push_back(std::move(key));
      out.push_back(s);
    }
    for (const Scored* s : order) {
      if (static_cast<int>(out.size()) >= count) break;
      bool dup = false;
      for (const Scored* o : out) dup = dup || o == s || o->layout == s->layout;
      if (!dup) out.push_back(s);
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Scored* a, const Scored* b) { return Less(a->score, b->score); });
    return out;
  }
  // The number of distinct memberships among the candidates.
  int NumMemberships() const {
    std::set<std::vector<std::vector<int>>> keys;
    for (const Scored& scored : items_) keys.insert(MembershipKey(scored.layout));
    return static_cast<int>(keys.size());
  }

  // Which ranks are grouped together, ignoring ring order and member order (the idle set last).
  static std::vector<std::vector<int>> MembershipKey(const Layout& layout) {
    std::vector<std::vector<int>> key;
    std::vector<int> idle;
    for (const GroupLayout& g : layout) {
      std::vector<int> ranks = g.ranks;
      std::sort(ranks.begin(), ranks.end());
      if (g.total() > 0)
        key.push_back(std::move(ranks));
      else
        idle.insert(idle.end(), ranks.begin(), ranks.end());
    }
    std::sort(key.begin(), key.end());
    std::sort(idle.begin(), idle.end());
    key.push_back(std::move(idle));
    return key;
  }
  // The group structure a scored layout came from (members in order, the idle group last).
  static Structure StructureOf(const Layout& layout) {
    Structure s;
    for (const GroupLayout& g : layout) {
      if (g.total() > 0)
        s.groups.push_back(g.ranks);
      else
        s.idle.insert(s.idle.end(), g.ranks.begin(), g.ranks.end());
    }
    std::sort(s.idle.begin(), s.idle.end());
    return s;
  }
  const std::vector<Scored>& items() const { return items_; }

 private:
  const CostModel& model_;
  std::vector<Scored> items_;
  std::vector<Structure> seen_;
  std::vector<Objective> seen_scores_;
};

std::string RanksName(const Structure& structure) {
  auto list = [](const std::vector<int>& ranks) {
    std::string text = "[";
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (i > 0) text += ",";
      text += std::to_string(ranks[i]);
    }
    return text + "]";
  };
  std::string out = "groups=";
  for (const auto& group : structure.groups) out += list(group);
  if (!structure.idle.empty()) out += " idle=" + list(structure.idle);
  return out;
}

// The structures one membership change away: a rank moved to another group, to a group of its
// own (at the end of the ring) or to idle; an idle rank activated; two ranks of different devices
// or nodes swapped between groups; two groups merged; two groups swapped in ring order. Members
// stay sorted by rank; of interchangeable ranks (same kind, same node) only the first moves.
std::vector<Structure> Neighbours(const Cluster& cluster, const Structure& structure,
                                  int max_size) {
  const int num_groups = static_cast<int>(structure.groups.size());
  // Slot num_groups is the idle set.
  auto members = [&](int slot) -> const std::vector<int>& {
    return slot < num_groups ? structure.groups[slot] : structure.idle;
  };
  auto same = [&](int a, int b) {
    return cluster.ranks[a].kind == cluster.ranks[b].kind &&
           cluster.ranks[a].node == cluster.ranks[b].node;
  };
  auto movers = [&](int slot) {
    std::vector<int> out;
    for (int rank : members(slot)) {
      bool twin = false;
      for (int other : out) twin = twin || same(rank, other);
      if (!twin) out.push_back(rank);
    }
    return out;
  };
  // Builds a structure from per-slot member lists (slot num_groups idle, slot num_groups + 1 a new
  // group).
  auto make = [&](std::vector<std::vector<int>> slots) {
    Structure out;
    for (int slot = 0; slot < static_cast<int>(slots.size()); ++slot) {
      std::sort(slots[slot].begin(), slots[slot].end());
      if (slot == num_groups)
        out.idle = slots[slot];
      else if (!slots[slot].empty())
        out.groups.push_back(slots[slot]);
    }
    return out;
  };
  std::vector<std::vector<int>> base(structure.groups.begin(), structure.groups.end());
  base.push_back(structure.idle);
  base.emplace_back();  // a new group
  std::vector<Structure> out;
  auto push = [&](Structure candidate) {
    if (candidate.groups.empty()) return;
    for (const auto& g : candidate.groups)
      if (static_cast<int>(g.size()) > max_size) return;
    out.push_back(std::move(candidate));
  };
  for (int from = 0; from <= num_groups; ++from)
    for (int rank : movers(from))
      for (int to = 0; to <= num_groups + 1; ++to) {
        if (to == from) continue;
        if (to == num_groups + 1 && from < num_groups && structure.groups[from].size() == 1)
          continue;
        std::vector<std::vector<int>> slots = base;
        std::erase(slots[from], rank);
        slots[to].push_back(rank);
        push(make(std::move(slots)));
      }
  for (int a = 0; a <= num_groups; ++a)
    for (int b = a + 1; b <= num_groups; ++b)
      for (int x : movers(a))
        for (int y : movers(b)) {
          if (same(x, y)) continue;
          std::vector<std::vector<int>> slots = base;
          std::erase(slots[a], x);
          std::erase(slots[b], y);
          slots[a].push_back(y);
          slots[b].push_back(x);
          push(make(std::move(slots)));
        }
  for (int a = 0; a < num_groups; ++a)
    for (int b = a + 1; b < num_groups; ++b) {
      std::vector<std::vector<int>> slots = base;
      slots[a].insert(slots[a].end(), slots[b].begin(), slots[b].end());
      slots[b].clear();
      push(make(std::move(slots)));
      if (num_groups >= 3) {
        Structure candidate = structure;
        std::swap(candidate.groups[a], candidate.groups[b]);
        push(std::move(candidate));
      }
    }
  return out;
}

// Groups of complementary speed: ranks, fastest first, each to the group with the least
// aggregate speed so far that has room (longest-processing-time rule), for `num_groups` groups;
// groups mix device types. Members sorted by rank.
Structure BalancedGroups(const Cluster& cluster, int num_groups, int max_size) {
  std::vector<int> order(cluster.num_ranks());
  std::iota(order.begin(), order.end(), 0);
  auto speed = [&](int rank) {
    return cluster.device(rank).GemmFlops() + cluster.device(rank).AttentionFlops();
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return speed(a) > speed(b); });
  Structure structure;
  structure.groups.resize(num_groups);
  std::vector<double> load(num_groups, 0);
  for (int rank : order) {
    int target = -1;
    for (int g = 0; g < num_groups; ++g)
      if (static_cast<int>(structure.groups[g].size()) < max_size &&
          (target < 0 || load[g] < load[target]))
        target = g;
    if (target < 0) return Structure{};
    structure.groups[target].push_back(rank);
    load[target] += speed(rank);
  }
  for (auto& g : structure.groups) std::sort(g.begin(), g.end());
  return structure;
}

// Steepest-descent over group structures from `start`: every neighbour is scored by the pool
// (sequence allocation policies, no refinement); the best improving one is taken.
void StructureSearch(const Cluster& cluster, CandidatePool& pool, Structure start, int max_size,
                     int rounds, const Clock& clock) {
  Objective current = pool.Add(start, RanksName(start));
  for (int round = 0; round < rounds && !clock.Expired(); ++round) {
    Objective best = current;
    Structure best_structure;
    bool found = false;
    for (Structure& candidate : Neighbours(cluster, start, max_size)) {
      const Objective score = pool.Add(candidate, RanksName(candidate));
      if (Less(score, best)) {
        best = score;
        best_structure = std::move(candidate);
        found = true;
      }
      if (clock.Expired()) break;
    }
    if (!found) break;
    start = std::move(best_structure);
    current = best;
  }
}

// Divisor-like group sizes for a domain of `domain_size` ranks: n, n/2, ... 1, and merges 2n, 4n,
// 8n (n = domain_size; at most max_size and the kind's total).
std::vector<int> SizeOptions(int domain_size, int max_size, int kind_total) {
  std::vector<int> out;
  for (int size = domain_size; size >= 1; size /= 2) {
    if (size <= max_size && (domain_size % size == 0)) out.push_back(size);
    if (size == 1) break;
  }
  for (int size = 2 * domain_size;
       size <= std::min(max_size, kind_total) && size <= 8 * domain_size; size *= 2)
    out.push_back(size);
  if (out.empty()) out.push_back(std::min(domain_size, max_size));
  return out;
}

// Devices alike in everything but their links.
bool SameCompute(const DeviceSpec& a, const DeviceSpec& b) {
  return a.name == b.name && a.peak_flops == b.peak_flops && a.memory_bytes == b.memory_bytes &&
         a.hbm_bytes_per_second == b.hbm_bytes_per_second &&
         a.gemm_efficiency == b.gemm_efficiency && a.attention_efficiency == b.attention_efficiency;
}

int64_t AutoTrials(int num_ranks, int num_groups) {
  // Scaled so that refinement stays within the planning-time goals (bench/sched).
  if (num_ranks <= 16) return 20000;
  if (num_ranks <= 64) return 4000;
  if (num_ranks <= 256) return 500;
  return std::max<int64_t>(1000, 2 * num_groups);
}

// One run of the scheduler: its phases in order, sharing the candidate pool and the refined
// plans (RunScheduler is the driver).
class SchedulerRun {
 public:
  SchedulerRun(const CostModel& model, const ScheduleOptions& options, bool quick, bool rank_search)
      : model_(model),
        options_(options),
        cluster_(model.cluster()),
        clock_(options.deadline),
        quick_(quick),
        small_(rank_search && model.cluster().num_ranks() <= kStructureSearchUpTo),
        tiny_(rank_search && model.cluster().num_ranks() <= kEveryStructureUpTo),
        heads_(model.model().heads),
        pool_(model) {}

  void Report(double fraction) const {
    if (options_.progress) options_.progress(std::min(1.0, fraction));
  }

  // Baselines: seeds of the pool and the floor the result must beat.
  void ScoreBaselines(const std::vector<StrategyResult>* scored) {
    baselines_ = scored ? *scored : AllBaselines(model_.problem(), clock_, options_.threads);
    if (!scored && options_.scored_baselines) *options_.scored_baselines = baselines_;
    if (!clock_.Expired()) baselines_.push_back(ProportionalPlan(model_));
  }

  // Group-level candidates: per-kind group sizes by coordinate passes, other ring orders,
  // merged domains, one group of all, the baselines' layouts, and on small clusters the
  // rank-level structure search.
  void GroupCandidates() {
    Topology();
    const std::vector<int> sizes = SizePasses();
    OrdersAndMerges(sizes);
    SeedBaselines();
    if (!quick_ && small_ && !clock_.Expired()) RankLevelSearch();
    Report(0.45);
  }

  // The candidates to refine: the best K, fast infeasible ones, and on small clusters the
  // memberships closest to fitting.
  void ChooseTop() {
    // Small clusters refine more distinct structures (refinement is cheap there).
    const int top_k = std::max(1, quick_   ? 1
                                  : tiny_  ? std::max(options_.top_k, pool_.NumMemberships())
                                  : small_ ? std::max(options_.top_k, kSmallClusterTopK)
                                           : options_.top_k);
    top_ = pool_.Top(top_k);
    if (!quick_) AddUnfitSeeds();
    if (clock_.Expired()) top_.resize(1);  // past the deadline only the best is refined
    int num_groups = 0;
    for (const Scored* scored : top_) num_groups = std::max<int>(num_groups, scored->layout.size());
    trials_ = quick_ ? 0
                     : (options_.max_trials > 0 ? options_.max_trials
                                                : AutoTrials(cluster_.num_ranks(), num_groups));
  }

  void RefineTop() {
    refined_.assign(top_.size(), Layout{});
    refined_score_.assign(top_.size(), Objective{});
    refined_seconds_.assign(top_.size(), 0);
    if (options_.threads <= 1) {
      for (size_t i = 0; i < top_.size(); ++i) {
        Refine(i);
        Report(0.45 + 0.5 * (i + 1) / top_.size());
      }
    } else {
      ParallelFor(options_.threads, top_.size(), [&](size_t i) { Refine(i); });
      Report(0.95);
    }
    if (!quick_ && small_) {
      RescueMemoryBound();
      OtherRingOrders();
    }
  }

  // The best candidate before refinement, scored in full (top_ is not empty after ChooseTop).
  StrategyResult BestUnrefined() const {
    const Scored& best = *top_.front();
    return Score(model_, BuildPlan(model_, best.layout, "hexiseq", best.name), best.name);
  }

  // The fastest pool candidate that does not fit (infinity when all fit).
  double FastestUnfitSeconds() const {
    double fastest = std::numeric_limits<double>::infinity();
    for (const Scored& scored : pool_.items())
      if (!scored.score.feasible) fastest = std::min(fastest, scored.seconds);
    return fastest;
  }

  // Choose() without refinement: every retained candidate stands as it was scored.
  void KeepUnrefined() {
    refined_.clear();
    refined_score_.clear();
    for (const Scored* scored : top_) {
      refined_.push_back(scored->layout);
      refined_score_.push_back(scored->score);
    }
    refined_seconds_.assign(top_.size(), 0);  // the candidate table shows none refined
    descended_ = false;
  }

  // The best refined plan, re-scored in full, against every baseline.
  SearchOutcome Choose() const {
    SearchOutcome out;
    bool have = false;
    for (size_t i = 0; i < top_.size(); ++i) {
      const std::string name = top_[i]->name + (descended_ ? " refined" : "");
      StrategyResult result = Score(model_, BuildPlan(model_, refined_[i], "hexiseq", name), name);
      if (!have || Better(result, out.best)) {
        out.best = std::move(result);
        have = true;
      }
    }
    if (have && out.best.feasible()) out.best_all_ranks = out.best;
    for (const StrategyResult& baseline : baselines_) {
      if (!baseline.applicable) continue;
      if (baseline.feasible() && baseline.plan.left_out.empty() &&
          (!out.best_all_ranks || Better(baseline, *out.best_all_ranks)))
        out.best_all_ranks = baseline;
      if (!have || Better(baseline, out.best)) {
        out.best = AsSearchResult(baseline, "hexiseq");
        have = true;
      }
    }
    out.best.strategy = "hexiseq";
    out.best.plan.strategy = "hexiseq";
    out.best.plan.config = out.best.config;
    out.best.applicable = true;
    return out;
  }

  // Every candidate scored, refined ones with their refined time, and the baselines, fastest
  // feasible first (ScheduleOptions::candidates).
  void RecordCandidates(std::vector<CandidateRecord>& table) const {
    table.clear();
    for (const Scored& scored : pool_.items())
      table.push_back(
          {scored.name, scored.seconds, 0, scored.score.feasible, scored.max_memory_fraction});
    for (size_t i = 0; i < top_.size(); ++i)
      for (CandidateRecord& record : table)
        if (record.name == top_[i]->name) record.refined_seconds = refined_seconds_[i];
    for (const StrategyResult& baseline : baselines_)
      if (baseline.applicable)
        table.push_back({"baseline " + baseline.strategy + " " + baseline.config,
                         baseline.cost.iteration_seconds, 0, baseline.cost.feasible,
                         baseline.cost.max_memory_fraction});
    auto seconds_of = [](const CandidateRecord& record) {
      return record.refined_seconds > 0 ? record.refined_seconds : record.iteration_seconds;
    };
    std::stable_sort(table.begin(), table.end(),
                     [&](const CandidateRecord& a, const CandidateRecord& b) {
                       if (a.feasible != b.feasible) return a.feasible;
                       return seconds_of(a) < seconds_of(b);
                     });
  }

 private:
  static std::string NameOf(const Structure& structure) { return "groups=" + SizesName(structure); }

  void Topology() {
    domains_ = PartitionTopology(cluster_);
    const int num_kinds = static_cast<int>(cluster_.kinds.size());
    kind_order_.resize(num_kinds);
    std::iota(kind_order_.begin(), kind_order_.end(), 0);
    domain_size_.assign(num_kinds, 1);
    kind_total_.assign(num_kinds, 0);
    for (const Supernode& domain : domains_) {
      domain_size_[domain.kind] =
          std::max(domain_size_[domain.kind], static_cast<int>(domain.ranks.size()));
      kind_total_[domain.kind] += static_cast<int>(domain.ranks.size());
    }
    for (int kind = 0; kind < num_kinds; ++kind)
      if (kind_total_[kind] > 0) present_.push_back(kind);
  }

  // Coordinate passes over the per-kind group sizes (0: the kind idle); returns the best sizes.
  // On clusters of many distinct kinds a pass moves a whole sizing class at once (SizingClasses),
  // so that its cost grows with the device types, not with the kinds.
  std::vector<int> SizePasses() {
    std::vector<int> sizes(cluster_.kinds.size(), 0);
    for (int kind : present_) sizes[kind] = std::min(domain_size_[kind], heads_);
    Structure current = FromSizes(cluster_, domains_, sizes, kind_order_);
    Objective current_score = pool_.Add(current, NameOf(current));
    const int passes = quick_ || cluster_.num_ranks() > kTwoPassesUpTo ? 1 : kStructurePasses;
    const std::vector<std::vector<int>> classes = SizingClasses();
    for (int pass = 0; pass < passes; ++pass) {
      for (const std::vector<int>& members : classes) {
        const int first = members.front();
        std::vector<int> size_options =
            SizeOptions(domain_size_[first], heads_, kind_total_[first]);
        if (classes.size() > 1) size_options.push_back(0);  // the class idle
        for (int option : size_options) {
          if (option == sizes[first]) continue;
          std::vector<int> trial = sizes;
          for (int kind : members) trial[kind] = option;
          if (std::all_of(present_.begin(), present_.end(),
                          [&](int other) { return trial[other] == 0; }))
            continue;
          Structure structure = FromSizes(cluster_, domains_, trial, kind_order_);
          const Objective score = pool_.Add(structure, NameOf(structure));
          if (Less(score, current_score)) {
            current_score = score;
            sizes = trial;
          }
          if (clock_.Expired()) break;
        }
      }
      Report(0.1 + 0.3 * (pass + 1) / passes);
    }
    return sizes;
  }

  // The kinds the size passes move together: each present kind alone on clusters of at most
  // kPerKindPassesUpTo kinds; beyond, the kinds of one device type with the same domain size and
  // the same number of ranks (they differ only in their links), in order of first appearance.
  std::vector<std::vector<int>> SizingClasses() const {
    std::vector<std::vector<int>> classes;
    const bool per_kind = static_cast<int>(present_.size()) <= kPerKindPassesUpTo;
    for (int kind : present_) {
      auto same = [&](const std::vector<int>& members) {
        const int other = members.front();
        return SameCompute(cluster_.kinds[other].device, cluster_.kinds[kind].device) &&
               domain_size_[other] == domain_size_[kind] && kind_total_[other] == kind_total_[kind];
      };
      auto found = per_kind ? classes.end() : std::find_if(classes.begin(), classes.end(), same);
      if (found == classes.end())
        classes.push_back({kind});
      else
        found->push_back(kind);
    }
    return classes;
  }

  // Ring orders (kinds by NIC bandwidth, fast links next to each other, then reversed), merged
  // domains across kinds (consecutive domains in blocks of 2 and 4) and one group of all.
  void OrdersAndMerges(const std::vector<int>& sizes) {
    if (!clock_.Expired()) {
      std::vector<int> by_nic = kind_order_;
      std::stable_sort(by_nic.begin(), by_nic.end(), [&](int a, int b) {
        return cluster_.kinds[a].nic_bytes_per_second > cluster_.kinds[b].nic_bytes_per_second;
      });
      Structure structure = FromSizes(cluster_, domains_, sizes, by_nic);
      pool_.Add(structure, NameOf(structure) + " order=nic");
      std::vector<int> reversed(kind_order_.rbegin(), kind_order_.rend());
      Structure reversed_structure = FromSizes(cluster_, domains_, sizes, reversed);
      pool_.Add(reversed_structure, NameOf(reversed_structure) + " order=reversed");
    }
    for (int block : {2, 4}) {
      if (static_cast<int>(domains_.size()) < block || clock_.Expired()) break;
      Structure structure;
      for (size_t start = 0; start < domains_.size(); start += block) {
        std::vector<int> ranks;
        for (size_t domain = start; domain < std::min(domains_.size(), start + block); ++domain)
          ranks.insert(ranks.end(), domains_[domain].ranks.begin(), domains_[domain].ranks.end());
        structure.groups.push_back(ranks);
      }
      if (std::all_of(structure.groups.begin(), structure.groups.end(),
                      [&](const auto& group) { return static_cast<int>(group.size()) <= heads_; }))
        pool_.Add(structure, "groups=merged" + std::to_string(block) + " " + SizesName(structure));
    }
    if (cluster_.num_ranks() <= heads_ && !clock_.Expired()) {
      Structure all;
      all.groups.emplace_back();
      for (int rank = 0; rank < cluster_.num_ranks(); ++rank) all.groups[0].push_back(rank);
      pool_.Add(all, "groups=all");
    }
  }

  // Baselines that have the layout form join the pool as seeds.
  void SeedBaselines() {
    for (const StrategyResult& baseline : baselines_) {
      if (!baseline.applicable || clock_.Expired()) continue;
      Layout layout;
      if (LayoutFromPlan(baseline.plan, layout))
        pool_.Push("baseline " + baseline.strategy +
                       (baseline.config.empty() ? "" : " " + baseline.config),
                   std::move(layout));
    }
  }

  // Small clusters, from the best few distinct structures: groups that mix device types, ranks
  // left idle one at a time, uneven group sizes; tiny ones first get every structure.
  void RankLevelSearch() {
    if (tiny_)
      for (const Structure& structure : ExactStructures(cluster_))
        pool_.Add(structure, "every-structure " + RanksName(structure));
    for (int num_groups = 2; num_groups < cluster_.num_ranks(); ++num_groups) {
      Structure structure = BalancedGroups(cluster_, num_groups, heads_);
      if (!structure.groups.empty()) pool_.Add(structure, "balanced-mix " + RanksName(structure));
    }
    std::vector<Structure> starts;
    for (const Scored* scored : pool_.Top(kStructureSearchStarts))
      starts.push_back(CandidatePool::StructureOf(scored->layout));
    for (Structure& start : starts)
      StructureSearch(cluster_, pool_, std::move(start), heads_, kStructureSearchRounds, clock_);
  }

  // Adds `scored` to the refined set unless its membership is already there.
  bool AddDistinct(const Scored* scored, std::vector<std::vector<std::vector<int>>>& memberships) {
    std::vector<std::vector<int>> key = CandidatePool::MembershipKey(scored->layout);
    if (std::find(memberships.begin(), memberships.end(), key) != memberships.end()) return false;
    memberships.push_back(std::move(key));
    if (std::find(top_.begin(), top_.end(), scored) == top_.end()) top_.push_back(scored);
    return true;
  }

  // Infeasible candidates that are fast may become feasible under the descent (it lowers memory
  // first): the fastest few, one per membership. On small clusters also the memberships closest
  // to fitting: the descent's uneven token and head splits often make them fit at little cost.
  void AddUnfitSeeds() {
    std::vector<const Scored*> fast;
    for (const Scored& scored : pool_.items())
      if (!scored.score.feasible && scored.max_memory_fraction < kInfeasibleSeedFraction)
        fast.push_back(&scored);
    std::stable_sort(fast.begin(), fast.end(),
                     [](const Scored* a, const Scored* b) { return a->seconds < b->seconds; });
    std::vector<std::vector<std::vector<int>>> memberships;
    const size_t seeds = small_ ? 2 * kInfeasibleSeeds : kInfeasibleSeeds;
    for (const Scored* scored : fast) {
      if (memberships.size() >= seeds) break;
      AddDistinct(scored, memberships);
    }
    if (!small_) return;
    std::vector<const Scored*> close;
    for (const Scored& scored : pool_.items())
      if (!scored.score.feasible && scored.max_memory_fraction < kCloseToFitting)
        close.push_back(&scored);
    std::stable_sort(close.begin(), close.end(), [](const Scored* a, const Scored* b) {
      return a->max_memory_fraction < b->max_memory_fraction;
    });
    size_t added = 0;
    for (const Scored* scored : close) {
      if (added >= kCloseSeeds) break;
      if (AddDistinct(scored, memberships)) ++added;
    }
  }

  void Refine(size_t index) {
    Layout start = top_[index]->layout;
    if (!quick_ && cluster_.num_ranks() <= kClassSearchUpTo)
      start = ClassSearch(model_, std::move(start), kClassEvaluations, clock_);
    PlanState state(model_, start);
    if (trials_ > 0) Descend(state, trials_, [&] { return clock_.Expired(); });
    refined_[index] = state.layout();
    refined_score_[index] = state.score();
    refined_seconds_[index] = state.IterationSeconds();
  }

  // When no refined candidate fits, refine more memberships, closest to fitting first (the
  // descent lowers memory by uneven token and head splits that the group-level scores miss).
  void RescueMemoryBound() {
    if (std::any_of(refined_score_.begin(), refined_score_.end(),
                    [](const Objective& score) { return score.feasible; }))
      return;
    for (const Scored* scored : pool_.Top(kRescueCandidates)) {
      if (std::find(top_.begin(), top_.end(), scored) != top_.end()) continue;
      if (scored->max_memory_fraction >= kInfeasibleSeedFraction || clock_.Expired()) continue;
      top_.push_back(scored);
      refined_.emplace_back();
      refined_score_.emplace_back();
      refined_seconds_.push_back(0);
      Refine(top_.size() - 1);
    }
  }

  // Other ring orders of the best few refined plans.
  void OtherRingOrders() {
    std::vector<size_t> by_score(top_.size());
    std::iota(by_score.begin(), by_score.end(), size_t{0});
    std::stable_sort(by_score.begin(), by_score.end(), [&](size_t a, size_t b) {
      return Less(refined_score_[a], refined_score_[b]);
    });
    for (size_t rank = 0; rank < std::min(kOrderSearchStarts, by_score.size()); ++rank) {
      const size_t index = by_score[rank];
      PlanState state(model_,
                      OrderSearch(model_, refined_[index], kClassEvaluations, trials_, clock_));
      refined_[index] = state.layout();
      refined_score_[index] = state.score();
      refined_seconds_[index] = state.IterationSeconds();
    }
  }

  const CostModel& model_;
  const ScheduleOptions& options_;
  const Cluster& cluster_;
  const Clock& clock_;
  const bool quick_, small_, tiny_;
  const int heads_;
  std::vector<StrategyResult> baselines_;
  std::vector<Supernode> domains_;
  std::vector<int> kind_order_, domain_size_, kind_total_, present_;
  CandidatePool pool_;
  std::vector<const Scored*> top_;
  int64_t trials_ = 0;
  std::vector<Layout> refined_;
  std::vector<Objective> refined_score_;
  std::vector<double> refined_seconds_;
  bool descended_ = true;  // false after KeepUnrefined
};

}  // namespace

namespace sched_internal {

SearchOutcome RunScheduler(const CostModel& model, const ScheduleOptions& options, bool quick,
                           bool rank_search, const std::vector<StrategyResult>* scored_baselines) {
  SchedulerRun run(model, options, quick, rank_search);
  run.Report(0);
  run.ScoreBaselines(scored_baselines);
  run.Report(0.05);
  run.GroupCandidates();
  run.ChooseTop();
  run.RefineTop();
  SearchOutcome out = run.Choose();
  if (options.candidates) run.RecordCandidates(*options.candidates);
  run.Report(1);
  return out;
}

}  // namespace sched_internal

Result<StrategyResult> Schedule(const Problem& problem, const ScheduleOptions& options) {
  return sched_internal::ScheduleWithBaselines(problem, options, nullptr);
}

namespace sched_internal {

Result<StrategyResult> ScheduleWithBaselines(const Problem& problem, const ScheduleOptions& options,
                                             const std::vector<StrategyResult>* baselines) {
  const CostModel model(problem);
  if (options.top_k < 1)
    return InvalidArgument("scheduler: top_k = " + std::to_string(options.top_k) +
                           ": must be >= 1");
  if (options.threads < 1)
    return InvalidArgument("--threads = " + std::to_string(options.threads) + ": must be >= 1");
  // The replica search runs beside the one-replica search's candidates when threads allow.
  // Beyond the small clusters the one-replica plan is then refined only when WorthRefining.
  ReplicaOutcome replicas;
  const auto search_replicas = [&] { replicas = SearchReplicas(model, options, options.deadline); };
  std::thread helper;
  if (options.threads > 1) {
    PrepareHeapsForThreads();
    helper = std::thread(search_replicas);
  }
  SchedulerRun run(model, options, false, true);
  run.Report(0);
  run.ScoreBaselines(baselines);
  run.Report(0.05);
  run.GroupCandidates();
  run.ChooseTop();
  if (helper.joinable())
    helper.join();
  else
    search_replicas();
  if (model.cluster().num_ranks() <= kStructureSearchUpTo ||
      WorthRefining(replicas, run.BestUnrefined()))
    run.RefineTop();
  else
    run.KeepUnrefined();
  SearchOutcome out = run.Choose();
  if (options.candidates) run.RecordCandidates(*options.candidates);
  run.Report(1);
  out.best = ChooseWithReplicas(out, replicas);
  out.best.fastest_unfit_seconds =
      std::min(run.FastestUnfitSeconds(), replicas.fastest_unfit_seconds);
  if (!out.best.cost.feasible) {
    if (!options.explain_infeasible)
      return Infeasible("infeasible: " + out.best.cost.infeasible_reason);
    return Infeasible(ExplainInfeasible(problem, options.deadline));
  }
  return out.best;
}

}  // namespace sched_internal

}  // namespace hexiseq
