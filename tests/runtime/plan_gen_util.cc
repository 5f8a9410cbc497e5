// Test plan generators (see plan_gen_util.h).
#include "runtime/plan_gen_util.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace hexiseq::testing {
namespace {

// Sub-ranges covering offsets [begin, end) of the concatenation of `ranges`.
Ranges Slice(const Ranges& ranges, int64_t begin, int64_t end) {
  Ranges out;
  int64_t offset = 0;
  for (const Range& range : ranges) {
    const int64_t lo = std::max(begin, offset);
    const int64_t hi = std::min(end, offset + range.size());
    if (lo < hi) out.push_back({range.begin + lo - offset, range.begin + hi - offset});
    offset += range.size();
  }
  return out;
}

Ranges MergeSorted(Ranges ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  Ranges merged;
  for (const Range& range : ranges) {
    if (!merged.empty() && merged.back().end == range.begin) {
      merged.back().end = range.end;
    } else {
      merged.push_back(range);
    }
  }
  return merged;
}

// `count` distinct sorted cut points in [1, limit - 1], plus 0 and limit at the ends.
std::vector<int64_t> Cuts(std::mt19937_64& rng, int64_t limit, int64_t count) {
  count = std::min(count, std::max<int64_t>(limit - 1, 0));
  std::set<int64_t> cuts;
  std::uniform_int_distribution<int64_t> pick(1, std::max<int64_t>(limit - 1, 1));
  while (static_cast<int64_t>(cuts.size()) < count) cuts.insert(pick(rng));
  std::vector<int64_t> out = {0};
  out.insert(out.end(), cuts.begin(), cuts.end());
  out.push_back(limit);
  return out;
}

Plan EmptyPlan(const std::string& strategy, int num_ranks, int64_t seq_len, int num_heads,
               int num_kv_heads) {
  Plan plan;
  plan.strategy = strategy;
  plan.model = "test";
  plan.seq_len = seq_len;
  plan.num_heads = num_heads;
  plan.num_kv_heads = num_kv_heads;
  plan.num_ranks = num_ranks;
  return plan;
}

PlanMember Member(int rank, Ranges tokens, std::vector<int> heads) {
  PlanMember member;
  member.rank = rank;
  member.tokens = std::move(tokens);
  member.heads = std::move(heads);
  return member;
}

std::vector<int> HeadBlock(int num_heads, int parts, int index) {
  std::vector<int> heads;
  const int begin = num_heads * index / parts;
  const int end = num_heads * (index + 1) / parts;
  for (int head = begin; head < end; ++head) heads.push_back(head);
  return heads;
}

}  // namespace

