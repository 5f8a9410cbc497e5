// AttentionLayout: what the distributed attention derives from a Plan, identically on every rank
// with no communication: the layer schedule (split tables, KV segments with primary and replica
// holders, block chains; plan/layer_schedule.h) plus the runtime's own view of it: each group's
// head-layout row order with global positions, and each rank's heads, KV heads and held segments.
// It ignores devices, nodes and predictions: only groups, tokens and heads matter here.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/layer_schedule.h"
#include "plan/plan.h"
#include "spec/error.h"

namespace hexiseq::runtime {

struct LayoutGroup {
  int plan_index = 0;      // index in plan.groups
  std::vector<int> ranks;  // member ranks, in member order
  // Rows of the group's head layout: members' tokens in member order, each member's ranges in
  // the order the plan lists them. positions[row] is the row's global token position.
  std::vector<int64_t> positions;
  std::vector<int64_t> member_offset;  // first row of each member; size members + 1
  int64_t num_tokens() const { return static_cast<int64_t>(positions.size()); }
};

struct RankRole {
  int group = 0;              // index into AttentionLayout::groups
  int member = 0;             // index inside the group
  int ring_pos = -1;          // position of the group in the ring; -1 for an idle group
  std::vector<int> heads;     // query heads (sorted)
  std::vector<int> kv_heads;  // KV heads needed (sorted)
  std::vector<int> segments;  // schedule segments held (ascending)
  int64_t num_tokens = 0;     // s_r, token-layout rows
};

class AttentionLayout {
 public:
  // Checks the invariants the runtime relies on (a precise message for each violation) and
  // derives the layout; the schedule's bytes are for fp32 values of `head_dim`. Pure: same result
  // on every rank. REQUIRES: head_dim >= 1 (an error otherwise).
  static Result<AttentionLayout> Build(const Plan& plan, int head_dim = 1);

  int num_heads = 0;
  int num_kv_heads = 0;
  int num_ranks = 0;
  int64_t seq_len = 0;
  LayerSchedule schedule;           // the layer's communication, executed as it is
  std::vector<LayoutGroup> groups;  // in plan order
  std::vector<RankRole> roles;      // by rank

  int kv_of(int head) const { return head / (num_heads / num_kv_heads); }
  const LayoutGroup& RingGroup(int ring_pos) const { return groups[schedule.ring[ring_pos]]; }
};

}  // namespace hexiseq::runtime
