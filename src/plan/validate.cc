// Plan validation: every invariant of DESIGN.md, each violation reported on its own line with
// the group, member, rank, tokens or head involved.
#include <algorithm>
#include <map>
#include <sstream>

#include "plan/plan.h"

namespace hexiseq {
namespace {

std::string RangeText(int64_t begin, int64_t end) { return IntervalText(begin, end); }

class Violations {
 public:
  void Add(std::string line) {
    if (lines_.size() < kMaxLines) lines_.push_back(std::move(line));
    ++count_;
  }
  bool empty() const { return count_ == 0; }
  Result<void> Finish() const {
    if (count_ == 0) return {};
    std::ostringstream out;
    out << "invalid plan: " << count_ << " violation" << (count_ > 1 ? "s" : "") << ":";
    for (const std::string& line : lines_) out << "\n  - " << line;
    if (count_ > lines_.size()) out << "\n  - ... and " << count_ - lines_.size() << " more";
    return InvalidArgument(out.str());
  }

 private:
  static constexpr size_t kMaxLines = 20;
  std::vector<std::string> lines_;
  size_t count_ = 0;
};

// Checks that `parts` (labelled) partition `whole` exactly. Reports gaps and overlaps.
void CheckPartition(const Ranges& whole, const std::vector<std::pair<std::string, Ranges>>& parts,
                    const std::string& what, Violations& v) {
  struct Piece {
    int64_t begin, end;
    size_t owner;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < parts.size(); ++i)
    for (const Range& r : parts[i].second)
      if (r.size() > 0) pieces.push_back({r.begin, r.end, i});
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Overlaps between consecutive pieces (sweep keeping the furthest end so far).
  int64_t reach = INT64_MIN;
  size_t reach_owner = 0;
  for (const Piece& p : pieces) {
    if (p.begin < reach) {
      v.Add(what + ": tokens " + RangeText(p.begin, std::min(p.end, reach)) + " are held by both " +
            parts[reach_owner].first + " and " + parts[p.owner].first +
            " (rule: each token belongs to exactly one)");
    }
    if (p.end > reach) {
      reach = p.end;
      reach_owner = p.owner;
    }
  }
  // Gaps and excess against the whole.
  Ranges covered;
  for (const Piece& p : pieces) covered.push_back({p.begin, p.end});
  covered = Normalize(covered);
  const Ranges want = Normalize(whole);
  for (const Range& w : want) {
    int64_t pos = w.begin;
    for (const Range& c : covered) {
      if (c.end <= pos || c.begin >= w.end) continue;
      if (c.begin > pos) v.Add(what + ": tokens " + RangeText(pos, c.begin) + " are missing");
      pos = std::max(pos, c.end);
    }
    if (pos < w.end) v.Add(what + ": tokens " + RangeText(pos, w.end) + " are missing");
  }
  for (const Range& c : covered) {
    int64_t pos = c.begin;
    for (const Range& w : want) {
      if (w.end <= pos || w.begin >= c.end) continue;
      if (w.begin > pos)
        v.Add(what + ": tokens " + RangeText(pos, w.begin) +
              " are outside the range they must partition");
      pos = std::max(pos, w.end);
    }
    if (pos < c.end)
      v.Add(what + ": tokens " + RangeText(pos, c.end) +
            " are outside the range they must partition");
  }
}

void CheckRanges(const Ranges& ranges, int64_t seq_len, const std::string& where, Violations& v) {
  for (const Range& r : ranges) {
    if (r.begin >= r.end)
      v.Add(where + ": range " + RangeText(r.begin, r.end) + " is empty or reversed");
    else if (r.begin < 0 || r.end > seq_len)
      v.Add(where + ": range " + RangeText(r.begin, r.end) + " is outside [0, " +
            std::to_string(seq_len) + ")");
  }
}

// The group's path as the JSON names it: groups[g] in a one-replica plan, else
// replicas[r].groups[i].
std::string GroupLabel(const Plan& plan, size_t g) {
  if (NumReplicas(plan) == 1) return "groups[" + std::to_string(g) + "]";
  size_t first = g;
  while (first > 0 && plan.groups[first - 1].replica == plan.groups[g].replica) --first;
  return "replicas[" + std::to_string(plan.groups[g].replica) + "].groups[" +
         std::to_string(g - first) + "]";
}

// Replicas: sequences, group order, left-out ranks.
void CheckReplicas(const Plan& plan, Violations& v) {
  const int replicas = NumReplicas(plan);
  if (!plan.replica_sequences.empty()) {
    int64_t total = 0;
    for (int r = 0; r < replicas; ++r) {
      total += plan.replica_sequences[r];
      if (plan.replica_sequences[r] < 1)
        v.Add("replicas[" + std::to_string(r) +
              "].sequences = " + std::to_string(plan.replica_sequences[r]) +
              ": must be >= 1 (hint: drop a replica that takes no sequences)");
    }
    if (total != plan.batch)
      v.Add("the replicas' sequences sum to " + std::to_string(total) + " but batch = " +
            std::to_string(plan.batch) + " (rule: the replicas share the batch exactly)");
  }
  std::vector<int> groups_of(replicas, 0);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const int replica = plan.groups[g].replica;
    if (replica < 0 || replica >= replicas) {
      v.Add("groups[" + std::to_string(g) + "].replica = " + std::to_string(replica) +
            ": out of range [0, " + std::to_string(replicas) + ")");
      continue;
    }
    if (g > 0 && plan.groups[g - 1].replica > replica)
      v.Add("groups[" + std::to_string(g) + "] of replica " + std::to_string(replica) +
            " follows a group of replica " + std::to_string(plan.groups[g - 1].replica) +
            " (rule: groups are listed replica by replica)");
    ++groups_of[replica];
  }
  for (int r = 0; r < replicas; ++r)
    if (groups_of[r] == 0)
      v.Add("replica " + std::to_string(r) + " has no groups (rule: a replica needs a group)");
  for (size_t i = 0; i < plan.left_out.size(); ++i) {
    const int rank = plan.left_out[i];
    if (rank < 0 || rank >= plan.num_ranks)
      v.Add("left_out has " + std::to_string(rank) + ": out of range [0, " +
            std::to_string(plan.num_ranks) + ")");
    if (i > 0 && plan.left_out[i - 1] >= rank)
      v.Add("left_out must be sorted and distinct (at " + std::to_string(rank) + ")");
  }
}

// Ranks: in range, exactly once (in one group or left out), group.ranks == members' ranks.
void CheckRanks(const Plan& plan, Violations& v) {
  std::map<int, std::string> seen;
  for (int rank : plan.left_out) seen[rank] = "left_out";
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const PlanGroup& group = plan.groups[g];
    const std::string gp = GroupLabel(plan, g);
    if (group.ranks.size() != group.members.size()) {
      v.Add(gp + ": ranks lists " + std::to_string(group.ranks.size()) + " ranks but members has " +
            std::to_string(group.members.size()) + " entries");
    }
    for (size_t m = 0; m < group.members.size(); ++m) {
      const int rank = group.members[m].rank;
      const std::string mp = gp + ".members[" + std::to_string(m) + "]";
      if (m < group.ranks.size() && group.ranks[m] != rank)
        v.Add(mp + ".rank = " + std::to_string(rank) + " but " + gp + ".ranks[" +
              std::to_string(m) + "] = " + std::to_string(group.ranks[m]) + ": must match");
      if (rank < 0 || rank >= plan.num_ranks) {
        v.Add(mp + ".rank = " + std::to_string(rank) + ": out of range [0, " +
              std::to_string(plan.num_ranks) + ")");
      } else if (auto it = seen.find(rank); it != seen.end()) {
        v.Add("rank " + std::to_string(rank) + " appears twice: in " + it->second + " and " + mp +
              " (rule: every rank in exactly one group, or left out)");
      } else {
        seen[rank] = mp;
      }
    }
  }
  for (int rank = 0; rank < plan.num_ranks; ++rank)
    if (!seen.count(rank))
      v.Add("rank " + std::to_string(rank) +
            " is in no group (rule: every rank in exactly one group, or in left_out; hint: idle "
            "ranks go in a group with no tokens)");
  if (!plan.groups.empty() && seen.size() == plan.left_out.size())
    v.Add("every rank is left out (rule: at least one rank takes part)");
}

