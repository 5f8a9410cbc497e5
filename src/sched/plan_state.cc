#include "sched/plan_state.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sched/baselines.h"

namespace hexiseq::sched_internal {
namespace {

constexpr int kPhases = 5;        // local fwd, ring fwd, local bwd, ring bwd, LM head
constexpr int kTiedPerPhase = 3;  // bottleneck groups considered per phase when several tie
// When the largest group changes size, groups above this memory fraction are re-scored at once.
constexpr double kMemoryRecheckFraction = 0.8;
// A trial skips the ring chain's floor only when its score without it exceeds the cutoff by more
// than this (relative; Less's own tolerance is 1e-12).
constexpr double kCutoffMargin = 1e-9;

double Pow8(double x) {
  const double x2 = x * x, x4 = x2 * x2;
  return x4 * x4;
}

void PhaseTimes(const GroupCost& cost, double out[kPhases]) {
  out[0] = cost.local_fwd;
  out[1] = cost.ring_fwd;
  out[2] = cost.local_bwd;
  out[3] = cost.ring_bwd;
  out[4] = cost.head_seconds;
}

}  // namespace

bool Less(const Objective& a, const Objective& b) {
  if (a.feasible != b.feasible) return a.feasible;
  const double tol = 1e-12 * std::max(std::abs(a.primary), std::abs(b.primary));
  if (a.primary < b.primary - tol) return true;
  if (a.primary > b.primary + tol) return false;
  return a.secondary < b.secondary - 1e-12 * std::abs(b.secondary);
}

std::vector<int64_t> TokensByGemm(const CostModel& model, const std::vector<int>& ranks,
                                  int64_t total) {
  std::vector<double> weights;
  for (int rank : ranks) weights.push_back(model.cluster().device(rank).GemmFlops());
  return LargestRemainder(total, weights);
}

std::vector<int> HeadsByAttention(const CostModel& model, const std::vector<int>& ranks) {
  std::vector<double> weights;
  for (int rank : ranks) weights.push_back(model.cluster().device(rank).AttentionFlops());
  const std::vector<int64_t> counts =
      SplitHeadCounts(model.model().heads, model.model().kv_heads, weights);
  return std::vector<int>(counts.begin(), counts.end());
}

namespace {

// Writes group layout `g` into `group`, reusing its storage (a descent move rebuilds a group for
// every trial).
void FillGroup(const Cluster& cluster, const GroupLayout& g, int64_t front_begin, int64_t back_end,
               PlanGroup& group) {
  group.ranks = g.ranks;
  group.tokens.assign({{front_begin, front_begin + g.front}, {back_end - g.back, back_end}});
  NormalizeInPlace(group.tokens);
  group.replica = 0;
  group.members.resize(g.ranks.size());
  int64_t offset = 0;
  int head = 0;
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    PlanMember& member = group.members[i];
    member.rank = g.ranks[i];
    member.device = cluster.device(member.rank).name;
    member.node = cluster.ranks[member.rank].node;
    SliceByOffset(group.tokens, offset, g.tokens[i], member.tokens);
    offset += g.tokens[i];
    member.heads.resize(g.heads[i]);
    std::iota(member.heads.begin(), member.heads.end(), head);
    head += g.heads[i];
  }
}

}  // namespace

Plan BuildPlan(const CostModel& model, const Layout& layout, const std::string& strategy,
               const std::string& config) {
  Plan plan = EmptyPlan(model, strategy);
  plan.config = config;
  const int64_t seq = model.workload().seq_len;
  int64_t front = 0, back = seq;
  plan.groups.resize(layout.size());
  for (size_t index = 0; index < layout.size(); ++index) {
    const GroupLayout& g = layout[index];
    FillGroup(model.cluster(), g, front, back, plan.groups[index]);
    front += g.front;
    back -= g.back;
  }
  return plan;
}

