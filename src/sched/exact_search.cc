// The exact search's one-replica domain (strategy "exact"; exact_training.cc adds replicas,
// left-out ranks and the batch split on top): the optimum of the cost model over a stated domain,
// found by exhaustive enumeration with sound pruning.
//
// The domain (kExactMaxRanks, kExactGroupSteps, kExactMemberSteps in scheduler.h; tests may pass a
// coarser ExactGrid):
//  - every set partition of the ranks into groups, optionally with one block idle (last);
//  - every order of the active groups (the order is both the ring order and the zigzag placement,
//    so neither rotations nor reflections are symmetries of the cost and all orders are tried);
//  - every member order inside each group (it decides the KV-head primaries and the dK/dV peer);
//  - every head split at whole-head granularity: member i holds a consecutive block of h_i >= 0
//    query heads in member order (with every member order, every contiguous assignment);
//  - sequence: S in 2 x kExactGroupSteps chunks; active group k takes c_k >= 1 chunks from the
//    front and c_k from the back (the mirrored zigzag of the scheduler), sum c_k = steps;
//  - member tokens: multiples of 1/kExactMemberSteps of the group's tokens (>= 0).
// Largest-remainder rounding where S is not a multiple of the steps.
//
// Pruning, all exact (tests/sched/exact_search_test.cc checks the result against a brute force
// and the cost-model properties the bounds rest on):
//  - symmetry: ranks on the same node are identical (same device, same links), so structures that
//    map onto the same sequence of node ids are scored once;
//  - a compute bound: no plan is faster than its busiest rank's compute (busy time >= linear +
//    attention seconds of every rank); for fixed group ranges a rank's linear seconds are
//    proportional to its tokens and its attention seconds to its heads, with coefficients taken
//    from the cost model on a probe plan. Choices whose bound is not below the best plan found so
//    far (plus kRunnerUpMargin, to keep runners-up) are skipped, once a feasible plan is known;
//  - a memory bound: a rank's memory is model state + a part growing with its tokens + a part
//    growing with its heads and KV heads, probed the same way; a choice that cannot fit is
//    skipped.
// The objective is the replica's busy time (the iteration without the exposed gradient sync): the
// sync depends only on the participants (every rank of the cluster here, idle ones included) and
// never falls when the busy time grows, so the busy-time optimum is also the iteration optimum,
// and it is what a replica of a larger plan needs (exact_training.cc). The optimum and the best
// point of up to kRunnerUps other (structure, head split) pairs within kRunnerUpMargin of it are
// refinement starts for exact_training.cc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "sched/scheduler.h"
#include "sched/scheduler_internal.h"

