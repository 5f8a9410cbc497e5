// Derives the runtime layout from a plan: the layer schedule (which checks the plan), then the
// head-layout row positions of every group and every rank's role.
#include "runtime/attention_layout.h"

#include <algorithm>

namespace hexiseq::runtime {
namespace {

LayoutGroup BuildLayoutGroup(const PlanGroup& plan_group, int plan_index) {
  LayoutGroup group;
  group.plan_index = plan_index;
  group.ranks = plan_group.ranks;
  group.member_offset.push_back(0);
  for (const PlanMember& member : plan_group.members) {
    for (const Range& range : member.tokens) {
      for (int64_t position = range.begin; position < range.end; ++position) {
        group.positions.push_back(position);
      }
    }
    group.member_offset.push_back(group.num_tokens());
  }
  return group;
}

RankRole BuildRole(const AttentionLayout& layout, const PlanMember& member, int group_index,
                   int member_index) {
  RankRole role;
  role.group = group_index;
  role.member = member_index;
  role.ring_pos = layout.schedule.groups[group_index].ring_pos;
  role.heads = member.heads;
  role.kv_heads = KvHeadsOf(member.heads, layout.num_heads, layout.num_kv_heads);
  role.num_tokens = TotalTokens(member.tokens);
  if (role.ring_pos < 0) return role;
  const std::vector<KvSegment>& segments = layout.schedule.segments;
  for (int segment = 0; segment < static_cast<int>(segments.size()); ++segment) {
    const std::vector<int>& holders = segments[segment].holders[role.ring_pos];
    if (std::find(holders.begin(), holders.end(), member.rank) != holders.end()) {
      role.segments.push_back(segment);
    }
  }
  return role;
}

}  // namespace

Result<AttentionLayout> AttentionLayout::Build(const Plan& plan, int head_dim) {
  ScheduleSizes sizes;
  sizes.head_dim = head_dim;
  sizes.element_bytes = kFp32Bytes;
  sizes.lse_bytes = kFp32Bytes;
  auto schedule = BuildLayerSchedule(plan, sizes);
  if (!schedule) return std::unexpected(schedule.error());
  AttentionLayout layout;
  layout.num_heads = plan.num_heads;
  layout.num_kv_heads = plan.num_kv_heads;
  layout.num_ranks = plan.num_ranks;
  layout.seq_len = plan.seq_len;
  layout.schedule = std::move(*schedule);
  layout.roles.resize(plan.num_ranks);
  for (size_t group_index = 0; group_index < plan.groups.size(); ++group_index) {
    const PlanGroup& plan_group = plan.groups[group_index];
    layout.groups.push_back(BuildLayoutGroup(plan_group, static_cast<int>(group_index)));
    for (size_t member = 0; member < plan_group.members.size(); ++member) {
      layout.roles[plan_group.members[member].rank] =
          BuildRole(layout, plan_group.members[member], static_cast<int>(group_index),
                    static_cast<int>(member));
    }
  }
  return layout;
}

}  // namespace hexiseq::runtime