bool LayoutFromPlan(const Plan& plan, Layout& layout) {
  layout.clear();
  if (NumReplicas(plan) != 1) return false;
  int64_t front = 0, back = plan.seq_len;
  for (const PlanGroup& group : plan.groups) {
    GroupLayout g;
    g.ranks = group.ranks;
    const Ranges ranges = Normalize(group.tokens);
    size_t index = 0;
    if (index < ranges.size() && ranges[index].begin == front) {
      g.front = ranges[index].size();
      ++index;
    }
    if (index < ranges.size() && ranges[index].end == back) {
      g.back = ranges[index].size();
      ++index;
    }
    if (index != ranges.size()) return false;
    front += g.front;
    back -= g.back;
    int head = 0;
    if (group.members.size() != group.ranks.size()) return false;
    for (size_t i = 0; i < group.members.size(); ++i) {
      const PlanMember& member = group.members[i];
      if (member.rank != group.ranks[i]) return false;
      g.tokens.push_back(TotalTokens(member.tokens));
      for (size_t h = 0; h < member.heads.size(); ++h)
        if (member.heads[h] != head + static_cast<int>(h)) return false;
      head += static_cast<int>(member.heads.size());
      g.heads.push_back(static_cast<int>(member.heads.size()));
    }
    layout.push_back(std::move(g));
  }
  if (!plan.left_out.empty()) {  // left-out ranks become one idle group
    GroupLayout idle;
    idle.ranks = plan.left_out;
    idle.tokens.assign(idle.ranks.size(), 0);
    idle.heads.assign(idle.ranks.size(), 0);
    layout.push_back(std::move(idle));
  }
  return front == back;
}

PlanState::PlanState(const CostModel& model, Layout layout, const Objective* cutoff)
    : model_(model), layout_(std::move(layout)), cutoff_(cutoff) {
  plan_ = BuildPlan(model_, layout_, "hexiseq", "");
  RecomputePositions();
  // The raw gradient-synchronization time, none of it hidden, and its last bucket.
  sync_seconds_ = model_.GradSyncTotalSeconds(plan_);
  sync_bucket_seconds_ = model_.GradSyncBucketSeconds(plan_);
  sync_rounds_ = model_.SyncRounds(plan_);
  optimizer_seconds_ = model_.OptimizerStepSeconds(plan_);  // the participants' only
  chains_.Build(plan_);
  EvaluateAll();
  Renormalize();
  cutoff_ = nullptr;
}

void PlanState::RecomputePositions() {
  const int k = num_groups();
  front_pos_.assign(k, 0);
  back_pos_.assign(k, 0);
  int64_t front = 0, back = model_.workload().seq_len;
  for (int g = 0; g < k; ++g) {
    front_pos_[g] = front;
    back_pos_[g] = back;
    front += layout_[g].front;
    back -= layout_[g].back;
  }
}

void PlanState::RebuildGroup(int group) {
  FillGroup(model_.cluster(), layout_[group], front_pos_[group], back_pos_[group],
            plan_.groups[group]);
}

void PlanState::EvaluateAll() {
  rings_ = CostModel::RingContexts(plan_);
  costs_.resize(layout_.size());
  for (int g = 0; g < num_groups(); ++g)
    costs_[g] = model_.EvaluateGroup(plan_, g, rings_[g], chains_);
  ComputeScore();
}

double PlanState::IterationOf(const double maxima[], double selective) const {
  const Workload& w = model_.workload();
  const double layers = model_.model().layers * w.batch;
  const double fwd = maxima[0] + maxima[1];
  const double recompute = w.recompute == Recompute::kFull        ? fwd
                           : w.recompute == Recompute::kSelective ? selective
                                                                  : 0.0;
  const double busy = layers * (maxima[0] + maxima[2]) + layers * (maxima[1] + maxima[3]) +
                      layers * recompute + w.batch * maxima[4];
  const double window =
      model_.SyncWindowSeconds(busy, model_.model().layers * (maxima[2] + maxima[3] + recompute));
  const double forward = model_.model().layers * fwd;
  return busy +
         model_.StageExposedSyncSeconds(sync_bucket_seconds_, sync_seconds_, window, forward,
                                        sync_rounds_) +
         optimizer_seconds_;
}