// Heads of one group: the members' heads partition {0..H-1} where the group holds tokens.
void CheckHeads(const Plan& plan, const PlanGroup& group, const std::string& gp, Violations& v) {
  const bool has_tokens = TotalTokens(group.tokens) > 0;
  std::vector<int> holder(plan.num_heads, -1);
  for (size_t m = 0; m < group.members.size(); ++m) {
    const PlanMember& member = group.members[m];
    const std::string mp =
        gp + ".members[" + std::to_string(m) + "] (rank " + std::to_string(member.rank) + ")";
    if (!has_tokens && !member.heads.empty()) {
      v.Add(mp + " holds heads in a group with no tokens (rule: idle ranks hold no heads)");
      continue;
    }
    for (size_t i = 0; i < member.heads.size(); ++i) {
      const int head = member.heads[i];
      if (head < 0 || head >= plan.num_heads) {
        v.Add(mp + ".heads has " + std::to_string(head) + ": out of range [0, " +
              std::to_string(plan.num_heads) + ")");
        continue;
      }
      if (i > 0 && member.heads[i - 1] >= head)
        v.Add(mp + ".heads must be sorted and distinct (at " + std::to_string(head) + ")");
      if (holder[head] >= 0 && holder[head] != member.rank)
        v.Add(gp + ": head " + std::to_string(head) + " is held by ranks " +
              std::to_string(holder[head]) + " and " + std::to_string(member.rank) +
              " (rule: each head in exactly one member of the group)");
      holder[head] = member.rank;
    }
  }
  if (!has_tokens) return;
  for (int head = 0; head < plan.num_heads; ++head)
    if (holder[head] < 0)
      v.Add(gp + ": head " + std::to_string(head) +
            " is missing (rule: the members' heads partition 0.." +
            std::to_string(plan.num_heads - 1) + ")");
}

