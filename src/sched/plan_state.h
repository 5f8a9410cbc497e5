// Internal to the scheduler: the "layout" form of a plan and an incrementally scored working copy.
// A layout lists groups in ring order; group k takes a front chunk of `front` tokens (laid from 0
// in group order) and a back chunk of `back` tokens (laid from S downwards in group order), so a
// transfer between two groups moves only the chunks between them. Members own token counts (their
// shards are consecutive slices of the group's ranges) and head counts (consecutive blocks of
// query heads in member order). The cost model scores only counts, ranges and KV sets, so this
// form loses nothing it can see. Ignores plans whose groups hold more than two chunks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "plan/plan.h"

namespace hexiseq::sched_internal {

struct GroupLayout {
  std::vector<int> ranks;       // members in order
  int64_t front = 0, back = 0;  // chunk sizes
  std::vector<int64_t> tokens;  // per member; sums to front + back
  std::vector<int> heads;       // per member head counts; sum H, or all 0 when the group is idle
  int64_t total() const { return front + back; }
  bool operator==(const GroupLayout&) const = default;
};
using Layout = std::vector<GroupLayout>;

// Builds the concrete plan (no prediction attached).
Plan BuildPlan(const CostModel& model, const Layout& layout, const std::string& strategy,
               const std::string& config);
// Recognises a plan that has the layout form (each group's ranges are its front chunk at the
// running front position and/or its back chunk at the running back position, heads are
// consecutive blocks in member order) and one replica; its left-out ranks become an idle group.
// Returns false otherwise.
bool LayoutFromPlan(const Plan& plan, Layout& layout);

// Lexicographic objective: feasible first; then iteration time (feasible) or max memory fraction
// (infeasible); then a spread term that breaks ties between equal maxima so descent can leave
// plateaus (lower = fewer groups at the maximum).
struct Objective {
  bool feasible = false;
  double primary = 0;
  double secondary = 0;
};
bool Less(const Objective& a, const Objective& b);

// Weights for new members: tokens by GEMM speed, heads by attention speed (KV-aware rounding).
std::vector<int64_t> TokensByGemm(const CostModel& model, const std::vector<int>& ranks,
                                  int64_t total);
std::vector<int> HeadsByAttention(const CostModel& model, const std::vector<int>& ranks);

// A move of the coordinate descent.
// kTrade: `amount` heads from member `from` to member `to`, and `tokens` tokens back from `to`
// to `from` (one step along the line where two members' memory is balanced, which no single
// move takes without raising one of them).
struct Move {
  enum Kind { kMemberTokens, kHeads, kGroupTokens, kTrade } kind = kMemberTokens;
  int group = 0, other_group = 0;  // kGroupTokens: from `group` to `other_group`
  int from = 0, to = 0;            // member indices (kMemberTokens, kHeads, kTrade)
  int64_t amount = 0;              // tokens or heads
  int64_t front = 0, back = 0;     // kGroupTokens: chunk deltas taken from `group`
  int64_t tokens = 0;              // kTrade: the tokens sent back
};

class PlanState {
 public:
  // With a `cutoff`, score() is exact only when it could be Less than the cutoff (as for Try);
  // such a state is for reading score() only.
  PlanState(const CostModel& model, Layout layout, const Objective* cutoff = nullptr);

  const Layout& layout() const { return layout_; }
  const Plan& plan() const { return plan_; }
  const std::vector<GroupCost>& group_costs() const { return costs_; }
  const Objective& score() const { return score_; }
  double IterationSeconds() const { return iteration_; }
  int num_groups() const { return static_cast<int>(layout_.size()); }

  // Applies the move if it is legal; returns false (and changes nothing) when it is not.
  // Try: applies, scores, undoes; returns the score it would have (legal == false: not legal).
  // With a `cutoff`, a score that cannot be Less than it may be returned without the ring
  // chain's floor (still not Less than the cutoff; the floor only adds time).
  bool Apply(const Move& move);
  Objective Try(const Move& move, bool& legal, const Objective* cutoff = nullptr);