void PlanState::ComputeScore() {
  double maxima[kPhases] = {0, 0, 0, 0, 0};
  double selective = 0, worst_fraction = 0;
  bool feasible = true;
  for (const GroupCost& cost : costs_) {
    double t[kPhases];
    PhaseTimes(cost, t);
    for (int p = 0; p < kPhases; ++p) maxima[p] = std::max(maxima[p], t[p]);
    selective = std::max(selective, cost.recompute);
    worst_fraction = std::max(worst_fraction, cost.max_memory_fraction);
    if (cost.max_memory_fraction > 1.0) feasible = false;
  }
  // Mirrors CostModel::Combine, the ring chain's floor on both ring phases included. The floor
  // only adds time, so a trial whose score without it already loses to the cutoff (Try) loses
  // with it too, and the floor (O(ring groups^2)) is not computed.
  iteration_ = IterationOf(maxima, selective);
  const bool loses =
      cutoff_ != nullptr &&
      (!feasible || (cutoff_->feasible && iteration_ > cutoff_->primary * (1 + kCutoffMargin)));
  if (!loses) {
    const CostModel::RingChain chain = model_.RingChainOf(plan_, costs_);
    if (chain.bounds) {
      chain.Raise(maxima[1], maxima[3]);
      iteration_ = IterationOf(maxima, selective);
    }
  }

  score_.feasible = feasible;
  score_.primary = feasible ? iteration_ : worst_fraction;
  score_.secondary = Spread(feasible);
}

double PlanState::Spread(bool feasible) const {
  double spread = 0;
  if (feasible) {
    const Workload& w = model_.workload();
    const double layers = model_.model().layers * w.batch;
    const double full = w.recompute == Recompute::kFull ? 1.0 : 0.0;
    const double mult[kPhases] = {layers * (1 + full), layers * (1 + full), layers, layers,
                                  static_cast<double>(w.batch)};
    for (const GroupCost& cost : costs_) {
      double t[kPhases];
      PhaseTimes(cost, t);
      for (int p = 0; p < kPhases; ++p) spread += mult[p] * norm_[p] * Pow8(t[p] / norm_[p]);
    }
  } else {
    // Per rank, so that members of one group tied at the maximum can be relieved one at a time.
    for (const GroupCost& cost : costs_)
      for (const RankCost& rc : cost.members)
        spread += Pow8(rc.memory_bytes / rc.memory_capacity_bytes);
  }
  return spread;
}

void PlanState::Renormalize() {
  double maxima[kPhases] = {0, 0, 0, 0, 0};
  for (const GroupCost& cost : costs_) {
    double t[kPhases];
    PhaseTimes(cost, t);
    for (int p = 0; p < kPhases; ++p) maxima[p] = std::max(maxima[p], t[p]);
  }
  for (int p = 0; p < kPhases; ++p) norm_[p] = maxima[p] > 0 ? maxima[p] : 1.0;
  score_.secondary = Spread(score_.feasible);  // the primary does not depend on the norms
}