namespace hexiseq {
namespace {

using namespace sched_internal;

// A bound within this relative margin of the incumbent still prunes (floating-point slack of
// the proportional coefficients; far below any difference the benches report).
constexpr double kBoundSlack = 1e-9;
// Runners-up: the best point of each other (structure, head split) within this fraction of the
// optimum is kept (the bounds prune only above it), and the best kRunnerUps of them are refined.
constexpr double kRunnerUpMargin = 0.03;
constexpr int kRunnerUps = 8;

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

// Every composition of `total` into `parts` non-negative (or, with `min_part` 1, positive) parts.
std::vector<std::vector<int>> Compositions(int total, int parts, int min_part) {
  std::vector<std::vector<int>> out;
  std::vector<int> current(parts, 0);
  auto recurse = [&](auto&& self, int index, int left) -> void {
    if (index == parts - 1) {
      if (left < min_part) return;
      current[index] = left;
      out.push_back(current);
      return;
    }
    for (int v = min_part; v <= left - min_part * (parts - 1 - index); ++v) {
      current[index] = v;
      self(self, index + 1, left - v);
    }
  };
  if (parts > 0) recurse(recurse, 0, total);
  return out;
}

// The orbit key of a structure under swapping ranks of the same node: node ids in order.
std::vector<int> NodeSignature(const Cluster& cluster, const Structure& structure) {
  std::vector<int> key;
  for (const auto& group : structure.groups) {
    for (int rank : group) key.push_back(cluster.ranks[rank].node);
    key.push_back(-1);
  }
  std::vector<int> idle;
  for (int rank : structure.idle) idle.push_back(cluster.ranks[rank].node);
  std::sort(idle.begin(), idle.end());
  key.insert(key.end(), idle.begin(), idle.end());
  return key;
}

// Every member order of every group of `groups` (product), appended to `out` when new.
void AddMemberOrders(const Cluster& cluster, std::vector<std::vector<int>> groups,
                     const std::vector<int>& idle, std::set<std::vector<int>>& seen,
                     std::vector<Structure>& out) {
  for (auto& group : groups) std::sort(group.begin(), group.end());
  while (true) {
    Structure s{groups, idle};
    if (seen.insert(NodeSignature(cluster, s)).second) out.push_back(s);
    size_t g = 0;
    while (g < groups.size() && !std::next_permutation(groups[g].begin(), groups[g].end())) ++g;
    if (g == groups.size()) return;
  }
}

}  // namespace

namespace sched_internal {

std::vector<std::vector<std::vector<int>>> SetPartitions(int n) {
  std::vector<std::vector<std::vector<int>>> partitions;
  std::vector<int> label(n, 0);
  if (n > 0) Partitions(n, label, 0, 0, partitions);
  return partitions;
}

std::vector<std::vector<std::vector<int>>> ReplicaShapes(int num_ranks, int batch) {
  std::vector<std::vector<std::vector<int>>> shapes;
  for (int mask = 1; mask < (1 << num_ranks); ++mask) {
    std::vector<int> participants;
    for (int rank = 0; rank < num_ranks; ++rank)
      if (mask & (1 << rank)) participants.push_back(rank);
    for (const auto& partition : SetPartitions(static_cast<int>(participants.size()))) {
      if (static_cast<int>(partition.size()) > batch) continue;
      std::vector<std::vector<int>> replicas;
      for (const std::vector<int>& block : partition) {
        replicas.emplace_back();
        for (int index : block) replicas.back().push_back(participants[index]);
      }
      shapes.push_back(std::move(replicas));
    }
  }
  return shapes;
}

bool BusyBetter(const PlanCost& a, const PlanCost& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (a.feasible) return BusySeconds(a) < BusySeconds(b);
  return a.max_memory_fraction < b.max_memory_fraction;
}

std::vector<Structure> ExactStructures(const Cluster& cluster) {
  const int n = cluster.num_ranks();
  const std::vector<std::vector<std::vector<int>>> partitions = SetPartitions(n);
  std::set<std::vector<int>> seen;
  std::vector<Structure> out;
  for (const auto& partition : partitions) {
    const int k = static_cast<int>(partition.size());
    for (int idle = -1; idle < (k > 1 ? k : 0); ++idle) {
      std::vector<int> active;
      for (int b = 0; b < k; ++b)
        if (b != idle) active.push_back(b);
      do {
        std::vector<std::vector<int>> groups;
        for (int b : active) groups.push_back(partition[b]);
        AddMemberOrders(cluster, groups, idle >= 0 ? partition[idle] : std::vector<int>{}, seen,
                        out);
      } while (std::next_permutation(active.begin(), active.end()));
    }
  }
  return out;
}

std::vector<int64_t> GridSplit(int64_t total, const std::vector<int>& steps) {
  return LargestRemainder(total, std::vector<double>(steps.begin(), steps.end()));
}

Layout ExactLayout(const Structure& structure, const std::vector<int>& group_steps, int64_t seq_len,
                   const std::vector<std::vector<int>>& member_steps,
                   const std::vector<std::vector<int>>& heads) {
  const std::vector<int64_t> fronts = GridSplit(seq_len / 2, group_steps);
  const std::vector<int64_t> backs = GridSplit(seq_len - seq_len / 2, group_steps);
  Layout layout;
  for (size_t k = 0; k < structure.groups.size(); ++k) {
    GroupLayout g;
    g.ranks = structure.groups[k];
    g.front = fronts[k];
    g.back = backs[k];
    g.tokens = GridSplit(g.total(), member_steps[k]);
    g.heads = heads[k];
    layout.push_back(std::move(g));
  }
  AppendIdleGroup(structure, layout);
  return layout;
}

Layout SnapToExactDomain(const Layout& layout, int64_t seq_len, const ExactGrid& grid) {
  Structure structure;
  std::vector<double> totals;
  std::vector<std::vector<int>> member_steps, heads;
  for (const GroupLayout& g : layout) {
    if (g.total() == 0) {
      structure.idle.insert(structure.idle.end(), g.ranks.begin(), g.ranks.end());
      continue;
    }
    structure.groups.push_back(g.ranks);
    totals.push_back(static_cast<double>(g.total()));
    const std::vector<int64_t> steps =
        LargestRemainder(grid.member_steps, std::vector<double>(g.tokens.begin(), g.tokens.end()));
    member_steps.emplace_back(steps.begin(), steps.end());
    heads.push_back(g.heads);
  }
  std::sort(structure.idle.begin(), structure.idle.end());
  const std::vector<int64_t> rounded = LargestRemainder(grid.group_steps, totals);
  std::vector<int> group_steps(rounded.begin(), rounded.end());
  for (int& steps : group_steps) {  // every active group keeps a step, taken from the largest
    if (steps > 0) continue;
    *std::max_element(group_steps.begin(), group_steps.end()) -= 1;
    steps = 1;
  }
  return ExactLayout(structure, group_steps, seq_len, member_steps, heads);
}

}  // namespace sched_internal

namespace {

// One group's choice of member token steps and heads, with its compute lower bound.
struct MemberChoice {
  double bound = 0;
  int tokens = 0, heads = 0;  // indices into the group's composition lists
};

struct Incumbent {
  bool have = false;
  PlanCost cost;
  Layout layout;
  int64_t evaluated = 0;
  // The best feasible point of each structure (by index) seen so far: runners-up for refinement.
  size_t structure = 0;
  // Keyed by (structure index, heads of every group): the best point of each head split within
  // kRunnerUpMargin of the best at the time it was found.
  std::map<std::pair<size_t, std::vector<std::vector<int>>>, std::pair<double, Layout>> runners;
  double Limit() const {  // bounds at or above this cannot improve nor be a runner-up
    return have && cost.feasible ? BusySeconds(cost) * (1 + kRunnerUpMargin)
                                 : std::numeric_limits<double>::infinity();
  }
};

// The search over one structure and one group-step vector: per group, every (member token
// steps, heads) choice with its bound, sorted; then the product, cut where the bound reaches the
// incumbent.
class GridSearch {
 public:
  GridSearch(const CostModel& model, const ExactGrid& grid, const Structure& structure,
             std::vector<int> group_steps, Incumbent& best)
      : model_(model),
        member_steps_total_(grid.member_steps),
        structure_(structure),
        group_steps_(std::move(group_steps)),
        best_(best) {}