// Tokens: each replica's groups partition [0, S); members partition their group.
void CheckTokens(const Plan& plan, Violations& v) {
  const int replicas = NumReplicas(plan);
  std::vector<std::vector<std::pair<std::string, Ranges>>> group_parts(replicas);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const PlanGroup& group = plan.groups[g];
    const std::string gp = GroupLabel(plan, g);
    CheckRanges(group.tokens, plan.seq_len, gp + ".tokens", v);
    if (group.replica >= 0 && group.replica < replicas)
      group_parts[group.replica].push_back({gp, group.tokens});
    std::vector<std::pair<std::string, Ranges>> member_parts;
    for (size_t m = 0; m < group.members.size(); ++m) {
      const std::string mp = gp + ".members[" + std::to_string(m) + "] (rank " +
                             std::to_string(group.members[m].rank) + ")";
      CheckRanges(group.members[m].tokens, plan.seq_len, mp + ".tokens", v);
      member_parts.push_back({mp, group.members[m].tokens});
    }
    CheckPartition(group.tokens, member_parts, gp + " members", v);
    CheckHeads(plan, group, gp, v);
  }
  for (int r = 0; r < replicas; ++r)
    CheckPartition({{0, plan.seq_len}}, group_parts[r],
                   replicas == 1 ? "groups" : "replicas[" + std::to_string(r) + "].groups", v);
}

void CheckStructure(const Plan& plan, Violations& v) {
  if (plan.format != kPlanFormat)
    v.Add("format = \"" + plan.format + "\": must be \"" + kPlanFormat + "\"");
  if (plan.seq_len < 1) v.Add("seq_len = " + std::to_string(plan.seq_len) + ": must be >= 1");
  if (plan.num_heads < 1 || plan.num_kv_heads < 1 || plan.num_heads % plan.num_kv_heads != 0) {
    v.Add("num_heads = " + std::to_string(plan.num_heads) + ", num_kv_heads = " +
          std::to_string(plan.num_kv_heads) + ": must be >= 1 with num_heads % num_kv_heads == 0");
    return;
  }
  if (plan.num_ranks < 1) v.Add("num_ranks = " + std::to_string(plan.num_ranks) + ": must be >= 1");
  if (plan.groups.empty()) v.Add("groups is empty: a plan needs at least one group");
  CheckReplicas(plan, v);
  CheckRanks(plan, v);
  CheckTokens(plan, v);
}

}  // namespace

Result<void> ValidateStructure(const Plan& plan) {
  Violations v;
  CheckStructure(plan, v);
  return v.Finish();
}

Result<void> Validate(const Plan& plan, const Cluster& cluster, const ModelSpec& model) {
  Violations v;
  if (plan.num_ranks != cluster.num_ranks())
    v.Add("num_ranks = " + std::to_string(plan.num_ranks) + " but the cluster '" + cluster.name +
          "' has " + std::to_string(cluster.num_ranks()) + " ranks");
  if (plan.num_heads != model.heads || plan.num_kv_heads != model.kv_heads)
    v.Add("num_heads = " + std::to_string(plan.num_heads) +
          ", num_kv_heads = " + std::to_string(plan.num_kv_heads) + " but model " + model.name +
          " has " + std::to_string(model.heads) + " and " + std::to_string(model.kv_heads));
  if (!v.empty()) return v.Finish();
  CheckStructure(plan, v);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    for (size_t m = 0; m < plan.groups[g].members.size(); ++m) {
      const PlanMember& member = plan.groups[g].members[m];
      if (member.rank < 0 || member.rank >= cluster.num_ranks()) continue;
      const std::string mp = GroupLabel(plan, g) + ".members[" + std::to_string(m) + "]";
      const std::string& want = cluster.device(member.rank).name;
      if (!member.device.empty() && member.device != want)
        v.Add(mp + ".device = \"" + member.device + "\" but rank " + std::to_string(member.rank) +
              " is a " + want +
              " in this cluster (hint: was the plan made for another cluster file?)");
      const int node = cluster.ranks[member.rank].node;
      if (member.node >= 0 && member.node != node)
        v.Add(mp + ".node = " + std::to_string(member.node) + " but rank " +
              std::to_string(member.rank) + " is on node " + std::to_string(node) +
              " in this cluster (hint: was the plan made for another cluster file?)");
    }
  }
  return v.Finish();
}

}  // namespace hexiseq
