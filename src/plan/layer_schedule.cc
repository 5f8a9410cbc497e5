// Builds the layer schedule from a plan: checks the invariants it relies on, then derives the
// groups' split tables, the KV segments, the block chains, and enumerates the messages. The checks
// duplicate part of plan validation on purpose: the runtime must never index out of bounds on a
// plan that some other tool accepted.
#include "plan/layer_schedule.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

namespace hexiseq {
namespace {

std::string FormatRange(const Range& range) {
  std::string text = "[";
  text += std::to_string(range.begin);
  text += ", ";
  text += std::to_string(range.end);
  return text + ")";
}

std::string FormatRanges(const Ranges& ranges) {
  std::string text = "[";
  for (size_t index = 0; index < ranges.size(); ++index) {
    if (index > 0) text += ", ";
    text += FormatRange(ranges[index]);
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

// Sorted non-empty ranges; reports the first overlapping pair through `overlap`.
Ranges SortedNonEmpty(const Ranges& ranges, std::string* overlap) {
  Ranges sorted;
  for (const Range& range : ranges) {
    if (range.size() > 0) sorted.push_back(range);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Range& left, const Range& right) { return left.begin < right.begin; });
  for (size_t index = 1; index < sorted.size(); ++index) {
    if (sorted[index].begin < sorted[index - 1].end && overlap->empty()) {
      *overlap = FormatRange(sorted[index - 1]) + " overlaps " + FormatRange(sorted[index]);
    }
  }
  return sorted;
}

// ---- Checks -------------------------------------------------------------------------------

// What the group checks accumulate across groups.
struct CheckState {
  std::vector<std::string> problems;
  std::vector<int> times_seen;  // by rank
  Ranges all_group_tokens;
};

Result<void> CheckPlanHeader(const Plan& plan) {
  if (plan.num_heads <= 0 || plan.num_kv_heads <= 0 || plan.num_heads % plan.num_kv_heads != 0) {
    return InvalidArgument("plan: num_heads = " + std::to_string(plan.num_heads) +
                           ", num_kv_heads = " + std::to_string(plan.num_kv_heads) +
                           ": both must be >= 1 and num_kv_heads must divide num_heads");
  }
  if (plan.num_ranks < 1) {
    return InvalidArgument("plan: num_ranks = " + std::to_string(plan.num_ranks) +
                           ": must be >= 1");
  }
  if (plan.seq_len < 0) {
    return InvalidArgument("plan: seq_len = " + std::to_string(plan.seq_len) + ": must be >= 0");
  }
  return {};
}

// Rank id, token ranges and head list of one member; counts its heads into `head_count`.
void CheckMember(const Plan& plan, int group_index, int member_index, CheckState& state,
                 Ranges& member_tokens, std::vector<int>& head_count) {
  const PlanGroup& group = plan.groups[group_index];
  const PlanMember& member = group.members[member_index];
  const std::string where = "plan: groups[" + std::to_string(group_index) + "].members[" +
                            std::to_string(member_index) + "]";
  if (member.rank != group.ranks[member_index]) {
    state.problems.push_back(where + ".rank = " + std::to_string(member.rank) +
                             ": must equal groups[" + std::to_string(group_index) + "].ranks[" +
                             std::to_string(member_index) +
                             "] = " + std::to_string(group.ranks[member_index]));
  }
  if (member.rank < 0 || member.rank >= plan.num_ranks) {
    state.problems.push_back(where + ".rank = " + std::to_string(member.rank) +
                             ": must be in [0, " + std::to_string(plan.num_ranks) + ")");
  } else if (++state.times_seen[member.rank] == 2) {
    state.problems.push_back(where + ".rank = " + std::to_string(member.rank) +
                             ": rank appears in more than one place");
  }
  for (const Range& range : member.tokens) {
    if (range.begin > range.end) {
      state.problems.push_back(where + ".tokens: " + FormatRange(range) + " has begin > end");
    }
    if (range.size() > 0) member_tokens.push_back(range);
  }
  for (size_t index = 0; index < member.heads.size(); ++index) {
    const int head = member.heads[index];
    if (head < 0 || head >= plan.num_heads) {
      state.problems.push_back(where + ".heads: head " + std::to_string(head) + " is outside [0, " +
                               std::to_string(plan.num_heads) + ")");
      continue;
    }
    if (index > 0 && head <= member.heads[index - 1]) {
      state.problems.push_back(where + ".heads = " + FormatInts(member.heads) +
                               ": must be sorted and distinct");
    }
    ++head_count[head];
  }
}

// Token ranges inside [0, S), members partitioning the group's tokens, heads partitioning
// {0..H-1} when the group has tokens (none otherwise).
void CheckGroup(const Plan& plan, int group_index, CheckState& state) {
  const PlanGroup& group = plan.groups[group_index];
  const std::string where = "plan: groups[" + std::to_string(group_index) + "]";
  if (group.ranks.size() != group.members.size()) {
    state.problems.push_back(where + ": " + std::to_string(group.ranks.size()) + " ranks but " +
                             std::to_string(group.members.size()) + " members");
    return;
  }
  for (const Range& range : group.tokens) {
    if (range.begin < 0 || range.end > plan.seq_len || range.begin > range.end) {
      state.problems.push_back(where + ".tokens: " + FormatRange(range) + " must lie inside [0, " +
                               std::to_string(plan.seq_len) + ") with begin <= end");
    }
  }
  std::string overlap;
  const Ranges group_sorted = SortedNonEmpty(group.tokens, &overlap);
  if (!overlap.empty()) state.problems.push_back(where + ".tokens: " + overlap);
  state.all_group_tokens.insert(state.all_group_tokens.end(), group_sorted.begin(),
                                group_sorted.end());
  Ranges member_tokens;
  std::vector<int> head_count(plan.num_heads, 0);
  for (size_t member = 0; member < group.members.size(); ++member) {
    CheckMember(plan, group_index, static_cast<int>(member), state, member_tokens, head_count);
  }
  std::string member_overlap;
  const Ranges member_sorted = SortedNonEmpty(member_tokens, &member_overlap);
  if (!member_overlap.empty()) {
    state.problems.push_back(where + ": members' tokens overlap: " + member_overlap);
  } else if (Normalize(member_sorted) != Normalize(group_sorted)) {
    state.problems.push_back(where + ": members' tokens " + FormatRanges(Normalize(member_sorted)) +
                             " do not partition the group's tokens " +
                             FormatRanges(Normalize(group_sorted)));
  }
  const bool has_tokens = TotalTokens(group_sorted) > 0;
  for (int head = 0; head < plan.num_heads; ++head) {
    if (has_tokens && head_count[head] != 1) {
      state.problems.push_back(where + ": query head " + std::to_string(head) + " is held by " +
                               std::to_string(head_count[head]) +
                               " members (must be exactly 1 in a group with tokens)");
    } else if (!has_tokens && head_count[head] != 0) {
      state.problems.push_back(where + ": query head " + std::to_string(head) +
                               " is held in a group without tokens (idle members hold no heads)");
    }
  }
}

Result<void> CheckScheduleInvariants(const Plan& plan) {
  if (auto header = CheckPlanHeader(plan); !header) return header;
  CheckState state;
  state.times_seen.assign(plan.num_ranks, 0);
  for (size_t group = 0; group < plan.groups.size(); ++group) {
    CheckGroup(plan, static_cast<int>(group), state);
  }
  std::vector<char> left_out(plan.num_ranks, 0);
  for (int rank : plan.left_out) {
    if (rank < 0 || rank >= plan.num_ranks) {
      state.problems.push_back("plan: left_out has rank " + std::to_string(rank) +
                               ", outside [0, " + std::to_string(plan.num_ranks) + ")");
      continue;
    }
    left_out[rank] = 1;
    if (state.times_seen[rank] > 0) {
      state.problems.push_back("plan: rank " + std::to_string(rank) +
                               " is left out and in a group (it must be one or the other)");
    }
  }
  for (int rank = 0; rank < plan.num_ranks; ++rank) {
    if (state.times_seen[rank] == 0 && !left_out[rank]) {
      state.problems.push_back("plan: rank " + std::to_string(rank) +
                               " is in no group and not left out");
    }
  }
  std::string overlap;
  const Ranges all_sorted = SortedNonEmpty(state.all_group_tokens, &overlap);
  const Ranges whole = plan.seq_len > 0 ? Ranges{{0, plan.seq_len}} : Ranges{};
  if (!overlap.empty()) {
    state.problems.push_back("plan: groups' tokens overlap: " + overlap);
  } else if (Normalize(all_sorted) != whole) {
    state.problems.push_back("plan: groups' tokens " + FormatRanges(Normalize(all_sorted)) +
                             " do not partition [0, " + std::to_string(plan.seq_len) + ")");
  }
  if (state.problems.empty()) return {};
  std::string message;
  for (const std::string& problem : state.problems) {
    if (!message.empty()) message += "\n";
    message += problem;
  }
  return InvalidArgument(message);
}

// ---- Derivation ---------------------------------------------------------------------------

// Fills the four split tables of a group from its members' token and head counts.
void BuildSplitTables(const ScheduleSizes& sizes, GroupSchedule& group) {
  const int members = static_cast<int>(group.ranks.size());
  for (SplitTable* table :
       {&group.qkv_in, &group.output_out, &group.grad_output_in, &group.grads_out}) {
    table->members = members;
    table->bytes.assign(static_cast<size_t>(members) * members, 0);
  }
  const int64_t row_head_bytes = sizes.head_dim * sizes.element_bytes;
  for (int token_side = 0; token_side < members; ++token_side) {
    const int64_t rows = group.member_tokens[token_side];
    for (int head_side = 0; head_side < members; ++head_side) {
      const int64_t query_heads = group.member_query_heads[head_side];
      const int64_t all_heads = query_heads + 2 * int64_t{group.member_kv_heads[head_side]};
      const size_t inbound = static_cast<size_t>(token_side) * members + head_side;
      const size_t outbound = static_cast<size_t>(head_side) * members + token_side;
      group.qkv_in.bytes[inbound] = rows * all_heads * row_head_bytes;
      group.grad_output_in.bytes[inbound] = rows * query_heads * row_head_bytes;
      group.output_out.bytes[outbound] = rows * query_heads * (row_head_bytes + sizes.lse_bytes);
      group.grads_out.bytes[outbound] = rows * all_heads * row_head_bytes;
    }
  }
}

GroupSchedule BuildGroup(const Plan& plan, int group_index, const ScheduleSizes& sizes) {
  const PlanGroup& plan_group = plan.groups[group_index];
  GroupSchedule group;
  group.plan_index = group_index;
  group.ranks = plan_group.ranks;
  group.tokens = Normalize(plan_group.tokens);
  group.num_tokens = TotalTokens(group.tokens);
  for (const PlanMember& member : plan_group.members) {
    group.member_tokens.push_back(TotalTokens(member.tokens));
    group.member_query_heads.push_back(static_cast<int>(member.heads.size()));
    group.member_kv_heads.push_back(
        static_cast<int>(KvHeadsOf(member.heads, plan.num_heads, plan.num_kv_heads).size()));
  }
  BuildSplitTables(sizes, group);
  return group;
}

// KV heads grouped by their holder signature (the members needing them in each ring group).
void BuildSegments(const Plan& plan, LayerSchedule& schedule) {
  const int ring_groups = schedule.num_ring_groups();
  if (ring_groups == 0) return;
  const int heads_per_kv = plan.num_heads / plan.num_kv_heads;
  // query_heads_of[kv][ring_pos][member]: how many of the member's heads use KV head kv.
  std::vector<std::vector<std::vector<int>>> query_heads_of(
      plan.num_kv_heads, std::vector<std::vector<int>>(ring_groups));
  for (int ring_pos = 0; ring_pos < ring_groups; ++ring_pos) {
    const PlanGroup& plan_group = plan.groups[schedule.ring[ring_pos]];
    const int members = static_cast<int>(plan_group.members.size());
    for (auto& per_group : query_heads_of) per_group[ring_pos].assign(members, 0);
    for (int member = 0; member < members; ++member) {
      for (int head : plan_group.members[member].heads) {
        ++query_heads_of[head / heads_per_kv][ring_pos][member];
      }
    }
  }
  std::map<std::vector<std::vector<int>>, int> segment_of_signature;
  for (int kv = 0; kv < plan.num_kv_heads; ++kv) {
    KvSegment candidate;
    candidate.holders.resize(ring_groups);
    candidate.holder_query_heads.resize(ring_groups);
    for (int ring_pos = 0; ring_pos < ring_groups; ++ring_pos) {
      const GroupSchedule& group = schedule.RingGroup(ring_pos);
      for (size_t member = 0; member < group.ranks.size(); ++member) {
        const int heads = query_heads_of[kv][ring_pos][member];
        if (heads == 0) continue;
        candidate.holders[ring_pos].push_back(group.ranks[member]);
        candidate.holder_query_heads[ring_pos].push_back(heads);
      }
    }
    auto [found, inserted] = segment_of_signature.try_emplace(
        candidate.holders, static_cast<int>(schedule.segments.size()));
    if (inserted) {
      schedule.segments.push_back(std::move(candidate));
    } else {
      KvSegment& segment = schedule.segments[found->second];
      for (int ring_pos = 0; ring_pos < ring_groups; ++ring_pos) {
        for (size_t holder = 0; holder < segment.holders[ring_pos].size(); ++holder) {
          segment.holder_query_heads[ring_pos][holder] +=
              candidate.holder_query_heads[ring_pos][holder];
        }
      }
    }
    schedule.segments[found->second].kv_heads.push_back(kv);
  }
}

// For each origin, the ring groups after it that have a causal pair with its keys.
void BuildChains(LayerSchedule& schedule) {
  const int ring_groups = schedule.num_ring_groups();
  std::vector<int64_t> first_position(ring_groups), last_position(ring_groups);
  for (int ring_pos = 0; ring_pos < ring_groups; ++ring_pos) {
    const Ranges& tokens = schedule.RingGroup(ring_pos).tokens;
    first_position[ring_pos] = tokens.front().begin;
    last_position[ring_pos] = tokens.back().end - 1;
  }
  std::vector<int> ring_order(ring_groups);
  std::iota(ring_order.begin(), ring_order.end(), 0);
  schedule.chains.resize(ring_groups);
  for (int origin = 0; origin < ring_groups; ++origin) {
    BlockChain& chain = schedule.chains[origin];
    const Ranges& keys = schedule.RingGroup(origin).tokens;
    chain.origin = origin;
    chain.own_pairs = CausalPairs(keys, keys);
    // Some query sees some key exactly when the last query is at or after the first key.
    auto needs_origin = [&](int ring_pos) {
      return ring_pos != origin && last_position[ring_pos] >= first_position[origin];
    };
    chain.hops.reserve(std::count_if(ring_order.begin(), ring_order.end(), needs_origin));
    for (int distance = 1; distance < ring_groups; ++distance) {
      const int ring_pos = (origin + distance) % ring_groups;
      if (!needs_origin(ring_pos)) continue;
      const int64_t pairs = CausalPairs(schedule.RingGroup(ring_pos).tokens, keys);
      chain.hops.push_back(ChainHop{ring_pos, pairs});
    }
  }
}

}  // namespace

int64_t SplitTable::SentBy(int sender) const {
  int64_t total = 0;
  for (int receiver = 0; receiver < members; ++receiver) {
    if (receiver != sender) total += Bytes(sender, receiver);
  }
  return total;
}

int64_t SplitTable::ReceivedBy(int receiver) const {
  int64_t total = 0;
  for (int sender = 0; sender < members; ++sender) {
    if (sender != receiver) total += Bytes(sender, receiver);
  }
  return total;
}

int64_t LayerSchedule::BlockBytes(int segment, int origin) const {
  return 2 * static_cast<int64_t>(segments[segment].kv_heads.size()) *
         RingGroup(origin).num_tokens * sizes.head_dim * sizes.element_bytes;
}

int LayerSchedule::HopIndex(int origin, int ring_pos) const {
  const int ring_groups = num_ring_groups();
  auto distance = [&](int position) { return (position - origin + ring_groups) % ring_groups; };
  const std::vector<ChainHop>& hops = chains[origin].hops;
  const int wanted = distance(ring_pos);
  auto found = std::lower_bound(
      hops.begin(), hops.end(), wanted,
      [&](const ChainHop& hop, int target) { return distance(hop.ring_pos) < target; });
  if (found == hops.end() || found->ring_pos != ring_pos || wanted == 0) return -1;
  return static_cast<int>(found - hops.begin());
}

std::vector<int> LayerSchedule::VisitingOrigins(int ring_pos) const {
  std::vector<int> origins;
  const int ring_groups = num_ring_groups();
  for (int distance = 1; distance < ring_groups; ++distance) {
    const int origin = (ring_pos - distance + ring_groups) % ring_groups;
    if (HopIndex(origin, ring_pos) >= 0) origins.push_back(origin);
  }
  return origins;
}

Result<LayerSchedule> BuildLayerSchedule(const Plan& plan, const ScheduleSizes& sizes,
                                         DkvRoute dkv_route) {
  if (sizes.head_dim < 1 || sizes.element_bytes < 1 || sizes.lse_bytes < 0) {
    return InvalidArgument("layer schedule: head_dim = " + std::to_string(sizes.head_dim) +
                           ", element_bytes = " + std::to_string(sizes.element_bytes) +
                           ", lse_bytes = " + std::to_string(sizes.lse_bytes) +
                           ": head_dim and element_bytes must be >= 1, lse_bytes >= 0");
  }
  if (auto valid = CheckScheduleInvariants(plan); !valid) return std::unexpected(valid.error());
  LayerSchedule schedule;
  schedule.sizes = sizes;
  schedule.dkv_route = dkv_route;
  schedule.num_heads = plan.num_heads;
  schedule.num_kv_heads = plan.num_kv_heads;
  schedule.num_ranks = plan.num_ranks;
  schedule.seq_len = plan.seq_len;
  schedule.places.resize(plan.num_ranks);
  for (size_t group_index = 0; group_index < plan.groups.size(); ++group_index) {
    GroupSchedule group = BuildGroup(plan, static_cast<int>(group_index), sizes);
    for (size_t member = 0; member < group.ranks.size(); ++member) {
      schedule.places[group.ranks[member]] =
          RankPlace{static_cast<int>(group_index), static_cast<int>(member)};
    }
    if (group.num_tokens > 0) {
      group.ring_pos = schedule.num_ring_groups();
      schedule.ring.push_back(static_cast<int>(group_index));
    }
    schedule.groups.push_back(std::move(group));
  }
  BuildSegments(plan, schedule);
  BuildChains(schedule);
  return schedule;
}

void ForEachRingMessage(const LayerSchedule& schedule, Direction direction,
                        const std::function<void(const RingMessage&)>& visit) {
  const bool backward = direction == Direction::kBackward;
  for (int segment_index = 0; segment_index < static_cast<int>(schedule.segments.size());
       ++segment_index) {
    const KvSegment& segment = schedule.segments[segment_index];
    for (const BlockChain& chain : schedule.chains) {
      RingMessage message;
      message.segment = segment_index;
      message.origin = chain.origin;
      message.bytes = schedule.BlockBytes(segment_index, chain.origin);
      const int owner_primary = segment.Primary(chain.origin);
      for (int hop = 0; hop < static_cast<int>(chain.hops.size()); ++hop) {
        const std::vector<int>& holders = segment.holders[chain.hops[hop].ring_pos];
        const int previous_primary =
            hop == 0 ? owner_primary : segment.Primary(chain.hops[hop - 1].ring_pos);
        message.hop = hop;
        message.kind = RingMessageKind::kKvBlock;
        message.source_rank = previous_primary;
        message.dest_rank = holders.front();
        visit(message);
        for (size_t replica = 1; replica < holders.size(); ++replica) {
          message.kind = RingMessageKind::kKvReplica;
          message.source_rank = holders.front();
          message.dest_rank = holders[replica];
          visit(message);
        }
        if (!backward) continue;
        for (size_t replica = 1; replica < holders.size(); ++replica) {
          message.kind = RingMessageKind::kDkvPartial;
          message.source_rank = holders[replica];
          message.dest_rank = holders.front();
          visit(message);
        }
        message.kind = RingMessageKind::kDkvReturn;
        message.source_rank = holders.front();
        message.dest_rank = schedule.DkvTarget(segment_index, chain.origin, hop);
        visit(message);
      }
    }
  }
}

void ForEachAllToAllPiece(const LayerSchedule& schedule, Direction direction, bool inbound,
                          const std::function<void(int, int, int64_t)>& visit) {
  for (const GroupSchedule& group : schedule.groups) {
    const SplitTable& table = inbound ? group.Inbound(direction) : group.Outbound(direction);
    for (int sender = 0; sender < table.members; ++sender) {
      for (int receiver = 0; receiver < table.members; ++receiver) {
        const int64_t bytes = table.Bytes(sender, receiver);
        if (sender != receiver && bytes > 0) {
          visit(group.ranks[sender], group.ranks[receiver], bytes);
        }
      }
    }
  }
}

PhaseBytes BytesPerRank(const LayerSchedule& schedule, Direction direction) {
  PhaseBytes phases;
  for (std::vector<RankBytes>* phase :
       {&phases.inbound_alltoall, &phases.kv_ring, &phases.dkv_return, &phases.outbound_alltoall}) {
    phase->assign(schedule.num_ranks, RankBytes{});
  }
  auto add_to = [](std::vector<RankBytes>& phase) {
    return [&phase](int source, int dest, int64_t bytes) {
      phase[source].sent += bytes;
      phase[dest].received += bytes;
    };
  };
  ForEachAllToAllPiece(schedule, direction, /*inbound=*/true, add_to(phases.inbound_alltoall));
  ForEachAllToAllPiece(schedule, direction, /*inbound=*/false, add_to(phases.outbound_alltoall));
  ForEachRingMessage(schedule, direction, [&](const RingMessage& message) {
    const bool is_kv =
        message.kind == RingMessageKind::kKvBlock || message.kind == RingMessageKind::kKvReplica;
    add_to(is_kv ? phases.kv_ring : phases.dkv_return)(message.source_rank, message.dest_rank,
                                                       message.bytes);
  });
  return phases;
}

}  // namespace hexiseq