std::vector<int> PlanState::BottleneckGroups() const {
  std::vector<int> out;
  auto add = [&](int g) {
    if (g >= 0 && std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  };
  for (int p = 0; p < kPhases; ++p) {
    double best = -1;
    for (const GroupCost& cost : costs_) {
      double t[kPhases];
      PhaseTimes(cost, t);
      best = std::max(best, t[p]);
    }
    if (best <= 0) continue;
    int taken = 0;
    for (int g = 0; g < num_groups() && taken < kTiedPerPhase; ++g) {
      double t[kPhases];
      PhaseTimes(costs_[g], t);
      if (t[p] >= best * (1 - 1e-9)) {
        add(g);
        ++taken;
      }
    }
  }
  if (!score_.feasible) {
    int worst = -1;
    for (int g = 0; g < num_groups(); ++g)
      if (worst < 0 || costs_[g].max_memory_fraction > costs_[worst].max_memory_fraction) worst = g;
    add(worst);
  }
  return out;
}

namespace {

// Rescales member token counts to a new group total, keeping their proportions.
void Rescale(const CostModel& model, GroupLayout& g, int64_t new_total) {
  const int64_t old_total = std::accumulate(g.tokens.begin(), g.tokens.end(), int64_t{0});
  if (new_total == old_total) return;
  if (old_total == 0) {
    g.tokens = TokensByGemm(model, g.ranks, new_total);
  } else {
    std::vector<double> weights(g.tokens.begin(), g.tokens.end());
    g.tokens = LargestRemainder(new_total, weights);
  }
}

}  // namespace

void PlanState::SaveGroup(int group, Saved& saved) const {
  if (std::find(saved.groups.begin(), saved.groups.end(), group) != saved.groups.end()) return;
  const size_t slot = saved.groups.size();
  saved.groups.push_back(group);
  if (saved.layouts.size() <= slot) {
    saved.layouts.push_back(layout_[group]);
    saved.plan_groups.push_back(plan_.groups[group]);
    saved.costs.push_back(costs_[group]);
  } else {
    saved.layouts[slot] = layout_[group];
    saved.plan_groups[slot] = plan_.groups[group];
    saved.costs[slot] = costs_[group];
  }
}

namespace {

// `move.from` and `move.to` are two different members of a group of `members`.
bool MovesBetweenMembers(const Move& move, int members) {
  return move.from >= 0 && move.from < members && move.to >= 0 && move.to < members &&
         move.from != move.to;
}

}  // namespace

void PlanState::Touch(int group) {
  if (std::find(touched_.begin(), touched_.end(), group) == touched_.end())
    touched_.push_back(group);
}

PlanState::MoveOutcome PlanState::MoveMemberTokens(const Move& move, Saved& saved) {
  return ShiftWithinGroup(move, 0, move.amount, saved);
}

PlanState::MoveOutcome PlanState::MoveHeads(const Move& move, Saved& saved) {
  if (move.amount <= 0) return MoveOutcome::kIllegal;
  return ShiftWithinGroup(move, move.amount, 0, saved);
}

PlanState::MoveOutcome PlanState::Trade(const Move& move, Saved& saved) {
  if (move.amount <= 0 || move.tokens <= 0) return MoveOutcome::kIllegal;
  return ShiftWithinGroup(move, move.amount, -move.tokens, saved);
}

PlanState::MoveOutcome PlanState::ShiftWithinGroup(const Move& move, int64_t heads, int64_t tokens,
                                                   Saved& saved) {
  GroupLayout& group = layout_[move.group];
  if (!MovesBetweenMembers(move, static_cast<int>(group.ranks.size())))
    return MoveOutcome::kIllegal;
  if (heads > 0 && (group.total() == 0 || group.heads[move.from] < heads))
    return MoveOutcome::kIllegal;
  if (tokens > 0 ? group.tokens[move.from] < tokens : group.tokens[move.to] < -tokens)
    return MoveOutcome::kIllegal;
  if (heads == 0 && tokens <= 0) return MoveOutcome::kIllegal;
  SaveGroup(move.group, saved);
  group.heads[move.from] -= static_cast<int>(heads);
  group.heads[move.to] += static_cast<int>(heads);
  group.tokens[move.from] -= tokens;
  group.tokens[move.to] += tokens;
  RebuildGroup(move.group);
  Touch(move.group);
  if (heads > 0) {  // the members' KV heads feed the neighbours' ring steps
    Touch(rings_[move.group].prev);
    Touch(rings_[move.group].next);
  }
  return MoveOutcome::kTouched;
}

PlanState::MoveOutcome PlanState::MoveGroupTokens(const Move& move, Saved& saved) {
  const int source = move.group, target = move.other_group, groups = num_groups();
  if (target < 0 || target >= groups || source == target) return MoveOutcome::kIllegal;
  GroupLayout& from = layout_[source];
  GroupLayout& to = layout_[target];
  if (from.front - move.front < 0 || from.back - move.back < 0 || to.front + move.front < 0 ||
      to.back + move.back < 0)
    return MoveOutcome::kIllegal;
  if (move.front == 0 && move.back == 0) return MoveOutcome::kIllegal;
  const int lo = std::min(source, target), hi = std::max(source, target);
  for (int group = lo; group <= hi; ++group) SaveGroup(group, saved);
  const bool was_active_from = from.total() > 0, was_active_to = to.total() > 0;
  Rescale(model_, from, from.total() - move.front - move.back);
  Rescale(model_, to, to.total() + move.front + move.back);
  from.front -= move.front;
  from.back -= move.back;
  to.front += move.front;
  to.back += move.back;
  for (GroupLayout* changed : {&from, &to}) {
    if (changed->total() == 0)
      std::fill(changed->heads.begin(), changed->heads.end(), 0);
    else if (std::accumulate(changed->heads.begin(), changed->heads.end(), 0) == 0)
      changed->heads = HeadsByAttention(model_, changed->ranks);
  }
  RecomputePositions();
  for (int group = lo; group <= hi; ++group) RebuildGroup(group);
  std::swap(chains_, saved.chains);  // kept for Restore; the storage is reused
  saved.chains_saved = true;
  chains_.Build(plan_);
  int64_t max_tokens = 0;
  for (const GroupLayout& group : layout_) max_tokens = std::max(max_tokens, group.total());
  if (was_active_from != (from.total() > 0) || was_active_to != (to.total() > 0)) {
    saved.full = true;  // a group became active or idle: the ring changes
    saved.rings = std::move(rings_);
    saved.all_costs = std::move(costs_);
    EvaluateAll();
    return MoveOutcome::kRescored;
  }
  if (max_tokens != rings_[0].max_group_tokens) {
    // The largest group sizes every rank's ring buffers: memory only. Re-score the groups whose
    // memory could matter; the others keep a slightly stale memory figure (the final plan is
    // re-scored in full).
    saved.old_max_tokens = rings_[0].max_group_tokens;
    for (CostModel::RingContext& ring : rings_) ring.max_group_tokens = max_tokens;
    for (int group = 0; group < groups; ++group)
      if (costs_[group].max_memory_fraction > kMemoryRecheckFraction) Touch(group);
  }
  for (int group = lo; group <= hi; ++group) Touch(group);
  Touch(rings_[source].prev);
  Touch(rings_[target].prev);
  return MoveOutcome::kTouched;
}

bool PlanState::Mutate(const Move& move, Saved& saved) {
  // The saved state and the touched list keep their buffers from one trial to the next, so a
  // trial move allocates only where a group's shape grows.
  saved.groups.clear();
  saved.full = false;
  saved.chains_saved = false;
  saved.old_max_tokens = -1;
  saved.score = score_;
  saved.iteration = iteration_;
  touched_.clear();
  if (move.group < 0 || move.group >= num_groups()) return false;
  MoveOutcome outcome = MoveOutcome::kIllegal;
  switch (move.kind) {
    case Move::kMemberTokens:
      outcome = MoveMemberTokens(move, saved);
      break;
    case Move::kHeads:
      outcome = MoveHeads(move, saved);
      break;
    case Move::kGroupTokens:
      outcome = MoveGroupTokens(move, saved);
      break;
    case Move::kTrade:
      outcome = Trade(move, saved);
      break;
  }
  if (outcome == MoveOutcome::kIllegal) return false;
  if (outcome == MoveOutcome::kRescored) return true;
  for (int group : touched_) SaveGroup(group, saved);
  for (int group : touched_)
    costs_[group] = model_.EvaluateGroup(plan_, group, rings_[group], chains_);
  ComputeScore();
  return true;
}

void PlanState::Restore(Saved& saved) {
  for (size_t i = 0; i < saved.groups.size(); ++i) {
    const int g = saved.groups[i];
    std::swap(layout_[g], saved.layouts[i]);
    std::swap(plan_.groups[g], saved.plan_groups[i]);
    if (!saved.full) std::swap(costs_[g], saved.costs[i]);
  }
  if (saved.old_max_tokens >= 0)
    for (CostModel::RingContext& ring : rings_) ring.max_group_tokens = saved.old_max_tokens;
  if (saved.full) {
    rings_ = std::move(saved.rings);
    costs_ = std::move(saved.all_costs);
  }
  if (saved.chains_saved) std::swap(chains_, saved.chains);
  RecomputePositions();
  score_ = saved.score;
  iteration_ = saved.iteration;
}

bool PlanState::Apply(const Move& move) { return Mutate(move, saved_); }

Objective PlanState::Try(const Move& move, bool& legal, const Objective* cutoff) {
  cutoff_ = cutoff;
  legal = Mutate(move, saved_);
  cutoff_ = nullptr;
  if (!legal) return score_;
  const Objective result = score_;
  Restore(saved_);
  return result;
}

}  // namespace hexiseq::sched_internal