  void Run(const Clock& clock) {
    const int heads = model_.model().heads;
    const size_t k = structure_.groups.size();
    token_lists_.resize(k);
    head_lists_.resize(k);
    for (size_t g = 0; g < k; ++g) {
      const int m = static_cast<int>(structure_.groups[g].size());
      token_lists_[g] = Compositions(member_steps_total_, m, 0);
      head_lists_[g] = Compositions(heads, m, 0);
    }
    ProbeCompute();
    ProbeMemory();
    choices_.assign(k, {});
    for (size_t g = 0; g < k; ++g) ListChoices(g);
    member_steps_.assign(k, {});
    member_heads_.assign(k, {});
    Product(0, 0.0, clock);
  }

 private:
  // The probe plan: every member holds at least one head and one token step where it can.
  Plan ProbePlan(Layout* layout_out = nullptr) const {
    const size_t k = structure_.groups.size();
    std::vector<std::vector<int>> steps(k), heads(k);
    for (size_t g = 0; g < k; ++g) {
      const int m = static_cast<int>(structure_.groups[g].size());
      steps[g] = ProbeSplit(member_steps_total_, m);
      heads[g] = ProbeSplit(model_.model().heads, m);
    }
    Layout layout = ExactLayout(structure_, group_steps_, model_.workload().seq_len, steps, heads);
    Plan plan = BuildPlan(model_, layout, "exact", "");
    if (layout_out) *layout_out = std::move(layout);
    return plan;
  }

