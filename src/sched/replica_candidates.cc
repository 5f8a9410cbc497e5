// Candidate replica partitions for the replica search (replica_search.h): which ranks take part
// and how they are cut into topology-aligned replicas.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "sched/replica_search.h"

namespace hexiseq::sched_internal {
namespace {

constexpr double kSlowNicFactor = 0.25;  // a NIC this much slower than the fastest: left out
constexpr int kNodePartOptions[] = {1, 2, 4, 8};  // a node cut into this many equal units
constexpr int kMaxUnitsPerKindReplica = 1 << 20;  // q doubles up to every unit of the kind
// On clusters of at most this many ranks also every participant set and every partition of it
// into replicas (ReplicaShapes: 50 candidates at 4 ranks), whatever the topology.
constexpr int kEveryShapeUpTo = 4;

double RankSpeed(const Cluster& cluster, int rank) {
  return cluster.device(rank).GemmFlops() + cluster.device(rank).AttentionFlops();
}

struct ParticipantSet {
  std::string name;  // "" for every node
  std::vector<int> nodes;
};

std::vector<int> NodesWhere(const Cluster& cluster, const std::function<bool(int)>& keep) {
  std::vector<int> nodes;
  for (const NodeInfo& node : cluster.nodes)
    if (keep(node.node)) nodes.push_back(node.node);
  return nodes;
}

// Every node; every node but the slowest device kinds (one speed threshold at a time); every node
// but those whose NIC is far slower than the fastest.
std::vector<ParticipantSet> ParticipantSets(const Cluster& cluster) {
  std::vector<ParticipantSet> sets = {{"", NodesWhere(cluster, [](int) { return true; })}};
  auto node_speed = [&](int node) { return RankSpeed(cluster, cluster.nodes[node].first_rank); };
  std::set<double, std::greater<>> speeds;
  for (const NodeInfo& node : cluster.nodes) speeds.insert(node_speed(node.node));
  for (auto threshold = speeds.begin(); std::next(threshold) != speeds.end(); ++threshold) {
    const double floor = *threshold;
    sets.push_back({"slowest kinds left out",
                    NodesWhere(cluster, [&](int node) { return node_speed(node) >= floor; })});
  }
  double fastest_nic = 0;
  for (const NodeKind& kind : cluster.kinds)
    if (kind.count > 0) fastest_nic = std::max(fastest_nic, kind.nic_bytes_per_second);
  auto nic_ok = [&](int node) {
    return cluster.kinds[cluster.nodes[node].kind].nic_bytes_per_second >=
           kSlowNicFactor * fastest_nic;
  };
  std::vector<int> fast_nic = NodesWhere(cluster, nic_ok);
  if (fast_nic.size() < cluster.nodes.size()) sets.push_back({"slow NICs left out", fast_nic});
  return sets;
}

struct Unit {
  std::vector<int> ranks;
  int kind = 0;
  double speed = 0;
};

// Each node cut into `parts` equal units (whole when `parts` does not divide its GPUs).
std::vector<Unit> Units(const Cluster& cluster, const std::vector<int>& nodes, int parts) {
  std::vector<Unit> units;
  for (int node : nodes) {
    const NodeInfo& info = cluster.nodes[node];
    const int cut = info.num_ranks % parts == 0 ? parts : 1;
    const int size = info.num_ranks / cut;
    for (int part = 0; part < cut; ++part) {
      Unit unit;
      unit.kind = info.kind;
      for (int rank = info.first_rank + part * size; rank < info.first_rank + (part + 1) * size;
           ++rank) {
        unit.ranks.push_back(rank);
        unit.speed += RankSpeed(cluster, rank);
      }
      units.push_back(std::move(unit));
    }
  }
  return units;
}

std::vector<int> Merge(const std::vector<const Unit*>& units) {
  std::vector<int> ranks;
  for (const Unit* unit : units) ranks.insert(ranks.end(), unit->ranks.begin(), unit->ranks.end());
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// Replicas of `per_replica` consecutive units of one node kind (the last of a kind may be smaller).
std::vector<std::vector<int>> ByKind(const std::vector<Unit>& units, int per_replica) {
  std::vector<std::vector<int>> replicas;
  std::vector<const Unit*> current;
  for (size_t index = 0; index < units.size(); ++index) {
    current.push_back(&units[index]);
    const bool kind_ends = index + 1 == units.size() || units[index + 1].kind != units[index].kind;
    if (static_cast<int>(current.size()) == per_replica || kind_ends) {
      replicas.push_back(Merge(current));
      current.clear();
    }
  }
  return replicas;
}

// `count` replicas of near-equal aggregate speed: largest unit first to the slowest replica.
std::vector<std::vector<int>> Balanced(const std::vector<Unit>& units, int count) {
  std::vector<const Unit*> order;
  for (const Unit& unit : units) order.push_back(&unit);
  std::stable_sort(order.begin(), order.end(),
                   [](const Unit* a, const Unit* b) { return a->speed > b->speed; });
  std::vector<std::vector<const Unit*>> members(count);
  std::vector<double> speed(count, 0);
  for (const Unit* unit : order) {
    const int target =
        static_cast<int>(std::min_element(speed.begin(), speed.end()) - speed.begin());
    members[target].push_back(unit);
    speed[target] += unit->speed;
  }
  std::vector<std::vector<int>> replicas;
  for (const auto& replica : members) replicas.push_back(Merge(replica));
  return replicas;
}

// "2 x (8 H100-SXM) + 1 x (4 A100-40G + 4 L40S)": replicas grouped by make-up.
std::string Describe(const Cluster& cluster, const std::vector<std::vector<int>>& replicas) {
  std::map<std::string, int> makeups;
  std::vector<std::string> order;
  for (const std::vector<int>& replica : replicas) {
    std::map<std::string, int> devices;
    for (int rank : replica) ++devices[cluster.device(rank).name];
    std::string text;
    for (const auto& [device, count] : devices)
      text += (text.empty() ? "" : " + ") + std::to_string(count) + " " + device;
    if (makeups[text]++ == 0) order.push_back(text);
  }
  std::string out;
  for (const std::string& text : order)
    out += (out.empty() ? "" : ", ") + std::to_string(makeups[text]) + " x (" + text + ")";
  return out;
}

// The replica counts tried for balanced splits: powers of two and the batch.
std::vector<int> BalancedCounts(int units, int batch) {
  std::vector<int> counts;
  for (int count = 2; count <= std::min(units, batch); count *= 2) counts.push_back(count);
  if (batch <= units && batch > 1 && (batch & (batch - 1)) != 0) counts.push_back(batch);
  return counts;
}

class CandidateList {
 public:
  CandidateList(const Cluster& cluster, int batch) : cluster_(cluster), batch_(batch) {}
  void Add(const std::string& how, std::vector<std::vector<int>> replicas) {
    if (replicas.empty() || static_cast<int>(replicas.size()) > batch_) return;
    std::sort(replicas.begin(), replicas.end());
    size_t ranks = 0;
    for (const auto& replica : replicas) ranks += replica.size();
    if (replicas.size() == 1 && static_cast<int>(ranks) == cluster_.num_ranks()) return;
    if (!seen_.insert(replicas).second) return;
    out_.push_back({how + ": " + Describe(cluster_, replicas), std::move(replicas)});
  }
  std::vector<ReplicaPartition> Take() { return std::move(out_); }

 private:
  const Cluster& cluster_;
  int batch_;
  std::set<std::vector<std::vector<int>>> seen_;
  std::vector<ReplicaPartition> out_;
};

}  // namespace

std::vector<ReplicaPartition> ReplicaCandidates(const Cluster& cluster, int batch) {
  CandidateList list(cluster, batch);
  for (const ParticipantSet& set : ParticipantSets(cluster)) {
    const std::string prefix = set.name.empty() ? "" : set.name + ", ";
    size_t previous_units = 0;
    for (int parts : kNodePartOptions) {
      // Nodes are cut finer only while there are fewer units than sequences.
      if (parts > 1 && static_cast<int>(previous_units) >= batch) break;
      const std::vector<Unit> units = Units(cluster, set.nodes, parts);
      previous_units = units.size();
      if (!set.name.empty() && parts == 1) {
        std::vector<const Unit*> all;
        for (const Unit& unit : units) all.push_back(&unit);
        list.Add(prefix + "1 replica", {Merge(all)});
      }
      for (int per = 1; per <= kMaxUnitsPerKindReplica && per <= static_cast<int>(units.size());
           per *= 2)
        list.Add(prefix + "by kind", ByKind(units, per));
      for (int count : BalancedCounts(static_cast<int>(units.size()), batch))
        list.Add(prefix + "balanced", Balanced(units, count));
    }
  }
  if (cluster.num_ranks() <= kEveryShapeUpTo)
    for (std::vector<std::vector<int>>& replicas : ReplicaShapes(cluster.num_ranks(), batch))
      list.Add("any ranks", std::move(replicas));
  return list.Take();
}

}  // namespace hexiseq::sched_internal
