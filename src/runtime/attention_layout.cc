// Derives the runtime layout from a plan and checks the invariants it relies on. The checks
// duplicate part of plan validation on purpose: the runtime must never index out of bounds on a
// plan that some other tool accepted.
#include "runtime/attention_layout.h"

#include <algorithm>
#include <map>
#include <string>

#include "runtime/str_cat.h"

namespace hexiseq::runtime {
namespace {

std::string FormatRanges(const Ranges& ranges) {
  std::string text = "[";
  for (size_t index = 0; index < ranges.size(); ++index) {
    if (index > 0) text += ", ";
    text += StrCat("[", ranges[index].begin, ", ", ranges[index].end, ")");
  }
  return text + "]";
}

std::string FormatInts(const std::vector<int>& values) {
  std::string text = "[";
  for (size_t index = 0; index < values.size(); ++index) {
    if (index > 0) text += ", ";
    text += std::to_string(values[index]);
  }
  return text + "]";
}

// Sorted non-empty ranges; reports an overlap (first overlapping pair) through `overlap`.
Ranges SortedNonEmpty(const Ranges& ranges, std::string* overlap) {
  Ranges sorted;
  for (const Range& range : ranges) {
    if (range.size() > 0) sorted.push_back(range);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t index = 1; index < sorted.size(); ++index) {
    if (sorted[index].begin < sorted[index - 1].end && overlap != nullptr && overlap->empty()) {
      *overlap = StrCat("[", sorted[index - 1].begin, ", ", sorted[index - 1].end, ") overlaps [",
                        sorted[index].begin, ", ", sorted[index].end, ")");
    }
  }
  return sorted;
}

// Merges adjacent sorted ranges.
Ranges Merge(const Ranges& sorted) {
  Ranges merged;
  for (const Range& range : sorted) {
    if (!merged.empty() && range.begin <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, range.end);
    } else {
      merged.push_back(range);
    }
  }
  return merged;
}

}  // namespace

std::vector<int> AttentionLayout::Chain(int origin) const {
  std::vector<int> chain;
  const int m = static_cast<int>(ring.size());
  for (int step = 1; step < m; ++step) {
    const int pos = (origin + step) % m;
    if (needs[pos][origin]) chain.push_back(pos);
  }
  return chain;
}

int AttentionLayout::PrimaryRank(int seg, int pos) const {
  return RingGroup(pos).ranks[segments[seg].holders[pos].front()];
}