  // Per rank: attention seconds per head and linear seconds per token at these group ranges.
  void ProbeCompute() {
    Layout layout;
    const PlanCost cost = model_.Evaluate(ProbePlan(&layout));
    per_head_.assign(model_.cluster().num_ranks(), 0);
    per_token_.assign(model_.cluster().num_ranks(), 0);
    for (const GroupLayout& g : layout)
      for (size_t i = 0; i < g.ranks.size(); ++i) {
        const RankCost& rc = cost.ranks[g.ranks[i]];
        if (g.heads[i] > 0) per_head_[rc.rank] = rc.attention_seconds / g.heads[i];
        if (g.tokens[i] > 0) per_token_[rc.rank] = rc.linear_seconds / g.tokens[i];
      }
  }

  // Per rank: memory with j token steps (rounded down) and no heads, and with h heads (query
  // heads 0..h-1: the fewest KV heads for h) and no tokens. The cost model's memory is model
  // state + a token part + a head part, each non-decreasing, so these give a lower bound.
  void ProbeMemory() {
    const int num_ranks = model_.cluster().num_ranks(), heads = model_.model().heads;
    token_memory_.assign(num_ranks, std::vector<double>(member_steps_total_ + 1, 0));
    head_memory_.assign(num_ranks, std::vector<double>(heads + 1, 0));
    capacity_.assign(num_ranks, 0);
    Plan plan = ProbePlan();
    auto probe = [&](int token_steps, int head_count, std::vector<std::vector<double>>& into,
                     int column) {
      for (PlanGroup& group : plan.groups) {
        const int64_t group_tokens = TotalTokens(group.tokens);
        for (PlanMember& member : group.members) {
          const int64_t tokens = group_tokens * token_steps / member_steps_total_;
          member.tokens = tokens > 0 ? Ranges{{0, tokens}} : Ranges{};
          member.heads.resize(group_tokens > 0 ? head_count : 0);
          std::iota(member.heads.begin(), member.heads.end(), 0);
        }
      }
      const PlanCost cost = model_.Evaluate(plan);
      for (const RankCost& rc : cost.ranks) {
        into[rc.rank][column] = rc.memory_bytes;
        capacity_[rc.rank] = rc.memory_capacity_bytes;
      }
    };
    for (int j = 0; j <= member_steps_total_; ++j) probe(j, 0, token_memory_, j);
    for (int h = 0; h <= heads; ++h) probe(0, h, head_memory_, h);
  }

  // The memory bound of rank `rank` with `steps` token steps and `heads` heads exceeds capacity.
  bool CannotFit(int rank, int steps, int heads) const {
    const double bound =
        token_memory_[rank][steps] + head_memory_[rank][heads] - token_memory_[rank][0];
    return bound * (1 - kBoundSlack) > capacity_[rank];
  }

  static std::vector<int> ProbeSplit(int total, int parts) {
    std::vector<int> out(parts, total / parts);
    for (int i = 0; i < total % parts; ++i) ++out[i];
    return out;
  }

  void ListChoices(size_t g) {
    const std::vector<int>& ranks = structure_.groups[g];
    const int64_t group_tokens = GroupTokens(g);
    const double limit = best_.Limit();
    for (size_t t = 0; t < token_lists_[g].size(); ++t) {
      const std::vector<int64_t> tokens = GridSplit(group_tokens, token_lists_[g][t]);
      for (size_t h = 0; h < head_lists_[g].size(); ++h) {
        double bound = 0;
        bool fits = true;
        for (size_t i = 0; i < ranks.size() && fits; ++i) {
          const int member_heads = head_lists_[g][h][i];
          bound = std::max(bound,
                           per_token_[ranks[i]] * tokens[i] + per_head_[ranks[i]] * member_heads);
          fits = !CannotFit(ranks[i], token_lists_[g][t][i], member_heads);
        }
        if (!fits || bound * (1 - kBoundSlack) >= limit) continue;
        choices_[g].push_back({bound, static_cast<int>(t), static_cast<int>(h)});
      }
    }
    std::stable_sort(
        choices_[g].begin(), choices_[g].end(),
        [](const MemberChoice& a, const MemberChoice& b) { return a.bound < b.bound; });
  }