  // Phase-bottleneck groups (slowest in each phase, the worst memory group when infeasible),
  // deduplicated, in a fixed order.
  std::vector<int> BottleneckGroups() const;
  // Resets the normalization of the spread term to the current phase maxima.
  void Renormalize();

 private:
  struct Saved {
    std::vector<int> groups;
    std::vector<GroupLayout> layouts;
    std::vector<PlanGroup> plan_groups;
    std::vector<GroupCost> costs;
    bool full = false;
    std::vector<CostModel::RingContext> rings;
    std::vector<GroupCost> all_costs;
    bool chains_saved = false;  // `chains` holds the index from before the move
    CostModel::ChainIndex chains;
    int64_t old_max_tokens = -1;
    Objective score;
    double iteration = 0;
  };
  bool Mutate(const Move& move, Saved& saved);
  // The phases of Mutate. SaveGroup keeps a group's layout, plan group and cost (once per move);
  // Touch lists a group to re-score (touched_). Each Move* applies one kind of move, saving what
  // it changes: kIllegal (nothing changed), kTouched (touched_ to re-score), kRescored (the whole
  // plan was re-evaluated).
  enum class MoveOutcome { kIllegal, kTouched, kRescored };
  void SaveGroup(int group, Saved& saved) const;
  void Touch(int group);
  MoveOutcome MoveMemberTokens(const Move& move, Saved& saved);
  MoveOutcome MoveHeads(const Move& move, Saved& saved);
  MoveOutcome MoveGroupTokens(const Move& move, Saved& saved);
  MoveOutcome Trade(const Move& move, Saved& saved);
  // `heads` heads from member move.from to move.to, and `tokens` tokens (negative: to -> from).
  MoveOutcome ShiftWithinGroup(const Move& move, int64_t heads, int64_t tokens, Saved& saved);
  void Restore(Saved& saved);
  void RebuildGroup(int group);
  void RecomputePositions();
  void EvaluateAll();
  void ComputeScore();
  // The iteration time from the phase maxima (kPhases of them), as CostModel::Combine sums it.
  double IterationOf(const double maxima[], double selective) const;
  // The score's tie-break term (normalized by norm_): phase times when feasible, else memory.
  double Spread(bool feasible) const;

  const CostModel& model_;
  Saved saved_;               // scratch for Try and Apply (buffers reused across trials)
  std::vector<int> touched_;  // scratch for Mutate
  Layout layout_;
  Plan plan_;
  std::vector<int64_t> front_pos_, back_pos_;  // start of the front chunk, end of the back chunk
  std::vector<CostModel::RingContext> rings_;
  CostModel::ChainIndex chains_;  // of plan_ as it is now
  std::vector<GroupCost> costs_;
  double sync_seconds_ = 0, sync_bucket_seconds_ = 0, optimizer_seconds_ = 0;
  double sync_rounds_ = 1;  // CostModel::SyncRounds
  double norm_[6] = {1, 1, 1, 1, 1, 1};
  Objective score_;
  double iteration_ = 0;
  const Objective* cutoff_ = nullptr;  // during Try, and while a cutoff constructor scores
};

}  // namespace hexiseq::sched_internal

namespace hexiseq::sched_internal {

// Bounded coordinate descent (a pattern search): each round takes the bottleneck groups, tries
// moves of three step sizes around the current relative step (tokens between members, one head,
// one KV group, tokens between groups from the front or back chunk or swapped between them),
// applies the best move that lowers the score, and otherwise shrinks the step. Once the step is
// down to single tokens, groups of at most 8 members also try moves of 1..per_kv heads between any
// two members (escapes from head splits several heads from proportional). Stops when even
// one-token steps fail, after `max_trials` trial moves, or when `expired()` says so.
// Returns the number of trial moves made.
int64_t Descend(PlanState& state, int64_t max_trials, const std::function<bool()>& expired);

}  // namespace hexiseq::sched_internal