namespace hexiseq::sched_internal {
namespace {

// Beyond kAllPartnersUpTo groups, a bottleneck group trades tokens with the groups within this
// distance in ring order (a transfer re-scores every group between the two).
constexpr int kPartnerDistance = 2;
constexpr int kAllPartnersUpTo = 12;  // below this many groups, every group is a partner
// Groups of at most this many members also try k-head moves between any two members when the
// descent has converged.
constexpr int kWideHeadMovesUpTo = 8;
// Token amounts of trades (DescentRound::TradeMoves): this many per halving.
constexpr int kTradeStepsPerHalving = 4;
// Trades are tried only while the fullest member needs at most this fraction of its memory: a
// trade walks the line where two members' memory balances, a few percent per step, and far
// above capacity no such walk ends in a plan that fits (it would only slow down an infeasible
// answer: 0.51 s to 0.77 s for llama3-70b at 1M on testbed-8 without this limit).
constexpr double kTradeUpToMemoryFraction = 1.25;

// One round of the descent: every move it tries from the current state, and the best of them.
class DescentRound {
 public:
  DescentRound(PlanState& state, double step, int64_t& trials)
      : state_(state), step_(step), trials_(trials), best_(state.score()) {}

  // The bottleneck groups' member, head and partner moves.
  void BottleneckMoves() {
    for (int group : state_.BottleneckGroups()) {
      MemberMoves(group);
      PartnerMoves(group);
    }
  }
  // Escape from a local optimum: moves of k heads (k = 1..max(2, heads per KV head)) between
  // any two members of a bottleneck group, for head splits several heads away from the start.
  void WideHeadMoves() {
    const int per_kv = HeadsPerKvHead();
    for (int group : state_.BottleneckGroups()) {
      const GroupLayout& layout = state_.layout()[group];
      const int members = static_cast<int>(layout.ranks.size());
      if (layout.total() == 0 || members < 2 || members > kWideHeadMovesUpTo) continue;
      for (int from = 0; from < members; ++from)
        for (int to = 0; to < members; ++to) {
          if (from == to) continue;
          for (int amount = 1; amount <= std::max(2, per_kv) && amount <= layout.heads[from];
               ++amount)
            Consider(Move{Move::kHeads, group, group, from, to, amount, 0, 0}, 0);
        }
    }
  }