  int64_t GroupTokens(size_t g) const {
    const int64_t seq = model_.workload().seq_len;
    return GridSplit(seq / 2, group_steps_)[g] + GridSplit(seq - seq / 2, group_steps_)[g];
  }

  void Product(size_t g, double bound, const Clock& clock) {
    if (g == choices_.size()) {
      Score();
      return;
    }
    for (const MemberChoice& choice : choices_[g]) {
      const double combined = std::max(bound, choice.bound);
      if (combined * (1 - kBoundSlack) >= best_.Limit()) break;  // sorted: the rest are worse
      if (clock.Expired()) return;
      member_steps_[g] = token_lists_[g][choice.tokens];
      member_heads_[g] = head_lists_[g][choice.heads];
      Product(g + 1, combined, clock);
    }
  }

  void Score() {
    Layout layout = ExactLayout(structure_, group_steps_, model_.workload().seq_len, member_steps_,
                                member_heads_);
    const PlanCost cost = model_.Evaluate(BuildPlan(model_, layout, "exact", ""));
    ++best_.evaluated;
    const double busy = BusySeconds(cost);
    if (cost.feasible && busy <= best_.Limit()) {
      auto [it, added] = best_.runners.try_emplace({best_.structure, member_heads_}, busy, layout);
      if (!added && busy < it->second.first) it->second = {busy, layout};
    }
    if (!best_.have || BusyBetter(cost, best_.cost)) {
      best_.have = true;
      best_.cost = cost;
      best_.layout = std::move(layout);
    }
  }

  const CostModel& model_;
  const int member_steps_total_;  // member tokens in multiples of 1 / this of the group's
  const Structure& structure_;
  const std::vector<int> group_steps_;
  Incumbent& best_;
  std::vector<std::vector<std::vector<int>>> token_lists_, head_lists_;
  std::vector<double> per_head_, per_token_;
  // [rank][token steps], [rank][heads]: memory lower-bound parts; capacity per rank.
  std::vector<std::vector<double>> token_memory_, head_memory_;
  std::vector<double> capacity_;
  std::vector<std::vector<MemberChoice>> choices_;
  std::vector<std::vector<int>> member_steps_, member_heads_;
};

}  // namespace

namespace sched_internal {

ExactDomainResult ExactDomainOptimum(const CostModel& model, const ScheduleOptions& options,
                                     const ExactGrid& grid) {
  const Clock& clock = options.deadline;
  const std::vector<Structure> structures = ExactStructures(model.cluster());
  Incumbent best;
  ExactDomainResult result;
  result.structures = static_cast<int64_t>(structures.size());
  for (size_t index = 0; index < structures.size(); ++index) {
    best.structure = index;
    if (options.progress) options.progress(0.9 * index / structures.size());
    const Structure& structure = structures[index];
    const int k = static_cast<int>(structure.groups.size());
    for (const std::vector<int>& steps : Compositions(grid.group_steps, k, 1)) {
      if (clock.Expired()) break;
      GridSearch(model, grid, structure, steps, best).Run(clock);
    }
  }
  result.complete = !clock.Expired();
  result.found = best.have;
  result.cost = best.cost;
  result.layout = best.layout;
  result.evaluated = best.evaluated;
  std::vector<std::pair<double, Layout>> runners;
  for (auto& [key, point] : best.runners) runners.push_back(std::move(point));
  std::stable_sort(runners.begin(), runners.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [seconds, layout] : runners) {
    if (static_cast<int>(result.runners_up.size()) >= kRunnerUps) break;
    if (seconds <= BusySeconds(best.cost) * (1 + kRunnerUpMargin) && !(layout == result.layout))
      result.runners_up.push_back(std::move(layout));
  }
  return result;
}

}  // namespace sched_internal

}  // namespace hexiseq