Plan RandomPlan(std::mt19937_64& rng, const RandomPlanOptions& options) {
  Plan plan = EmptyPlan("random", options.num_ranks, options.seq_len, options.num_heads,
                        options.num_kv_heads);
  const int n = options.num_ranks;
  std::vector<int> ranks(n);
  std::iota(ranks.begin(), ranks.end(), 0);
  std::shuffle(ranks.begin(), ranks.end(), rng);
  const int num_groups = std::uniform_int_distribution<int>(1, n)(rng);
  const std::vector<int64_t> group_cuts = Cuts(rng, n, num_groups - 1);

  // Which groups hold tokens: one chosen at random always does.
  std::bernoulli_distribution idle(options.idle_group_probability);
  const int always = std::uniform_int_distribution<int>(0, num_groups - 1)(rng);
  std::vector<int> token_groups;
  for (int group = 0; group < num_groups; ++group) {
    if (group == always || !idle(rng)) token_groups.push_back(group);
  }
  while (static_cast<int64_t>(token_groups.size()) > options.seq_len) token_groups.pop_back();
  const int t = static_cast<int>(token_groups.size());

  // Sequence chunks, each token group getting at least one.
  const int64_t num_chunks =
      std::min<int64_t>(options.seq_len, std::uniform_int_distribution<int>(t, 2 * t + 2)(rng));
  const std::vector<int64_t> chunk_cuts = Cuts(rng, options.seq_len, num_chunks - 1);
  std::vector<Ranges> group_tokens(num_groups);
  std::vector<int> chunk_owner(num_chunks);
  for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
    chunk_owner[chunk] = chunk < t
                             ? token_groups[chunk]
                             : token_groups[std::uniform_int_distribution<int>(0, t - 1)(rng)];
  }
  std::shuffle(chunk_owner.begin(), chunk_owner.end(), rng);
  for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
    group_tokens[chunk_owner[chunk]].push_back({chunk_cuts[chunk], chunk_cuts[chunk + 1]});
  }

  const int head_mode = std::uniform_int_distribution<int>(0, 2)(rng);
  std::bernoulli_distribution zero_tokens(options.zero_token_probability);
  for (int group = 0; group < num_groups; ++group) {
    PlanGroup plan_group;
    plan_group.ranks.assign(ranks.begin() + group_cuts[group],
                            ranks.begin() + group_cuts[group + 1]);
    const int members = static_cast<int>(plan_group.ranks.size());
    plan_group.tokens = MergeSorted(group_tokens[group]);
    std::vector<Ranges> member_tokens(members);
    std::vector<std::vector<int>> member_heads(members);
    int64_t total = 0;
    for (const Range& range : plan_group.tokens) total += range.size();
    if (total > 0) {
      // Members that get tokens (at least one).
      std::vector<int> takers;
      for (int member = 0; member < members; ++member) {
        if (!zero_tokens(rng)) takers.push_back(member);
      }
      if (takers.empty()) takers.push_back(std::uniform_int_distribution<int>(0, members - 1)(rng));
      const int64_t pieces =
          std::uniform_int_distribution<int64_t>(1, 2 * static_cast<int64_t>(takers.size()))(rng);
      const std::vector<int64_t> cuts = Cuts(rng, total, pieces - 1);
      std::vector<int> owner(cuts.size() - 1);
      for (size_t piece = 0; piece < owner.size(); ++piece) {
        owner[piece] =
            piece < takers.size()
                ? takers[piece]
                : takers[std::uniform_int_distribution<size_t>(0, takers.size() - 1)(rng)];
      }
      std::shuffle(owner.begin(), owner.end(), rng);
      for (size_t piece = 0; piece < owner.size(); ++piece) {
        for (const Range& range : Slice(plan_group.tokens, cuts[piece], cuts[piece + 1])) {
          member_tokens[owner[piece]].push_back(range);
        }
      }
      // Heads: random (non-contiguous, cutting KV groups), contiguous blocks, or whole KV groups.
      const int per_kv = options.num_heads / options.num_kv_heads;
      std::uniform_int_distribution<int> any_member(0, members - 1);
      if (head_mode == 0) {
        for (int head = 0; head < options.num_heads; ++head)
          member_heads[any_member(rng)].push_back(head);
      } else if (head_mode == 1) {
        const std::vector<int64_t> head_cuts = Cuts(rng, options.num_heads, members - 1);
        for (size_t block = 0; block + 1 < head_cuts.size(); ++block) {
          for (int64_t head = head_cuts[block]; head < head_cuts[block + 1]; ++head) {
            member_heads[block].push_back(static_cast<int>(head));
          }
        }
      } else {
        for (int kv = 0; kv < options.num_kv_heads; ++kv) {
          const int member = any_member(rng);
          for (int head = kv * per_kv; head < (kv + 1) * per_kv; ++head) {
            member_heads[member].push_back(head);
          }
        }
        for (auto& heads : member_heads) std::sort(heads.begin(), heads.end());
      }
    }
    for (int member = 0; member < members; ++member) {
      plan_group.members.push_back(Member(
          plan_group.ranks[member], MergeSorted(member_tokens[member]), member_heads[member]));
    }
    plan.groups.push_back(std::move(plan_group));
  }
  return plan;
}

Plan RingPlan(int num_ranks, int64_t seq_len, int num_heads, int num_kv_heads, bool zigzag) {
  Plan plan = EmptyPlan("ring", num_ranks, seq_len, num_heads, num_kv_heads);
  const int chunks = zigzag ? 2 * num_ranks : num_ranks;
  auto chunk = [&](int index) {
    return Range{seq_len * index / chunks, seq_len * (index + 1) / chunks};
  };
  std::vector<int> all_heads(num_heads);
  std::iota(all_heads.begin(), all_heads.end(), 0);
  for (int rank = 0; rank < num_ranks; ++rank) {
    Ranges tokens;
    for (Range range :
         zigzag ? Ranges{chunk(rank), chunk(chunks - 1 - rank)} : Ranges{chunk(rank)}) {
      if (range.size() > 0) tokens.push_back(range);
    }
    tokens = MergeSorted(tokens);
    PlanGroup group;
    group.ranks = {rank};
    group.tokens = tokens;
    group.members.push_back(Member(rank, tokens, tokens.empty() ? std::vector<int>{} : all_heads));
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

Plan UlyssesPlan(int num_ranks, int64_t seq_len, int num_heads, int num_kv_heads) {
  Plan plan = UspPlan(1, num_ranks, seq_len, num_heads, num_kv_heads);
  plan.strategy = "ulysses";
  return plan;
}

Plan UspPlan(int cp, int hp, int64_t seq_len, int num_heads, int num_kv_heads) {
  Plan plan = EmptyPlan("usp", cp * hp, seq_len, num_heads, num_kv_heads);
  const int chunks = 2 * cp;
  auto chunk = [&](int index) {
    return Range{seq_len * index / chunks, seq_len * (index + 1) / chunks};
  };
  for (int group_index = 0; group_index < cp; ++group_index) {
    PlanGroup group;
    Ranges tokens;
    for (Range range : {chunk(group_index), chunk(chunks - 1 - group_index)}) {
      if (range.size() > 0) tokens.push_back(range);
    }
    group.tokens = MergeSorted(tokens);
    int64_t total = 0;
    for (const Range& range : group.tokens) total += range.size();
    for (int member = 0; member < hp; ++member) {
      const int rank = group_index * hp + member;
      group.ranks.push_back(rank);
      group.members.push_back(Member(
          rank, MergeSorted(Slice(group.tokens, total * member / hp, total * (member + 1) / hp)),
          total > 0 ? HeadBlock(num_heads, hp, member) : std::vector<int>{}));
    }
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

}  // namespace hexiseq::testing