  // Escape from an infeasible point where two members' memory balances: no single move lowers
  // both, but heads one way and tokens the other can. Between the fullest member of a bottleneck
  // group and each other member, both ways: 1 or heads-per-KV-head heads against tokens on a
  // ladder of ratio 2^(1/kTradeStepsPerHalving) below the giver's tokens (a ratio that fine lands
  // in the narrow band of amounts that lowers both members).
  void TradeMoves() {
    const int per_kv = HeadsPerKvHead();
    for (int group : state_.BottleneckGroups()) {
      const GroupLayout& layout = state_.layout()[group];
      const GroupCost& cost = state_.group_costs()[group];
      const int members = static_cast<int>(layout.ranks.size());
      if (layout.total() == 0 || members < 2 || members > kWideHeadMovesUpTo) continue;
      int fullest = 0;
      for (int i = 1; i < members; ++i)
        if (MemoryFraction(cost.members[i]) > MemoryFraction(cost.members[fullest])) fullest = i;
      if (MemoryFraction(cost.members[fullest]) > kTradeUpToMemoryFraction) continue;
      for (int other = 0; other < members; ++other) {
        if (other == fullest) continue;
        for (auto [from, to] : {std::pair{fullest, other}, std::pair{other, fullest}})
          for (int heads : {1, per_kv}) {
            if (heads == per_kv && per_kv == 1) break;
            TradeLadder(group, from, to, heads, layout.tokens[to]);
          }
      }
    }
  }

