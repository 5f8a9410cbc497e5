// AttentionLayout: everything the distributed attention derives from a Plan, computed identically
// on every rank with no communication: each group's head-layout row order and global positions,
// each rank's heads and KV heads, the KV-head segments (common refinement of the groups' head
// partitions) with one primary holder per group, which groups need which groups' keys (causality),
// the forwarding chains of the sub-rings, and the all-to-all split tables.
// It ignores devices, nodes and predictions: only groups, tokens and heads matter here.
#pragma once

#include <cstdint>
#include <vector>

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
  int64_t min_pos = 0;                 // over positions (meaningless when empty)
  int64_t max_pos = -1;
  int64_t num_tokens() const { return static_cast<int64_t>(positions.size()); }
};

// A set of KV heads on which every group's ownership is constant: in each ring group the same
// members need all of them. holders[ring_pos] lists those members (indices into the group's
// members), the first one is the segment's primary in that group.
struct KvSegment {
  std::vector<int> kv_heads;              // sorted
  std::vector<std::vector<int>> holders;  // by ring position
};

struct RankRole {
  int group = 0;              // index into AttentionLayout::groups
  int member = 0;             // index inside the group
  int ring_pos = -1;          // position of the group in the ring; -1 for an idle group
  std::vector<int> heads;     // query heads (sorted)
  std::vector<int> kv_heads;  // KV heads needed (sorted)
  std::vector<int> segments;  // segments held (ascending)
  int64_t num_tokens = 0;     // s_r, token-layout rows
};

class AttentionLayout {
 public:
  // Checks the invariants the runtime relies on (a precise message for each violation) and
  // derives the layout. Pure: same result on every rank.
  static Result<AttentionLayout> Build(const Plan& plan);

  int num_heads = 0;
  int num_kv_heads = 0;
  int num_ranks = 0;
  int64_t seq_len = 0;
  std::vector<LayoutGroup> groups;  // in plan order
  std::vector<RankRole> roles;      // by rank
  std::vector<int> ring;            // group indices of the groups with tokens, in plan order
  std::vector<KvSegment> segments;  // ordered by first KV head
  // needs[a][b]: some query of ring group a sees some key of ring group b (causally).
  std::vector<std::vector<bool>> needs;

  int kv_of(int head) const { return head / (num_heads / num_kv_heads); }
  // The ring positions that need ring group `origin`'s keys, in ring order after it (origin
  // excluded): the chain its blocks travel along, each recipient forwarding to the next.
  std::vector<int> Chain(int origin) const;
  // World rank of the primary (first holder) of segment `seg` in ring group `pos`.
  int PrimaryRank(int seg, int pos) const;
  const LayoutGroup& RingGroup(int pos) const { return groups[ring[pos]]; }
};

}  // namespace hexiseq::runtime