Result<AttentionLayout> AttentionLayout::Build(const Plan& plan) {
  if (plan.num_heads <= 0 || plan.num_kv_heads <= 0 || plan.num_heads % plan.num_kv_heads != 0) {
    return InvalidArgument(StrCat("plan: num_heads = ", plan.num_heads,
                                  ", num_kv_heads = ", plan.num_kv_heads,
                                  ": both must be >= 1 and num_kv_heads must divide num_heads"));
  }
  if (plan.num_ranks < 1) {
    return InvalidArgument(StrCat("plan: num_ranks = ", plan.num_ranks, ": must be >= 1"));
  }
  if (plan.seq_len < 0) {
    return InvalidArgument(StrCat("plan: seq_len = ", plan.seq_len, ": must be >= 0"));
  }
  std::vector<std::string> problems;
  std::vector<int> seen(plan.num_ranks, 0);
  Ranges all_group_tokens;
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const PlanGroup& group = plan.groups[gi];
    const std::string where = StrCat("plan: groups[", gi, "]");
    if (group.ranks.size() != group.members.size()) {
      problems.push_back(
          StrCat(where, ": ", group.ranks.size(), " ranks but ", group.members.size(), " members"));
      continue;
    }
    for (const Range& range : group.tokens) {
      if (range.begin < 0 || range.end > plan.seq_len || range.begin > range.end) {
        problems.push_back(StrCat(where, ".tokens: [", range.begin, ", ", range.end,
                                  ") must lie inside [0, ", plan.seq_len, ") with begin <= end"));
      }
    }
    std::string overlap;
    const Ranges group_sorted = SortedNonEmpty(group.tokens, &overlap);
    if (!overlap.empty()) problems.push_back(StrCat(where, ".tokens: ", overlap));
    all_group_tokens.insert(all_group_tokens.end(), group_sorted.begin(), group_sorted.end());
    int64_t group_size = 0;
    for (const Range& range : group_sorted) group_size += range.size();

    Ranges member_tokens;
    std::vector<int> head_count(plan.num_heads, 0);
    for (size_t mi = 0; mi < group.members.size(); ++mi) {
      const PlanMember& member = group.members[mi];
      const std::string mwhere = StrCat(where, ".members[", mi, "]");
      if (member.rank != group.ranks[mi]) {
        problems.push_back(StrCat(mwhere, ".rank = ", member.rank, ": must equal groups[", gi,
                                  "].ranks[", mi, "] = ", group.ranks[mi]));
      }
      if (member.rank < 0 || member.rank >= plan.num_ranks) {
        problems.push_back(
            StrCat(mwhere, ".rank = ", member.rank, ": must be in [0, ", plan.num_ranks, ")"));
      } else if (++seen[member.rank] == 2) {
        problems.push_back(
            StrCat(mwhere, ".rank = ", member.rank, ": rank appears in more than one place"));
      }
      for (const Range& range : member.tokens) {
        if (range.begin > range.end) {
          problems.push_back(
              StrCat(mwhere, ".tokens: [", range.begin, ", ", range.end, ") has begin > end"));
        }
        if (range.size() > 0) member_tokens.push_back(range);
      }
      for (size_t hi = 0; hi < member.heads.size(); ++hi) {
        const int head = member.heads[hi];
        if (head < 0 || head >= plan.num_heads) {
          problems.push_back(
              StrCat(mwhere, ".heads: head ", head, " is outside [0, ", plan.num_heads, ")"));
          continue;
        }
        if (hi > 0 && head <= member.heads[hi - 1]) {
          problems.push_back(StrCat(mwhere, ".heads = ", FormatInts(member.heads),
                                    ": must be sorted and distinct"));
        }
        ++head_count[head];
      }
    }
    std::string member_overlap;
    const Ranges member_sorted = SortedNonEmpty(member_tokens, &member_overlap);
    if (!member_overlap.empty()) {
      problems.push_back(StrCat(where, ": members' tokens overlap: ", member_overlap));
    } else if (Merge(member_sorted) != Merge(group_sorted)) {
      problems.push_back(StrCat(where, ": members' tokens ", FormatRanges(Merge(member_sorted)),
                                " do not partition the group's tokens ",
                                FormatRanges(Merge(group_sorted))));
    }
    for (int head = 0; head < plan.num_heads; ++head) {
      if (group_size > 0 && head_count[head] != 1) {
        problems.push_back(StrCat(where, ": query head ", head, " is held by ", head_count[head],
                                  " members (must be exactly 1 in a group with tokens)"));
      } else if (group_size == 0 && head_count[head] != 0) {
        problems.push_back(
            StrCat(where, ": query head ", head,
                   " is held in a group without tokens (idle members hold no heads)"));
      }
    }
  }
  for (int rank = 0; rank < plan.num_ranks; ++rank) {
    if (seen[rank] == 0) problems.push_back(StrCat("plan: rank ", rank, " is in no group"));
  }
  std::string overlap;
  const Ranges all_sorted = SortedNonEmpty(all_group_tokens, &overlap);
  if (!overlap.empty()) {
    problems.push_back(StrCat("plan: groups' tokens overlap: ", overlap));
  } else if (Merge(all_sorted) != (plan.seq_len > 0 ? Ranges{{0, plan.seq_len}} : Ranges{})) {
    problems.push_back(StrCat("plan: groups' tokens ", FormatRanges(Merge(all_sorted)),
                              " do not partition [0, ", plan.seq_len, ")"));
  }
  if (!problems.empty()) {
    std::string message;
    for (const std::string& problem : problems) {
      if (!message.empty()) message += "\n";
      message += problem;
    }
    return InvalidArgument(message);
  }

  AttentionLayout layout;
  layout.num_heads = plan.num_heads;
  layout.num_kv_heads = plan.num_kv_heads;
  layout.num_ranks = plan.num_ranks;
  layout.seq_len = plan.seq_len;
  layout.roles.resize(plan.num_ranks);
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const PlanGroup& plan_group = plan.groups[gi];
    LayoutGroup group;
    group.plan_index = static_cast<int>(gi);
    group.ranks = plan_group.ranks;
    group.member_offset.push_back(0);
    for (size_t mi = 0; mi < plan_group.members.size(); ++mi) {
      const PlanMember& member = plan_group.members[mi];
      for (const Range& range : member.tokens) {
        for (int64_t pos = range.begin; pos < range.end; ++pos) group.positions.push_back(pos);
      }
      group.member_offset.push_back(group.num_tokens());
      RankRole& role = layout.roles[member.rank];
      role.group = static_cast<int>(gi);
      role.member = static_cast<int>(mi);
      role.heads = member.heads;
      role.num_tokens = group.member_offset[mi + 1] - group.member_offset[mi];
      for (int head : member.heads) role.kv_heads.push_back(layout.kv_of(head));
      role.kv_heads.erase(std::unique(role.kv_heads.begin(), role.kv_heads.end()),
                          role.kv_heads.end());
    }
    if (!group.positions.empty()) {
      group.min_pos = *std::min_element(group.positions.begin(), group.positions.end());
      group.max_pos = *std::max_element(group.positions.begin(), group.positions.end());
      layout.ring.push_back(static_cast<int>(gi));
    }
    layout.groups.push_back(std::move(group));
  }
  const int m = static_cast<int>(layout.ring.size());
  for (int pos = 0; pos < m; ++pos) {
    for (int rank : layout.RingGroup(pos).ranks) layout.roles[rank].ring_pos = pos;
  }
  layout.needs.assign(m, std::vector<bool>(m, false));
  for (int a = 0; a < m; ++a) {
    for (int b = 0; b < m; ++b) {
      layout.needs[a][b] = layout.RingGroup(a).max_pos >= layout.RingGroup(b).min_pos;
    }
  }
  // Segments: KV heads grouped by their holder signature across ring groups.
  std::map<std::vector<std::vector<int>>, int> by_signature;
  for (int kv = 0; kv < plan.num_kv_heads; ++kv) {
    std::vector<std::vector<int>> signature(m);
    for (int pos = 0; pos < m; ++pos) {
      const LayoutGroup& group = layout.RingGroup(pos);
      for (size_t mi = 0; mi < group.ranks.size(); ++mi) {
        const std::vector<int>& kvs = layout.roles[group.ranks[mi]].kv_heads;
        if (std::binary_search(kvs.begin(), kvs.end(), kv)) {
          signature[pos].push_back(static_cast<int>(mi));
        }
      }
    }
    if (m == 0) continue;
    auto [it, inserted] =
        by_signature.try_emplace(signature, static_cast<int>(layout.segments.size()));
    if (inserted) layout.segments.push_back(KvSegment{{}, signature});
    layout.segments[it->second].kv_heads.push_back(kv);
  }
  for (int seg = 0; seg < static_cast<int>(layout.segments.size()); ++seg) {
    for (int pos = 0; pos < m; ++pos) {
      const LayoutGroup& group = layout.RingGroup(pos);
      for (int mi : layout.segments[seg].holders[pos]) {
        layout.roles[group.ranks[mi]].segments.push_back(seg);
      }
    }
  }
  return layout;
}

}  // namespace hexiseq::runtime