  bool found() const { return found_; }
  bool tried_bigger_than_one() const { return tried_bigger_than_one_; }
  const Move& best_move() const { return best_move_; }
  double best_factor() const { return best_factor_; }

 private:
  void TradeLadder(int group, int from, int to, int heads, int64_t giver_tokens) {
    int64_t last = -1;
    for (int step = 1;; ++step) {
      const int64_t tokens = static_cast<int64_t>(
          std::floor(giver_tokens * std::exp2(-static_cast<double>(step) / kTradeStepsPerHalving)));
      if (tokens <= 0) break;
      if (tokens == last) continue;
      last = tokens;
      Consider(Move{Move::kTrade, group, group, from, to, heads, 0, 0, tokens}, 0);
    }
  }

  static double MemoryFraction(const RankCost& member) {
    return member.memory_bytes / member.memory_capacity_bytes;
  }

  int HeadsPerKvHead() const {
    return state_.plan().num_heads / std::max(1, state_.plan().num_kv_heads);
  }

  void Consider(const Move& move, double factor) {
    bool legal = false;
    const Objective score = state_.Try(move, legal, &best_);
    ++trials_;
    if (legal && Less(score, best_)) {
      best_ = score;
      best_move_ = move;
      best_factor_ = factor;
      found_ = true;
    }
  }

  // Calls `fn(amount, factor)` for amounts step x {2, 1, 1/2} of `base` (at least 1, distinct,
  // at most base).
  template <typename Fn>
  void Amounts(int64_t base, Fn&& fn) {
    int64_t last = -1;
    for (double factor : {2.0, 1.0, 0.5}) {
      const int64_t amount =
          std::max<int64_t>(1, static_cast<int64_t>(std::floor(base * step_ * factor)));
      if (amount == last || amount > base) continue;
      last = amount;
      if (amount > 1) tried_bigger_than_one_ = true;
      fn(amount, factor);
    }
  }

  // Tokens from the member slowest at linear work and the one nearest its memory limit to the
  // members with the most slack; heads from the member slowest at attention (or fullest) to
  // every other member.
  void MemberMoves(int group) {
    const GroupLayout& layout = state_.layout()[group];
    const GroupCost& cost = state_.group_costs()[group];
    const int members = static_cast<int>(layout.ranks.size());
    if (layout.total() == 0 || members < 2) return;
    auto linear = [&](int i) { return cost.members[i].linear_seconds; };
    auto fraction = [&](int i) { return MemoryFraction(cost.members[i]); };
    auto attention = [&](int i) { return cost.members[i].attention_seconds; };
    int slow = 0, fullest = 0, fast = -1, light = -1;
    for (int i = 0; i < members; ++i) {
      if (linear(i) > linear(slow)) slow = i;
      if (fraction(i) > fraction(fullest)) fullest = i;
    }
    for (int i = 0; i < members; ++i) {
      if (i != slow && (fast < 0 || linear(i) < linear(fast))) fast = i;
      if (i != fullest && (light < 0 || fraction(i) < fraction(light))) light = i;
    }
    for (int from : {slow, fullest})
      for (int to : {fast, light}) {
        if (from == to || to < 0) continue;
        Amounts(layout.tokens[from], [&](int64_t amount, double factor) {
          Consider(Move{Move::kMemberTokens, group, group, from, to, amount, 0, 0}, factor);
        });
      }
    int hot = 0;
    for (int i = 0; i < members; ++i)
      if (attention(i) > attention(hot)) hot = i;
    const int per_kv = HeadsPerKvHead();
    for (int from : {hot, fullest}) {
      for (int to = 0; to < members; ++to) {
        if (to == from) continue;
        Consider(Move{Move::kHeads, group, group, from, to, 1, 0, 0}, 0);
        if (per_kv > 1) Consider(Move{Move::kHeads, group, group, from, to, per_kv, 0, 0}, 0);
      }
      if (hot == fullest) break;
    }
  }

  // Token transfers and front/back swaps with the partner groups: every group when there are
  // few, else the nearest in ring order.
  void PartnerMoves(int group) {
    const Layout& layout = state_.layout();
    const GroupLayout& own = layout[group];
    const int groups = state_.num_groups();
    if (own.total() == 0 || groups < 2) return;
    std::vector<int> partners;
    if (groups <= kAllPartnersUpTo) {
      for (int other = 0; other < groups; ++other)
        if (other != group) partners.push_back(other);
    } else {
      for (int distance = 1; distance <= kPartnerDistance; ++distance)
        for (int other : {group - distance, group + distance})
          if (other >= 0 && other < groups) partners.push_back(other);
    }
    for (int other : partners) {
      Amounts(own.total(), [&](int64_t amount, double factor) {
        if (own.front >= amount)
          Consider(Move{Move::kGroupTokens, group, other, 0, 0, 0, amount, 0}, factor);
        if (own.back >= amount)
          Consider(Move{Move::kGroupTokens, group, other, 0, 0, 0, 0, amount}, factor);
        // Swaps keep both groups' token counts and trade cheap front for costly back tokens.
        if (own.back >= amount && layout[other].front >= amount)
          Consider(Move{Move::kGroupTokens, group, other, 0, 0, 0, -amount, amount}, factor);
        if (own.front >= amount && layout[other].back >= amount)
          Consider(Move{Move::kGroupTokens, group, other, 0, 0, 0, amount, -amount}, factor);
      });
    }
  }

  PlanState& state_;
  const double step_;
  int64_t& trials_;
  Objective best_;
  Move best_move_;
  bool found_ = false, tried_bigger_than_one_ = false;
  double best_factor_ = 0;
};

}  // namespace

int64_t Descend(PlanState& state, int64_t max_trials, const std::function<bool()>& expired) {
  int64_t trials = 0;
  double step = 0.25;  // relative step: amounts are step x {2, 1, 1/2} of the source quantity
  while (trials < max_trials && !(expired && expired())) {
    state.Renormalize();
    DescentRound round(state, step, trials);
    round.BottleneckMoves();
    if (!round.found() && !round.tried_bigger_than_one() && trials < max_trials)
      round.WideHeadMoves();
    // Stuck where no plan fits: trade heads against tokens between members.
    if (!round.found() && !round.tried_bigger_than_one() && !state.score().feasible &&
        trials < max_trials)
      round.TradeMoves();
    if (round.found()) {
      state.Apply(round.best_move());
      if (round.best_factor() >= 2.0)
        step = std::min(0.5, step * 2);
      else if (round.best_factor() > 0 && round.best_factor() < 1.0)
        step *= 0.5;
    } else {
      if (!round.tried_bigger_than_one()) break;
      step *= 0.25;
    }
  }
  return trials;
}

}  // namespace hexiseq::sched_internal
