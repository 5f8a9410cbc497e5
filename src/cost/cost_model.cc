#include "cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "spec/limits.h"
#include "spec/units.h"

namespace hexiseq {
namespace {

std::string Gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / kGiB);
  return buf;
}

// The largest phase and the rank that sets it (`ring_group` / `local_group`: the group with the
// longest ring / local phases), into cost.bottleneck_rank and cost.bottleneck_phase.
void NameBottleneck(const std::vector<GroupCost>& groups, int ring_group, int local_group,
                    PlanCost& cost) {
  const bool ring_dominates = cost.ring_seconds >= cost.local_seconds;
  const int slowest_group = ring_dominates ? ring_group : local_group;
  if (slowest_group >= 0) {
    const GroupCost& group = groups[slowest_group];
    double worst = -1;
    for (const RankCost& member : group.members) {
      const double seconds = ring_dominates ? member.attention_seconds + member.ring_exposed_seconds
                                            : member.linear_seconds + member.all_to_all_seconds;
      if (seconds > worst) {
        worst = seconds;
        cost.bottleneck_rank = member.rank;
      }
    }
    if (ring_dominates)
      cost.bottleneck_phase =
          std::max(group.ring_comm_fwd, cost.ring_chain_seconds) > group.attn_compute_fwd
              ? "ring communication"
              : "attention compute";
    else
      cost.bottleneck_phase = group.a2a > group.lin_fwd ? "all-to-all" : "linear compute";
  }
  if (cost.grad_sync_seconds > std::max(cost.local_seconds, cost.ring_seconds))
    cost.bottleneck_phase = "gradient synchronization";
}

// Memory feasibility: every rank over its capacity makes the plan infeasible; the message names
// the first.
void CheckMemory(const Plan& plan, const Cluster& cluster, PlanCost& cost) {
  for (const RankCost& rank_cost : cost.ranks) {
    if (rank_cost.memory_bytes <= rank_cost.memory_capacity_bytes) continue;
    cost.feasible = false;
    if (!cost.infeasible_reason.empty()) continue;
    int64_t tokens = 0;
    size_t heads = 0;
    if (rank_cost.group >= 0)
      for (const PlanMember& member : plan.groups[rank_cost.group].members)
        if (member.rank == rank_cost.rank) {
          tokens = TotalTokens(member.tokens);
          heads = member.heads.size();
        }
    cost.infeasible_reason =
        "rank " + std::to_string(rank_cost.rank) + " (" + cluster.device(rank_cost.rank).name +
        ") needs " + Gib(rank_cost.memory_bytes) + " for " + std::to_string(tokens) + " tokens x " +
        std::to_string(heads) + " heads (model state " +
        Gib(rank_cost.memory.weights + rank_cost.memory.gradients + rank_cost.memory.optimizer) +
        ", activations " + Gib(rank_cost.memory.activations) + ", attention " +
        Gib(rank_cost.memory.attention_working + rank_cost.memory.ring_buffers) + "), has " +
        Gib(rank_cost.memory_capacity_bytes);
  }
}

// Primary holders as member indices of `group` (-1: no member needs the KV head), into `out`.
void PrimaryMembers(const PlanGroup& group, int num_heads, int num_kv_heads,
                    std::vector<int>& out) {
  out.assign(num_kv_heads, -1);
  for (size_t i = 0; i < group.members.size(); ++i) {
    int last = -1;  // a member's heads are sorted: each KV head's run is looked up once
    for (int head : group.members[i].heads) {
      const int kv = KvHeadOf(head, num_heads, num_kv_heads);
      if (kv == last) continue;
      last = kv;
      if (out[kv] < 0) out[kv] = static_cast<int>(i);
    }
  }
}

// Groups of more members keep the local phase with every member ready together (an upper
// bound): StaggeredAllToAll's pair table is members^2 entries (32 MB at this size).
constexpr size_t kMaxStaggeredMembers = 1024;

// A rank's four ports, each busy on its own: NVLink and NIC, send and receive.
enum Port : int { kSendIntra = 0, kSendInter = 1, kRecvIntra = 2, kRecvInter = 3, kPorts = 4 };

double BusiestPort(const std::vector<double>& ports, size_t member) {
  const double* first = &ports[member * kPorts];
  return *std::max_element(first, first + kPorts);
}

// Charges `seconds` to the sending member's and the receiving member's ports (-1: not in the
// group being scored) of the link a -> b.
void ChargePorts(const Cluster& cluster, std::vector<double>& ports, int sender, int receiver,
                 int a, int b, double seconds) {
  const bool intra = cluster.SameNode(a, b);
  if (sender >= 0) ports[sender * kPorts + (intra ? kSendIntra : kSendInter)] += seconds;
  if (receiver >= 0) ports[receiver * kPorts + (intra ? kRecvIntra : kRecvInter)] += seconds;
}

// The ring's message streams: each (stream, link) pays the link latency once per message it
// carries. A message carries every KV head routed over its link (the layer schedule sends one per
// block, segment and link), so the per-KV-head loops charge a (stream, link) only the first time.
enum LatencyStream : int {
  kKvStream = 0,         // K/V blocks along the chains and to replicas
  kPartialStream = 1,    // dK/dV partials, replica -> primary
  kSumInStream = 2,      // dK/dV sums fed in along a chain
  kSumOutStream = 3,     // dK/dV sums passed on or returned
  kOwnReturnStream = 4,  // the total of the group's own block, back from its chain's end
};
// The (stream, from, to) keys charged in one scoring: an open-addressing set, emptied in O(1) by
// moving to a new epoch (a slot holds a key only if its epoch is the current one).
class LatencySeen {
 public:
  void Clear() {
    size_ = 0;
    if (++epoch_ != 0) return;
    std::fill(epochs_.begin(), epochs_.end(), 0);  // the epoch wrapped: forget every slot
    epoch_ = 1;
  }
  // Adds the key; false if it was there.
  bool Insert(LatencyStream stream, int from, int to) {
    if (2 * (size_ + 1) > keys_.size()) Grow();
    const uint64_t key = (static_cast<uint64_t>(stream) << kStreamShift) |
                         (static_cast<uint64_t>(from) << kRankBits) | static_cast<uint64_t>(to);
    if (!Place(key)) return false;
    ++size_;
    return true;
  }

 private:
  static constexpr int kRankBits = 28;  // ranks below 2^28
  static constexpr int kStreamShift = 2 * kRankBits;
  static_assert(kMaxRanks <= int64_t{1} << kRankBits);
  static constexpr size_t kInitialSlots = 64;
  // Puts `key` in its slot (linear probing); false if it is there already.
  bool Place(uint64_t key) {
    const size_t mask = keys_.size() - 1;
    for (size_t slot = (key * 0x9E3779B97F4A7C15ull) >> 32 & mask;; slot = (slot + 1) & mask) {
      if (epochs_[slot] != epoch_) {
        epochs_[slot] = epoch_;
        keys_[slot] = key;
        return true;
      }
      if (keys_[slot] == key) return false;
    }
  }
  void Grow() {
    std::vector<uint64_t> live;
    for (size_t slot = 0; slot < keys_.size(); ++slot)
      if (epochs_[slot] == epoch_) live.push_back(keys_[slot]);
    const size_t slots = std::max(kInitialSlots, 2 * keys_.size());
    keys_.assign(slots, 0);
    epochs_.assign(slots, 0);
    for (uint64_t key : live) Place(key);
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> epochs_;
  uint32_t epoch_ = 1;
  size_t size_ = 0;
};

// `messages` x the latency of link from -> to, the first time (stream, from, to) is charged in
// this scoring (recorded in `seen`); 0 after.
double LatencyOnce(const LinkTable& links, LatencySeen& seen, LatencyStream stream, int from,
                   int to, int messages) {
  if (!seen.Insert(stream, from, to)) return 0.0;
  return messages * links.Latency(from, to);
}

}  // namespace

// Per-thread work arrays of EvaluateGroup, so scoring a group allocates only its result.
struct CostModel::GroupScratch {
  std::vector<int64_t> tokens;
  std::vector<int> heads, kv_heads;
  std::vector<double> tokens_real, heads_real, kv_heads_real, lin, a2a, replica_copy, ring_chain;
  std::vector<double> ring_fwd, ring_bwd;  // per member: its ring phase, forward and backward
  std::vector<double> release;             // per member: when its all-to-all pieces may leave
  // Member a -> member b, from LocalPhase: the seconds of a's Q/K/V piece to b and of its O
  // piece to b on their own, the link's latency and whether it stays in the node.
  struct PairLink {
    double qkv_seconds = 0, o_seconds = 0, latency = 0;
    bool intra = false;
  };
  std::vector<PairLink> pair_links;  // [member a * members + member b]
  double a2a_qkv = 0, a2a_o = 0;     // LocalPhase's exchange times, every member ready together
  std::vector<int> by_release;       // members in order of release
  std::vector<double> kv_ports, return_ports;  // [member * kPorts + port] seconds
  std::vector<uint8_t> needs;  // [member * num_kv + kv head]: the member holds a query head of it
  std::vector<int> mine;
  LatencySeen latency_seen;  // ring (stream, link)s already charged their latency
  ChainTraffic traffic;
  std::vector<std::pair<int, std::vector<int>>> peer_primaries;  // (plan group, rank per KV head)
  size_t peers_used = 0;                                         // entries valid this scoring
  std::vector<int> peer_members;
};

CostModel::CostModel(Problem problem, CostConstants constants)
    : problem_(std::move(problem)), k_(constants), links_(problem_.cluster) {}

CostModel::CostModel(const Cluster& cluster, const ModelSpec& model, const Workload& workload,
                     CostConstants constants)
    : CostModel(Problem{cluster, model, workload}, constants) {}

PlanCost Evaluate(const Problem& problem, const Plan& plan) {
  return CostModel(problem).Evaluate(plan);
}

const std::string& CostModel::InputHash() const {
  std::call_once(input_hash_->once, [this] { input_hash_->value = hexiseq::InputHash(problem_); });
  return input_hash_->value;
}

double CostModel::LinearForwardFlopsPerToken() const {
  return 2.0 * problem_.model.LayerGemmParams();
}

double CostModel::KvBytesPerTokenPerKvHead() const {
  return 2.0 * problem_.model.head_dim * problem_.workload.bytes_per_element;
}

double CostModel::TransferSeconds(int a, int b, double bytes) const {
  if (bytes <= 0 || a == b) return 0;
  return links_.Latency(a, b) + bytes / links_.Bandwidth(a, b);
}

double CostModel::GradBucketBytes() const {
  return problem_.model.GradBucketParams() * problem_.workload.bytes_per_element;
}

int CostModel::GradSyncPasses() const {
  constexpr int kZero3Passes = 3;  // all-gather (forward), all-gather (backward), reduce-scatter
  constexpr int kAllReducePasses = 2;  // reduce-scatter + all-gather
  return problem_.workload.zero_stage >= 3 ? kZero3Passes : kAllReducePasses;
}

std::vector<int> CostModel::NodeParticipants(const Plan& plan) const {
  std::vector<int> node_ranks;
  for (const NodeInfo& node : problem_.cluster.nodes) node_ranks.push_back(node.num_ranks);
  for (int rank : plan.left_out)
    if (rank >= 0 && rank < problem_.cluster.num_ranks())
      --node_ranks[problem_.cluster.ranks[rank].node];
  return node_ranks;
}

double CostModel::GradSyncPassSeconds() const {
  std::vector<int> node_ranks;
  for (const NodeInfo& node : problem_.cluster.nodes) node_ranks.push_back(node.num_ranks);
  return GradSyncPassSeconds(node_ranks);
}

double CostModel::GradSyncPassSeconds(const std::vector<int>& node_ranks) const {
  std::vector<int> nodes;  // the nodes that take part, in cluster order
  int participants = 0;
  for (size_t index = 0; index < problem_.cluster.nodes.size(); ++index) {
    if (node_ranks[index] <= 0) continue;
    nodes.push_back(static_cast<int>(index));
    participants += node_ranks[index];
  }
  if (participants <= 1) return 0;
  const double bucket = GradBucketBytes();
  // Phase A: each node's ring; every port carries one flow per step.
  double intra_seconds = 0;
  for (int index : nodes) {
    const int gpus = node_ranks[index];
    if (gpus <= 1) continue;
    const NodeKind& kind = problem_.cluster.kinds[problem_.cluster.nodes[index].kind];
    const double step = kind.latency_seconds + bucket / gpus / kind.intra_node_bytes_per_second;
    intra_seconds = std::max(intra_seconds, (gpus - 1) * step);
  }
  const int num_nodes = static_cast<int>(nodes.size());
  if (num_nodes <= 1) return intra_seconds;
  // Phase B: the ring over nodes, every step bounded by its slowest node-to-node hop. A receiving
  // GPU takes ceil(g_i / g_next) of the sender's flows on its NIC port.
  double slowest_step = 0;
  for (int index = 0; index < num_nodes; ++index) {
    const NodeInfo& from = problem_.cluster.nodes[nodes[index]];
    const NodeInfo& to = problem_.cluster.nodes[nodes[(index + 1) % num_nodes]];
    const int from_gpus = node_ranks[nodes[index]];
    const int to_gpus = node_ranks[nodes[(index + 1) % num_nodes]];
    const int flows_per_receiver = (from_gpus + to_gpus - 1) / to_gpus;
    const double rate = std::min({links_.Bandwidth(from.first_rank, to.first_rank),
                                  problem_.cluster.NicPortBandwidth(to.kind) / flows_per_receiver,
                                  problem_.cluster.NicPortBandwidth(from.kind)});
    const double flow_bytes = bucket / num_nodes / from_gpus;
    slowest_step =
        std::max(slowest_step, links_.Latency(from.first_rank, to.first_rank) + flow_bytes / rate);
  }
  return intra_seconds + (num_nodes - 1) * slowest_step;
}

double CostModel::GradSyncTotalSeconds() const {
  return SyncTotalSeconds(GradSyncPasses() * GradSyncPassSeconds(),
                          SyncRoundsOf(problem_.workload.batch));
}

bool CostModel::SyncsEverySequence() const { return problem_.workload.zero_stage >= 2; }

double CostModel::SyncRoundsOf(int most_sequences) const {
  return SyncsEverySequence() ? most_sequences : 1.0;
}

double CostModel::SyncBuckets(double rounds) const {
  if (problem_.workload.zero_stage >= 3) return rounds;
  if (problem_.workload.zero_stage == 2) return (rounds + 1) / 2;  // a pass is half a bucket
  return 1;
}

double CostModel::SyncTotalSeconds(double bucket_seconds, double rounds) const {
  return SyncBuckets(rounds) * problem_.model.layers * bucket_seconds;
}

double CostModel::WholeGradientsSavingBound() const {
  const double pass = GradSyncPassSeconds();
  const double per_sequence =
      std::max(pass, problem_.model.layers * pass - LeastBackwardWindowSeconds());
  return (problem_.workload.batch - 1) * per_sequence;
}

double CostModel::LeastBackwardWindowSeconds() const {
  double gemm_rate = 0, attention_rate = 0;
  for (int rank = 0; rank < problem_.cluster.num_ranks(); ++rank) {
    const DeviceSpec& device = problem_.cluster.device(rank);
    gemm_rate += device.GemmFlops() * RateCurve::Largest(device.rate_curve.gemm);
    attention_rate += device.AttentionFlops() * RateCurve::Largest(device.rate_curve.attention);
  }
  const double tokens = static_cast<double>(problem_.workload.seq_len);
  const double pairs = static_cast<double>(CausalPrefixPairs({{0, problem_.workload.seq_len}}));
  const double linear = k_.linear_backward_factor * tokens * LinearForwardFlopsPerToken();
  const double attention =
      k_.attention_backward_factor *
      AttentionForwardFlops(problem_.model.head_dim, problem_.model.heads, pairs);
  return problem_.model.layers * (linear / gemm_rate + attention / attention_rate);
}

double CostModel::SyncRounds(const Plan& plan) const {
  int busiest = 0;
  for (int replica = 0; replica < NumReplicas(plan); ++replica)
    busiest = std::max(busiest, ReplicaSequences(plan, replica));
  return SyncRoundsOf(busiest);
}

double CostModel::GradSyncTotalSeconds(const Plan& plan) const {
  return SyncTotalSeconds(GradSyncBucketSeconds(plan), SyncRounds(plan));
}

MemoryBreakdown CostModel::ModelStateMemory() const {
  return ModelStateMemory(problem_.cluster.num_ranks());
}

int CostModel::ShardRanks(const Plan& plan) const {
  if (problem_.workload.shard_ranks > 0) return problem_.workload.shard_ranks;
  return plan.num_ranks - static_cast<int>(plan.left_out.size());
}

MemoryBreakdown CostModel::ModelStateMemory(int shard_ranks) const {
  const double params = problem_.model.TotalParams();
  const double shard_count = std::max(1, shard_ranks);
  const int zero_stage = problem_.workload.zero_stage;
  MemoryBreakdown memory;
  memory.weights = k_.weight_bytes_per_param * params / (zero_stage >= 3 ? shard_count : 1.0);
  if (zero_stage >= 3)
    memory.weights += 2 * k_.weight_bytes_per_param * problem_.model.LayerGemmParams();  // prefetch
  memory.gradients =
      problem_.workload.bytes_per_element * params / (zero_stage >= 2 ? shard_count : 1.0);
  memory.optimizer = k_.optimizer_bytes_per_param * params / (zero_stage >= 1 ? shard_count : 1.0);
  return memory;
}

std::vector<CostModel::RingContext> CostModel::RingContexts(const Plan& plan) {
  const int num_groups = static_cast<int>(plan.groups.size());
  std::vector<int> active;
  int64_t max_tokens = 0;
  for (int g = 0; g < num_groups; ++g) {
    const int64_t tokens = TotalTokens(plan.groups[g].tokens);
    if (tokens > 0) active.push_back(g);
    max_tokens = std::max(max_tokens, tokens);
  }
  std::vector<RingContext> out(num_groups);
  for (int g = 0; g < num_groups; ++g) out[g] = {g, g, static_cast<int>(active.size()), max_tokens};
  const int num_active = static_cast<int>(active.size());
  for (int i = 0; i < num_active; ++i) {
    out[active[i]].prev = active[(i + num_active - 1) % num_active];
    out[active[i]].next = active[(i + 1) % num_active];
  }
  return out;
}

GroupCost CostModel::EvaluateGroup(const Plan& plan, int group_index, const RingContext& ring,
                                   const ChainIndex& chains) const {
  const PlanGroup& group = plan.groups[group_index];
  const int num_heads = problem_.model.heads, num_kv = problem_.model.kv_heads;
  const int64_t group_tokens = TotalTokens(group.tokens);
  const size_t num_members = group.members.size();
  const MemoryBreakdown state = ModelStateMemory(ShardRanks(plan));

  GroupCost out;
  out.members.resize(num_members);
  thread_local GroupScratch scratch;
  std::vector<int64_t>& tokens = scratch.tokens;
  std::vector<int>& heads = scratch.heads;
  std::vector<int>& kv_heads = scratch.kv_heads;
  std::vector<uint8_t>& needs = scratch.needs;
  tokens.assign(num_members, 0);
  heads.assign(num_members, 0);
  kv_heads.assign(num_members, 0);
  needs.assign(num_members * num_kv, 0);
  for (size_t i = 0; i < num_members; ++i) {
    const PlanMember& member = group.members[i];
    tokens[i] = TotalTokens(member.tokens);
    heads[i] = static_cast<int>(member.heads.size());
    for (int head : member.heads) {
      uint8_t& need = needs[i * num_kv + KvHeadOf(head, num_heads, num_kv)];
      kv_heads[i] += need == 0;
      need = 1;
    }
    RankCost& rank_cost = out.members[i];
    rank_cost.rank = member.rank;
    rank_cost.group = group_index;
    rank_cost.memory = state;
    rank_cost.memory_capacity_bytes = problem_.cluster.device(member.rank).memory_bytes *
                                      (1.0 - problem_.workload.memory_reserve);
  }
  auto finish_memory = [&]() {
    for (RankCost& rank_cost : out.members) {
      rank_cost.memory_bytes = rank_cost.memory.total();
      const double frac = rank_cost.memory_bytes / rank_cost.memory_capacity_bytes;
      if (frac > out.max_memory_fraction || out.worst_memory_rank < 0) {
        out.max_memory_fraction = frac;
        out.worst_memory_rank = rank_cost.rank;
      }
    }
  };
  if (group_tokens == 0) {  // idle group: model state only
    finish_memory();
    return out;
  }
  LocalPhase(group, scratch, out);
  RingPortTimes(plan, group_index, ring, chains, scratch, out);
  MemberFigures(group, ring, scratch, out);
  StaggeredLocal(group, scratch, out);
  finish_memory();
  return out;
}

// Local phase: all-to-all in (Q, K, V), all-to-all out (O), linear layers.
void CostModel::LocalPhase(const PlanGroup& group, GroupScratch& scratch, GroupCost& out) const {
  const size_t num_members = group.members.size();
  const double head_dim = problem_.model.head_dim, bytes = problem_.workload.bytes_per_element;
  const std::vector<int64_t>& tokens = scratch.tokens;
  const std::vector<int>& heads = scratch.heads;
  const std::vector<int>& kv_heads = scratch.kv_heads;
  // A rank's transfer time is the larger of its send and receive totals, with intra-node
  // (NVLink) and inter-node (NIC) traffic on separate links.
  // Bytes member i sends to member j: the same expressions as AllToAllBytes, without the matrix.
  std::vector<double>& tokens_real = scratch.tokens_real;
  std::vector<double>& heads_real = scratch.heads_real;
  std::vector<double>& kv_heads_real = scratch.kv_heads_real;
  tokens_real.resize(num_members);
  heads_real.resize(num_members);
  kv_heads_real.resize(num_members);
  for (size_t i = 0; i < num_members; ++i) {
    tokens_real[i] = static_cast<double>(tokens[i]);
    heads_real[i] = static_cast<double>(heads[i]);
    kv_heads_real[i] = static_cast<double>(kv_heads[i]);
  }
  auto bytes_of = [&](bool inbound, size_t i, size_t j) {
    return inbound ? tokens_real[i] * (heads_real[j] + 2 * kv_heads_real[j]) * head_dim * bytes
                   : tokens_real[j] * heads_real[i] * head_dim * bytes;
  };
  // Both all-to-alls of member r in one pass over its peers: each pair's latency and bandwidth
  // are looked up once. The pieces to (from) different peers are in flight at once, so a port's
  // time is its bytes over the links' bandwidths plus one latency (the largest), not one per
  // piece.
  auto a2a_times = [&](size_t r, double* in_time, double* out_time) {
    double acc[2][4] = {};  // [inbound, outbound][send intra, send inter, recv intra, recv inter]
    double latency_of[2][4] = {};
    const int rank = group.members[r].rank;
    for (size_t j = 0; j < num_members; ++j) {
      if (j == r) continue;
      const int peer_rank = group.members[j].rank;
      const bool intra = problem_.cluster.SameNode(rank, peer_rank);
      const double latency = links_.Latency(rank, peer_rank),
                   bandwidth = links_.Bandwidth(rank, peer_rank);
      if (!scratch.pair_links.empty())
        scratch.pair_links[r * num_members + j] = {
            bytes_of(true, r, j) / bandwidth, bytes_of(false, r, j) / bandwidth, latency, intra};
      for (int dir = 0; dir < 2; ++dir) {
        const bool inbound = dir == 0;
        const double send = bytes_of(inbound, r, j), recv = bytes_of(inbound, j, r);
        for (const auto& [bytes, port] : {std::pair{send, intra ? 0 : 1}, {recv, intra ? 2 : 3}}) {
          if (bytes <= 0) continue;
          acc[dir][port] += bytes / bandwidth;
          latency_of[dir][port] = std::max(latency_of[dir][port], latency);
        }
      }
    }
    for (int dir = 0; dir < 2; ++dir)
      for (int port = 0; port < 4; ++port) acc[dir][port] += latency_of[dir][port];
    *in_time = std::max({acc[0][0], acc[0][1], acc[0][2], acc[0][3]});
    *out_time = std::max({acc[1][0], acc[1][1], acc[1][2], acc[1][3]});
  };
  const double lin_flops_per_token = LinearForwardFlopsPerToken();
  const double mlp_fraction = problem_.model.MlpParams() / problem_.model.LayerGemmParams();
  double a2a_in = 0, a2a_out = 0, lin_max = 0;
  std::vector<double>& lin = scratch.lin;
  std::vector<double>& a2a = scratch.a2a;
  lin.resize(num_members);
  a2a.resize(num_members);
  scratch.pair_links.resize(num_members <= kMaxStaggeredMembers ? num_members * num_members : 0);
  for (size_t i = 0; i < num_members; ++i) {
    lin[i] = tokens[i] * lin_flops_per_token / LinearRate(group.members[i].rank, tokens[i]);
    double qkv_time = 0, o_time = 0;
    if (num_members > 1) a2a_times(i, &qkv_time, &o_time);
    a2a[i] = qkv_time + o_time;
    a2a_in = std::max(a2a_in, qkv_time);
    a2a_out = std::max(a2a_out, o_time);
    lin_max = std::max(lin_max, lin[i]);
  }
  scratch.a2a_qkv = a2a_in;
  scratch.a2a_o = a2a_out;
  out.local_fwd = a2a_out + lin_max + a2a_in;  // all members ready together; see StaggeredLocal
  out.local_bwd = a2a_out + k_.linear_backward_factor * lin_max + a2a_in;
  out.recompute = mlp_fraction * lin_max;  // used by selective recompute only
  out.lin_fwd = lin_max;
}

// One all-to-all of a group whose member j enters the phase at scratch.release[j] (<= 0; the
// last one at 0): a piece leaves once both its ends are in the phase (the runtime's exchange is a
// rendezvous), each port takes its pieces one after another in order of their start, then its
// largest latency. With every release equal this is LocalPhase's port total. Seconds after the
// last member entered. Peers are visited in order of release, so a port's pieces come in order of
// their start (the later of the two ends') without a sort per port.
double CostModel::StaggeredAllToAll(const PlanGroup& group, bool qkv, GroupScratch& scratch) const {
  const size_t num_members = group.members.size();
  const std::vector<double>& release = scratch.release;
  std::vector<int>& order = scratch.by_release;
  order.resize(num_members);
  for (size_t i = 0; i < num_members; ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return release[x] < release[y]; });
  constexpr double kIdle = -std::numeric_limits<double>::infinity();
  double done = 0;
  for (size_t r = 0; r < num_members; ++r) {
    double finish[kPorts] = {kIdle, kIdle, kIdle, kIdle}, latency_of[kPorts] = {};
    for (int j : order) {
      if (static_cast<size_t>(j) == r) continue;
      const GroupScratch::PairLink& link = scratch.pair_links[r * num_members + j];
      const GroupScratch::PairLink& back = scratch.pair_links[j * num_members + r];
      const double start = std::max(release[r], release[j]);
      const double send = qkv ? link.qkv_seconds : link.o_seconds;
      const double receive = qkv ? back.qkv_seconds : back.o_seconds;
      for (const auto& [seconds, port] : {std::pair{send, link.intra ? kSendIntra : kSendInter},
                                          {receive, link.intra ? kRecvIntra : kRecvInter}}) {
        if (seconds <= 0) continue;
        finish[port] = std::max(finish[port], start) + seconds;
        latency_of[port] = std::max(latency_of[port], link.latency);
      }
    }
    for (int port = 0; port < kPorts; ++port)
      if (finish[port] != kIdle) done = std::max(done, finish[port] + latency_of[port]);
  }
  return done;
}

// The local phase again, now that each member's ring phase is known: members that finish their
// ring (or their linear layers) early start their all-to-all pieces early, so part of the
// exchange hides behind the slowest member's work. Forward: O out after the ring, Q/K/V in after
// the linear layers; backward: dQ/dK/dV out after the ring, dO in after the linear layers.
void CostModel::StaggeredLocal(const PlanGroup& group, GroupScratch& scratch,
                               GroupCost& out) const {
  const size_t num_members = group.members.size();
  if (num_members < 2 || num_members > kMaxStaggeredMembers) return;
  auto exchange = [&](const std::vector<double>& ready, double scale, bool qkv) {
    const auto [first, last] = std::minmax_element(ready.begin(), ready.end());
    if (*first == *last) return qkv ? scratch.a2a_qkv : scratch.a2a_o;
    scratch.release.resize(num_members);
    for (size_t i = 0; i < num_members; ++i) scratch.release[i] = scale * (ready[i] - *last);
    return StaggeredAllToAll(group, qkv, scratch);
  };
  const double factor = k_.linear_backward_factor;
  out.local_fwd = exchange(scratch.ring_fwd, 1, /*qkv=*/false) + out.lin_fwd +
                  exchange(scratch.lin, 1, /*qkv=*/true);
  out.local_bwd = exchange(scratch.ring_bwd, 1, /*qkv=*/true) + factor * out.lin_fwd +
                  exchange(scratch.lin, factor, /*qkv=*/false);
}

std::vector<CostModel::RingRankBytes> CostModel::RingBytesPerRank(const Plan& plan,
                                                                  bool backward) const {
  std::vector<RingRankBytes> out(problem_.cluster.num_ranks());
  const double per_token = KvBytesPerTokenPerKvHead();
  ChainTraffic traffic;
  ChainIndex chains;
  chains.Build(plan);
  std::vector<int> primary;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const PlanGroup& group = plan.groups[g];
    chains.Traffic(static_cast<int>(g), traffic);
    PrimaryMembers(group, problem_.model.heads, problem_.model.kv_heads, primary);
    const int64_t kv_in = traffic.kv_in();
    for (int kv = 0; kv < problem_.model.kv_heads; ++kv) {
      if (primary[kv] < 0) continue;
      RingRankBytes& first = out[group.members[primary[kv]].rank];
      first.kv_received += kv_in * per_token;
      first.kv_sent += traffic.kv_out() * per_token;
      if (backward) {
        first.dkv_sent += ChainTraffic::Total(traffic.sums_to) * per_token;
        first.dkv_received +=
            (ChainTraffic::Total(traffic.sums_from) + traffic.own_return) * per_token;
      }
      for (size_t member = 0; member < group.members.size(); ++member) {
        if (static_cast<int>(member) == primary[kv]) continue;
        const bool holds = std::any_of(
            group.members[member].heads.begin(), group.members[member].heads.end(), [&](int head) {
              return KvHeadOf(head, problem_.model.heads, problem_.model.kv_heads) == kv;
            });
        if (!holds) continue;
        RingRankBytes& replica = out[group.members[member].rank];
        first.kv_sent += kv_in * per_token;
        replica.kv_received += kv_in * per_token;
        if (backward) {
          replica.dkv_sent += kv_in * per_token;
          first.dkv_received += kv_in * per_token;
        }
      }
    }
  }
  return out;
}

// The world rank of KV head `kv_head`'s primary in plan group `group_index` (-1: no member needs
// it), with each group's primaries computed once per scoring.
int CostModel::PeerPrimary(const Plan& plan, int group_index, int kv_head,
                           GroupScratch& scratch) const {
  auto& peers = scratch.peer_primaries;
  for (size_t index = 0; index < scratch.peers_used; ++index)
    if (peers[index].first == group_index) return peers[index].second[kv_head];
  if (scratch.peers_used == peers.size()) peers.emplace_back();
  auto& [group, ranks] = peers[scratch.peers_used++];  // storage reused across scorings
  group = group_index;
  PrimaryMembers(plan.groups[group_index], problem_.model.heads, problem_.model.kv_heads,
                 scratch.peer_members);
  ranks.resize(scratch.peer_members.size());
  for (size_t kv = 0; kv < ranks.size(); ++kv) {
    const int member = scratch.peer_members[kv];
    ranks[kv] = member < 0 ? -1 : plan.groups[group_index].members[member].rank;
  }
  return ranks[kv_head];
}

// Ring phase traffic: per member and port, the sub-ring K/V transfers (from and to the groups its
// blocks come from and go to, and to replicas) and the backward's dK/dV partials and sums, with
// the layer schedule's byte counts and links (GroupChainTraffic).
void CostModel::RingPortTimes(const Plan& plan, int group_index, const RingContext& ring,
                              const ChainIndex& chains, GroupScratch& scratch,
                              GroupCost& out) const {
  const PlanGroup& group = plan.groups[group_index];
  const size_t num_members = group.members.size();
  const int num_heads = problem_.model.heads, num_kv = problem_.model.kv_heads;
  const std::vector<uint8_t>& needs = scratch.needs;
  const int steps = ring.ring_size;
  std::vector<double>& kv_ports = scratch.kv_ports;
  std::vector<double>& return_ports = scratch.return_ports;
  // replica_copy: per member, seconds per token of block of the copies it receives from its
  // primaries (the chains' arrival at a replica, RingChainBounds).
  std::vector<double>& replica_copy = scratch.replica_copy;
  // ring_chain: seconds per token of block on each primary's incoming ring link (the averaged
  // chain of rings too long for the recurrence, RingChainOf).
  std::vector<double>& ring_chain = scratch.ring_chain;
  kv_ports.assign(num_members * kPorts, 0);
  return_ports.assign(num_members * kPorts, 0);
  replica_copy.assign(num_members, 0);
  ring_chain.assign(num_members, 0);
  if (steps <= 1) return;

  std::vector<int>& mine_member = scratch.mine;
  PrimaryMembers(group, num_heads, num_kv, mine_member);
  scratch.peers_used = 0;
  ChainTraffic& traffic = scratch.traffic;
  chains.Traffic(group_index, traffic);
  const int64_t kv_in = traffic.kv_in();
  const double per_token = KvBytesPerTokenPerKvHead();
  scratch.latency_seen.Clear();
  auto link_latency = [&](int a, int b, int blocks) {
    return LatencyOnce(links_, scratch.latency_seen, kKvStream, a, b, blocks);
  };
  int visiting = 0;  // blocks that visit the group: each is one message to each replica
  for (const PeerTraffic& peer : traffic.kv_from) visiting += peer.blocks;
  for (int kv_head = 0; kv_head < num_kv; ++kv_head) {
    const int primary = mine_member[kv_head];
    if (primary < 0) continue;
    const int mine = group.members[primary].rank;
    for (const PeerTraffic& peer : traffic.kv_from) {
      const int before = PeerPrimary(plan, peer.group, kv_head, scratch);
      if (before < 0 || before == mine) continue;
      const double bandwidth = links_.Bandwidth(before, mine);
      ChargePorts(problem_.cluster, kv_ports, -1, primary, before, mine,
                  link_latency(before, mine, peer.blocks) + peer.tokens * per_token / bandwidth);
      if (peer.group == ring.prev) {
        ring_chain[primary] += per_token / bandwidth;
        out.chain_latency = std::max(out.chain_latency, links_.Latency(before, mine));
      }
    }
    for (const PeerTraffic& peer : traffic.kv_to) {
      const int after = PeerPrimary(plan, peer.group, kv_head, scratch);
      if (after < 0 || after == mine) continue;
      ChargePorts(problem_.cluster, kv_ports, primary, -1, mine, after,
                  link_latency(mine, after, peer.blocks) +
                      peer.tokens * per_token / links_.Bandwidth(mine, after));
    }
    // Replicas: other members needing KV head `kv_head` get it from the primary over group links.
    for (size_t i = 0; i < num_members; ++i) {
      if (static_cast<int>(i) == primary) continue;
      if (!needs[i * num_kv + kv_head] || kv_in == 0) continue;
      const int replica = group.members[i].rank;
      const double copy = per_token / links_.Bandwidth(mine, replica);
      ChargePorts(problem_.cluster, kv_ports, primary, static_cast<int>(i), mine, replica,
                  link_latency(mine, replica, visiting) + kv_in * copy);
      replica_copy[i] += copy;
    }
    DkvSumTimes(plan, group_index, kv_head, scratch);
  }
  out.replica_seconds_per_token = *std::max_element(replica_copy.begin(), replica_copy.end());
}

// Backward, KV head `kv_head`: replicas' partials to the primary; sums fed in by the previous
// groups and passed on to the next ones (or returned to the owners of the chains it ends); its own
// block's total from the last group of its chain.
void CostModel::DkvSumTimes(const Plan& plan, int group_index, int kv_head,
                            GroupScratch& scratch) const {
  const PlanGroup& group = plan.groups[group_index];
  const int num_kv = problem_.model.kv_heads;
  const ChainTraffic& traffic = scratch.traffic;
  std::vector<double>& ports = scratch.return_ports;
  const int primary = scratch.mine[kv_head];
  const int mine = group.members[primary].rank;
  const double per_token = KvBytesPerTokenPerKvHead();
  auto charge = [&](LatencyStream stream, int sender, int receiver, int from, int to,
                    int64_t tokens, int blocks) {
    if (tokens <= 0 || from < 0 || to < 0 || from == to) return;
    ChargePorts(problem_.cluster, ports, sender, receiver, from, to,
                LatencyOnce(links_, scratch.latency_seen, stream, from, to, blocks) +
                    tokens * per_token / links_.Bandwidth(from, to));
  };
  const int64_t kv_in = traffic.kv_in();
  int visiting = 0;
  for (const PeerTraffic& peer : traffic.kv_from) visiting += peer.blocks;
  for (size_t i = 0; i < group.members.size(); ++i)
    if (static_cast<int>(i) != primary && scratch.needs[i * num_kv + kv_head])
      charge(kPartialStream, static_cast<int>(i), primary, group.members[i].rank, mine, kv_in,
             visiting);
  for (const PeerTraffic& peer : traffic.sums_from)
    charge(kSumInStream, -1, primary, PeerPrimary(plan, peer.group, kv_head, scratch), mine,
           peer.tokens, peer.blocks);
  for (const PeerTraffic& peer : traffic.sums_to)
    charge(kSumOutStream, primary, -1, mine, PeerPrimary(plan, peer.group, kv_head, scratch),
           peer.tokens, peer.blocks);
  if (traffic.own_returner >= 0)
    charge(kOwnReturnStream, -1, primary, PeerPrimary(plan, traffic.own_returner, kv_head, scratch),
           mine, traffic.own_return, 1);
}

// Per member: the ring phase forward and backward (attention overlapped with its busiest port),
// the per-iteration figures and the memory.
void CostModel::MemberFigures(const PlanGroup& group, const RingContext& ring,
                              GroupScratch& scratch, GroupCost& out) const {
  const size_t num_members = group.members.size();
  const int64_t group_tokens = TotalTokens(group.tokens);
  const std::vector<int64_t>& tokens = scratch.tokens;
  const std::vector<int>& heads = scratch.heads;
  const std::vector<int>& kv_heads = scratch.kv_heads;
  const std::vector<double>& lin = scratch.lin;
  const std::vector<double>& a2a = scratch.a2a;
  const std::vector<double>& kv_ports = scratch.kv_ports;
  const std::vector<double>& return_ports = scratch.return_ports;
  const std::vector<double>& ring_chain = scratch.ring_chain;
  const double mlp_fraction = problem_.model.MlpParams() / problem_.model.LayerGemmParams();
  const int64_t causal_pairs = CausalPrefixPairs(group.tokens);
  const int64_t diag_pairs = CausalPairs(group.tokens, group.tokens);
  const int steps = ring.ring_size;
  scratch.ring_fwd.resize(num_members);
  scratch.ring_bwd.resize(num_members);
  for (size_t i = 0; i < num_members; ++i) {
    const int rank = group.members[i].rank;
    const double attention_rate = AttentionRate(rank, group_tokens);
    const double gemm_rate = LinearRate(rank, tokens[i]);
    const double compute =
        AttentionForwardFlops(problem_.model.head_dim, heads[i], causal_pairs) / attention_rate;
    const double first =
        AttentionForwardFlops(problem_.model.head_dim, heads[i], diag_pairs) / attention_rate;
    const double comm = BusiestPort(kv_ports, i);
    // Backward: K/V go round again while dK/dV returns use their own links (ports add up).
    double comm_bwd = 0, returns = 0;
    for (int port = 0; port < kPorts; ++port) {
      comm_bwd = std::max(comm_bwd, kv_ports[i * kPorts + port] + return_ports[i * kPorts + port]);
      returns = std::max(returns, return_ports[i * kPorts + port]);
    }
    out.chain_seconds_per_token = std::max(out.chain_seconds_per_token, ring_chain[i]);
    out.seconds_per_pair =
        std::max(out.seconds_per_pair,
                 AttentionForwardFlops(problem_.model.head_dim, heads[i], 1.0) / attention_rate);
    double fwd = compute, bwd = k_.attention_backward_factor * compute;
    if (steps > 1) {
      const double last = (compute - first) / (steps - 1);
      const double last_return = returns / (steps - 1);
      fwd = std::max(compute, comm + last);
      out.last_block_fwd = std::max(out.last_block_fwd, last);
      // Backward: every block's compute, then the last block's dK/dV leaving; or the busiest
      // port's K/V and dK/dV traffic, but for that last sum (it can only leave once its block is
      // computed), then the last block's compute and that sum.
      bwd = std::max(k_.attention_backward_factor * compute + last_return,
                     comm_bwd + k_.attention_backward_factor * last);
    }
    out.ring_fwd = std::max(out.ring_fwd, fwd);
    out.ring_bwd = std::max(out.ring_bwd, bwd);
    scratch.ring_fwd[i] = fwd;
    scratch.ring_bwd[i] = bwd;
    out.attn_compute_fwd = std::max(out.attn_compute_fwd, compute);
    out.ring_comm_fwd = std::max(out.ring_comm_fwd, comm);

    // Per-iteration figures for this rank.
    RankCost& rank_cost = out.members[i];
    const double layers = problem_.model.layers * problem_.workload.batch;
    const bool full = problem_.workload.recompute == Recompute::kFull;
    const bool selective = problem_.workload.recompute == Recompute::kSelective;
    const double head_flops = 2.0 * tokens[i] * problem_.model.vocab * problem_.model.hidden;
    rank_cost.linear_seconds =
        layers * lin[i] *
            (1 + k_.linear_backward_factor +
             (full        ? 1
              : selective ? mlp_fraction
                          : 0)) +
        problem_.workload.batch * (1 + k_.linear_backward_factor) * head_flops / gemm_rate;
    rank_cost.attention_seconds =
        layers * compute * (1 + k_.attention_backward_factor + (full ? 1 : 0));
    rank_cost.all_to_all_seconds = layers * a2a[i] * (2 + (full ? 1 : 0));
    rank_cost.ring_comm_seconds = layers * (comm * (1 + (full ? 1 : 0)) + comm_bwd);
    rank_cost.ring_exposed_seconds = layers * ((fwd - compute) * (full ? 2 : 1) +
                                               (bwd - k_.attention_backward_factor * compute));
    out.head_seconds =
        std::max(out.head_seconds, (1 + k_.linear_backward_factor) * head_flops / gemm_rate);

    ActivationMemory(tokens[i], heads[i], kv_heads[i], group_tokens, ring, rank_cost.memory);
  }
}

// Activations, attention working set, ring buffers and logits of a member holding `tokens`
// tokens and `query_heads` heads (`kv_heads` KV heads) of a group of `group_tokens` tokens.
void CostModel::ActivationMemory(int64_t tokens, int query_heads, int kv_heads,
                                 int64_t group_tokens, const RingContext& ring,
                                 MemoryBreakdown& mem) const {
  const double head_dim = problem_.model.head_dim, bytes = problem_.workload.bytes_per_element;
  const double hidden = problem_.model.hidden;
  const double mlp_act = problem_.model.MlpParams() / hidden;  // MLP intermediate values per token
  const double token_act = bytes * (4 * hidden + mlp_act);     // norms, MLP in, MLP intermediate
  const double head_act = group_tokens * (head_dim * bytes * (2.0 * query_heads + 2.0 * kv_heads) +
                                          4.0 * query_heads);  // Q,O,K,V,LSE
  switch (problem_.workload.recompute) {
    case Recompute::kFull:
      mem.activations =
          problem_.model.layers * tokens * hidden * bytes + tokens * token_act + head_act;
      break;
    case Recompute::kSelective:
      mem.activations =
          problem_.model.layers * (tokens * (token_act - bytes * mlp_act) + head_act) +
          tokens * bytes * mlp_act;
      break;
    case Recompute::kNone:
      mem.activations = problem_.model.layers * (tokens * token_act + head_act);
      break;
  }
  mem.attention_working =
      group_tokens * head_dim * (query_heads * (bytes + 4.0) + kv_heads * 2 * 4.0);
  const double block = static_cast<double>(ring.max_group_tokens) * kv_heads * 2 * head_dim;
  mem.ring_buffers = ring.ring_size > 1 ? k_.ring_buffers * block * (bytes + 4.0) : 0;
  mem.logits = std::min<int64_t>(tokens, k_.loss_chunk_tokens) * problem_.model.vocab * 4.0 * 2;
}

std::vector<std::vector<double>> CostModel::AllToAllBytes(const PlanGroup& group,
                                                          bool inbound) const {
  const size_t num_members = group.members.size();
  const double head_dim = problem_.model.head_dim, bytes = problem_.workload.bytes_per_element;
  std::vector<double> tokens(num_members), heads(num_members), kv_heads(num_members);
  for (size_t i = 0; i < num_members; ++i) {
    tokens[i] = static_cast<double>(TotalTokens(group.members[i].tokens));
    heads[i] = static_cast<double>(group.members[i].heads.size());
    kv_heads[i] = static_cast<double>(
        KvHeadsOf(group.members[i].heads, problem_.model.heads, problem_.model.kv_heads).size());
  }
  std::vector<std::vector<double>> out(num_members, std::vector<double>(num_members, 0.0));
  for (size_t i = 0; i < num_members; ++i)
    for (size_t j = 0; j < num_members; ++j) {
      if (i == j) continue;
      out[i][j] = inbound ? tokens[i] * (heads[j] + 2 * kv_heads[j]) * head_dim * bytes
                          : tokens[j] * heads[i] * head_dim * bytes;
    }
  return out;
}

CostModel::RingChain CostModel::RingChainOf(const Plan& plan,
                                            const std::vector<GroupCost>& groups) const {
  int active = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    if (TotalTokens(plan.groups[g].tokens) > 0) ++active;
  RingChain out;
  if (active <= 1) return out;
  if (active > kChainRecurrenceMaxGroups) return AveragedChain(plan, groups);
  const ChainBounds chains = RingChainBounds(plan, groups);
  out.bounds = chains.fwd > 0 || chains.bwd > 0;
  out.seconds = chains.latest_arrival;
  out.ring_fwd_floor = chains.fwd;
  out.ring_bwd_floor = chains.bwd;
  out.recompute_and_bwd_floor = chains.recompute_and_bwd;
  return out;
}

CostModel::RingChain CostModel::AveragedChain(const Plan& plan,
                                              const std::vector<GroupCost>& groups) const {
  // The largest block crosses every ring link but the one into its own group (K - 1 of K), one
  // message per hop, at the average of the groups' slowest incoming links.
  int active = 0;
  int64_t max_tokens = 0;
  double chain_per_token = 0, chain_latency = 0, last_block = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    last_block = std::max(last_block, groups[g].last_block_fwd);
    const int64_t tokens = TotalTokens(plan.groups[g].tokens);
    if (tokens == 0) continue;
    ++active;
    max_tokens = std::max(max_tokens, tokens);
    chain_per_token += groups[g].chain_seconds_per_token;
    chain_latency = std::max(chain_latency, groups[g].chain_latency);
  }
  RingChain out;
  out.bounds = true;
  out.seconds = static_cast<double>(max_tokens) * chain_per_token * (active - 1) / active +
                (active - 1) * chain_latency;
  out.ring_fwd_floor = out.seconds + last_block;
  out.ring_bwd_floor = out.seconds + k_.attention_backward_factor * last_block;
  return out;
}

std::pair<double, double> CostModel::HopSecondsPerToken(const int* from_primaries,
                                                        const int* to_primaries) const {
  const double per_token = KvBytesPerTokenPerKvHead();
  thread_local std::vector<std::pair<int, double>> sends, receives;  // (rank, seconds per token)
  sends.clear();
  receives.clear();
  auto add = [](std::vector<std::pair<int, double>>& ports, int rank, double seconds) {
    for (auto& port : ports)
      if (port.first == rank) {
        port.second += seconds;
        return;
      }
    ports.push_back({rank, seconds});
  };
  double latency = 0;
  for (int kv = 0; kv < problem_.model.kv_heads; ++kv) {
    const int from = from_primaries[kv], to = to_primaries[kv];
    if (from < 0 || to < 0 || from == to) continue;
    const double seconds = per_token / links_.Bandwidth(from, to);
    add(sends, from, seconds);
    add(receives, to, seconds);
    latency = std::max(latency, links_.Latency(from, to));
  }
  double slowest = 0;
  for (const auto& port : sends) slowest = std::max(slowest, port.second);
  for (const auto& port : receives) slowest = std::max(slowest, port.second);
  return {slowest, latency};
}

namespace {

// The link id of (from, to) among the links made so far (per sender, its receivers and ids),
// made when new; `made` is set when it was.
int LinkId(std::vector<std::vector<std::pair<int, int>>>& links_from, int from, int to,
           int& num_links, bool& made) {
  for (const auto& [receiver, id] : links_from[from])
    if (receiver == to) {
      made = false;
      return id;
    }
  links_from[from].push_back({to, num_links});
  made = true;
  return num_links++;
}

}  // namespace

void CostModel::BuildChainRing(const Plan& plan, const std::vector<GroupCost>& costs,
                               ChainRing& ring, std::vector<int>& ring_to_plan) const {
  const int num_kv = problem_.model.kv_heads;
  thread_local std::vector<TokenSpan> spans;
  thread_local std::vector<int> primaries, members;  // primaries: [ring group * num_kv + kv head]
  ring.groups.clear();
  ring_to_plan.clear();
  spans.clear();
  primaries.clear();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const TokenSpan span = SpanOf(plan.groups[g].tokens);
    if (span.tokens == 0) continue;
    const Ranges& tokens = plan.groups[g].tokens;
    ring.groups.push_back({static_cast<double>(span.tokens), costs[g].seconds_per_pair,
                           costs[g].replica_seconds_per_token,
                           static_cast<double>(CausalPairs(tokens, tokens))});
    ring_to_plan.push_back(static_cast<int>(g));
    spans.push_back(span);
    PrimaryMembers(plan.groups[g], problem_.model.heads, num_kv, members);
    for (int member : members)
      primaries.push_back(member < 0 ? -1 : plan.groups[g].members[member].rank);
  }
  const int size = static_cast<int>(ring.groups.size());
  auto hop_cost = [&](int from, int to) {
    return HopSecondsPerToken(&primaries[from * num_kv], &primaries[to * num_kv]);
  };
  // Chains, origin by origin: every group with a causal pair in ring order, then home.
  thread_local std::vector<std::vector<std::pair<int, int>>> links_from;
  thread_local std::vector<std::pair<double, double>> link_cost;  // per link: per token, latency
  links_from.assign(size, {});
  link_cost.clear();
  ring.num_links = 0;
  ring.begin.assign(1, 0);
  ring.hops.clear();
  ring.origin_of.clear();
  for (int origin = 0; origin < size; ++origin) {
    const double tokens = ring.groups[origin].tokens;
    int from = origin;
    for (int distance = 1; distance < size; ++distance) {
      const int to = (origin + distance) % size;
      if (spans[to].last < spans[origin].first) continue;  // no causal pair
      bool made = false;
      const int link = LinkId(links_from, from, to, ring.num_links, made);
      if (made) link_cost.push_back(hop_cost(from, to));
      const auto [per_token, latency] = link_cost[link];
      const double pairs = static_cast<double>(CausalPairs(
          plan.groups[ring_to_plan[to]].tokens, plan.groups[ring_to_plan[origin]].tokens));
      ring.hops.push_back({to, link, tokens * per_token, latency, pairs});
      ring.origin_of.push_back(origin);
      from = to;
    }
    if (from != origin) {  // the dK/dV total, home
      const auto [per_token, latency] = hop_cost(from, origin);
      ring.hops.push_back({origin, -1, tokens * per_token, latency, 0.0});
      ring.origin_of.push_back(origin);
    }
    ring.begin.push_back(static_cast<int>(ring.hops.size()));
  }
  // The order links send in: by ring distance, then origin (a counting sort of the visiting hops).
  thread_local std::vector<int> by_distance;
  by_distance.assign(size + 1, 0);
  auto distance_of = [&](int hop) {
    return (ring.hops[hop].to - ring.origin_of[hop] + size) % size;
  };
  for (int origin = 0; origin < size; ++origin)
    for (int hop = ring.begin[origin]; hop + 1 < ring.begin[origin + 1]; ++hop)
      ++by_distance[distance_of(hop) + 1];
  for (int distance = 0; distance < size; ++distance)
    by_distance[distance + 1] += by_distance[distance];
  ring.send_order.assign(by_distance[size], -1);
  for (int origin = 0; origin < size; ++origin)
    for (int hop = ring.begin[origin]; hop + 1 < ring.begin[origin + 1]; ++hop)
      ring.send_order[by_distance[distance_of(hop)]++] = hop;
}

ChainBounds CostModel::RingChainBounds(const Plan& plan,
                                       const std::vector<GroupCost>& groups) const {
  thread_local ChainRing ring;
  thread_local std::vector<int> ring_to_plan;
  thread_local std::vector<double> local_fwd, local_bwd;
  BuildChainRing(plan, groups, ring, ring_to_plan);
  local_fwd.clear();
  local_bwd.clear();
  for (int plan_index : ring_to_plan) {
    local_fwd.push_back(groups[plan_index].local_fwd);
    local_bwd.push_back(groups[plan_index].local_bwd);
  }
  return SteadyChainBounds(ring, local_fwd, local_bwd, k_.attention_backward_factor,
                           problem_.workload.recompute == Recompute::kFull);
}

PlanCost CostModel::Combine(const Plan& plan, const std::vector<GroupCost>& groups) const {
  PlanCost cost;
  cost.ranks.resize(problem_.cluster.num_ranks());
  for (int rank = 0; rank < problem_.cluster.num_ranks(); ++rank) cost.ranks[rank].rank = rank;
  double local_fwd = 0, ring_fwd = 0, local_bwd = 0, ring_bwd = 0, selective = 0, head = 0;
  int local_group = -1, ring_group = -1;
  double max_fraction = -1;
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupCost& gc = groups[g];
    if (gc.local_fwd + gc.local_bwd > local_fwd + local_bwd) local_group = static_cast<int>(g);
    if (gc.ring_fwd + gc.ring_bwd > ring_fwd + ring_bwd) ring_group = static_cast<int>(g);
    local_fwd = std::max(local_fwd, gc.local_fwd);
    ring_fwd = std::max(ring_fwd, gc.ring_fwd);
    local_bwd = std::max(local_bwd, gc.local_bwd);
    ring_bwd = std::max(ring_bwd, gc.ring_bwd);
    selective = std::max(selective, gc.recompute);
    head = std::max(head, gc.head_seconds);
    for (const RankCost& rank_cost : gc.members) cost.ranks[rank_cost.rank] = rank_cost;
    if (gc.max_memory_fraction > max_fraction) {
      max_fraction = gc.max_memory_fraction;
      cost.max_memory_fraction = gc.max_memory_fraction;
    }
  }
  // The blocks' chains bound the ring phase from below.
  const RingChain chain = RingChainOf(plan, groups);
  cost.ring_chain_seconds = chain.seconds;
  chain.Raise(ring_fwd, ring_bwd);
  const double fwd = local_fwd + ring_fwd;
  double recompute = 0;
  if (problem_.workload.recompute == Recompute::kFull) recompute = fwd;
  if (problem_.workload.recompute == Recompute::kSelective) recompute = selective;
  const double layers = problem_.model.layers * problem_.workload.batch;
  cost.local_seconds = layers * (local_fwd + local_bwd);
  cost.ring_seconds = layers * (ring_fwd + ring_bwd);
  cost.recompute_seconds = layers * recompute;
  cost.head_seconds = problem_.workload.batch * head;

  // Gradient synchronization over the participating ranks (weights are replicated across CP
  // and HP), overlapped with the compute of its window except for the last bucket.
  const double busy =
      cost.local_seconds + cost.ring_seconds + cost.recompute_seconds + cost.head_seconds;
  const double rounds = SyncRoundsOf(problem_.workload.batch);
  cost.sync_window_seconds =
      SyncWindowSeconds(busy, problem_.model.layers * (local_bwd + ring_bwd + recompute));
  cost.forward_window_seconds = problem_.model.layers * fwd;
  cost.grad_sync_seconds =
      ExposedGradSync(plan, cost.sync_window_seconds, cost.forward_window_seconds, rounds);
  cost.optimizer_seconds = OptimizerStepSeconds(plan);
  cost.iteration_seconds = busy + cost.grad_sync_seconds + cost.optimizer_seconds;
  cost.replica_busy_seconds = {busy};
  cost.tokens_per_second = problem_.workload.batch *
                           static_cast<double>(problem_.workload.seq_len) / cost.iteration_seconds;
  for (const GroupCost& gc : groups)
    for (const RankCost& member : gc.members)
      cost.ranks[member.rank].grad_sync_seconds = cost.grad_sync_seconds;

  NameBottleneck(groups, ring_group, local_group, cost);
  CheckMemory(plan, problem_.cluster, cost);
  return cost;
}

double CostModel::OptimizerStepBytes(const Plan& plan) const {
  if (!problem_.workload.charge_optimizer_step) return 0;
  const double shards = problem_.workload.zero_stage >= 1 ? std::max(1, ShardRanks(plan)) : 1;
  return k_.optimizer_step_bytes_per_param * problem_.model.TotalParams() / shards;
}

double CostModel::OptimizerStepSeconds(const Plan& plan, int rank) const {
  const double bandwidth = problem_.cluster.device(rank).hbm_bytes_per_second;
  // left_out is sorted (Validate).
  if (bandwidth <= 0 || std::binary_search(plan.left_out.begin(), plan.left_out.end(), rank))
    return 0;
  return OptimizerStepBytes(plan) / bandwidth;
}

double CostModel::OptimizerStepSeconds(const Plan& plan) const {
  double slowest = 0;
  for (int rank = 0; rank < plan.num_ranks; ++rank)
    slowest = std::max(slowest, OptimizerStepSeconds(plan, rank));
  return slowest;
}

double CostModel::ExposedGradSync(const Plan& plan, double window_seconds, double forward_seconds,
                                  double rounds) const {
  const double bucket = GradSyncBucketSeconds(plan);
  return StageExposedSyncSeconds(bucket, SyncTotalSeconds(bucket, rounds), window_seconds,
                                 forward_seconds, rounds);
}

double CostModel::StageExposedSyncSeconds(double bucket_seconds, double total_seconds,
                                          double window_seconds, double forward_seconds,
                                          double rounds) const {
  const int stage = problem_.workload.zero_stage;
  if (stage >= 3) return ExposedSyncSeconds(rounds * bucket_seconds, total_seconds, window_seconds);
  const double round_total =
      total_seconds / SyncBuckets(rounds);  // one bucket's passes, all layers
  const double both = ExposedSyncSeconds(bucket_seconds, round_total, window_seconds);
  if (stage < 1) return both;
  // One pass of each bucket: the reduce-scatter in the backward, the all-gather in the forward.
  const double half_bucket = bucket_seconds / 2, half_total = round_total / 2;
  const double reduce_scatter = ExposedSyncSeconds(half_bucket, half_total, window_seconds);
  const double split =
      reduce_scatter + ExposedSyncSeconds(half_bucket, half_total, forward_seconds);
  // ZeRO 2: every sequence before the last reduce-scatters its gradients behind its backward.
  return std::min(both, split) + (rounds - 1) * reduce_scatter;
}

double CostModel::ReplicasForwardWindowSeconds(const std::vector<double>& forward_seconds) {
  if (forward_seconds.empty()) return 0;
  return *std::min_element(forward_seconds.begin(), forward_seconds.end());
}

double CostModel::SyncWindowSeconds(double busy_seconds, double backward_seconds) const {
  if (problem_.workload.zero_stage >= 3) return busy_seconds;
  return std::min(busy_seconds, backward_seconds);
}

double CostModel::ReplicasSyncWindowSeconds(const std::vector<double>& busy_seconds,
                                            const std::vector<double>& window_seconds) {
  double slowest = 0, last_opening = 0;
  for (size_t replica = 0; replica < busy_seconds.size(); ++replica) {
    slowest = std::max(slowest, busy_seconds[replica]);
    last_opening = std::max(last_opening, busy_seconds[replica] - window_seconds[replica]);
  }
  return std::max(0.0, slowest - last_opening);
}

double CostModel::GradSyncBucketSeconds(const Plan& plan) const {
  return GradSyncPasses() * GradSyncPassSeconds(NodeParticipants(plan));
}

double CostModel::ExposedSyncSeconds(double bucket_seconds, double total_seconds,
                                     double busy_seconds) {
  return std::max(bucket_seconds, total_seconds - busy_seconds);
}

namespace {

// Whether replica plan `b` on ranks `ranks_b` is replica plan `a` on `ranks_a` moved to other
// ranks that the cost model cannot tell apart: the i-th smallest rank of one maps to the i-th of
// the other, mapped ranks have the same node kind, two ranks share a node in one iff their images
// share a node in the other, and groups, members, tokens and heads agree under the map. (A
// replica's figures depend on its ranks only through their kinds and which of them share a node;
// the gradient sync, which depends on the whole plan, is charged after.)
bool SameReplicaElsewhere(const Cluster& cluster, const Plan& a, const std::vector<int>& ranks_a,
                          const Plan& b, const std::vector<int>& ranks_b) {
  if (a.batch != b.batch || ranks_a.size() != ranks_b.size() || a.groups.size() != b.groups.size())
    return false;
  const size_t size = ranks_a.size();
  for (size_t index = 0; index < size; ++index)
    if (cluster.ranks[ranks_a[index]].kind != cluster.ranks[ranks_b[index]].kind) return false;
  // The node pattern: (node of a's rank, node of b's rank) pairs pair each node with one node,
  // both ways.
  std::vector<std::pair<int, int>> nodes(size);
  for (size_t index = 0; index < size; ++index)
    nodes[index] = {cluster.ranks[ranks_a[index]].node, cluster.ranks[ranks_b[index]].node};
  for (int side = 0; side < 2; ++side) {
    std::sort(nodes.begin(), nodes.end());
    for (size_t index = 1; index < size; ++index)
      if (nodes[index].first == nodes[index - 1].first &&
          nodes[index].second != nodes[index - 1].second)
        return false;
    for (auto& [first, second] : nodes) std::swap(first, second);
  }
  const auto image = [&](int rank_a) {
    const auto found = std::lower_bound(ranks_a.begin(), ranks_a.end(), rank_a);
    return found == ranks_a.end() || *found != rank_a ? -1 : ranks_b[found - ranks_a.begin()];
  };
  const auto mapped = [&](int rank_a, int rank_b) { return image(rank_a) == rank_b; };
  for (size_t group = 0; group < a.groups.size(); ++group) {
    const PlanGroup& group_a = a.groups[group];
    const PlanGroup& group_b = b.groups[group];
    if (group_a.tokens != group_b.tokens || group_a.members.size() != group_b.members.size() ||
        !std::equal(group_a.ranks.begin(), group_a.ranks.end(), group_b.ranks.begin(),
                    group_b.ranks.end(), mapped))
      return false;
    for (size_t member = 0; member < group_a.members.size(); ++member) {
      const PlanMember& member_a = group_a.members[member];
      const PlanMember& member_b = group_b.members[member];
      if (!mapped(member_a.rank, member_b.rank) || member_a.tokens != member_b.tokens ||
          member_a.heads != member_b.heads)
        return false;
    }
  }
  return true;
}

}  // namespace

PlanCost CostModel::EvaluateReplicas(const Plan& plan) const {
  Workload replica_workload = problem_.workload;
  replica_workload.shard_ranks = ShardRanks(plan);
  replica_workload.charge_optimizer_step = false;  // charged once, in CombineReplicas
  const int replicas = NumReplicas(plan);
  // Each replica is evaluated unless an earlier one is the same on other ranks
  // (SameReplicaElsewhere): then `source` names that one and its figures are moved over.
  const std::vector<Plan> replica_plans = ReplicaPlans(plan);
  std::vector<std::vector<int>> members;
  std::vector<PlanCost> parts(replicas);  // evaluated replicas only; the others stay empty
  std::vector<int> source;
  for (int replica = 0; replica < replicas; ++replica) {
    members.push_back(ParticipatingRanks(replica_plans[replica]));
    int twin = 0;
    while (twin < replica &&
           !(source[twin] == twin &&
             SameReplicaElsewhere(problem_.cluster, replica_plans[twin], members[twin],
                                  replica_plans[replica], members[replica])))
      ++twin;
    source.push_back(twin);
    if (twin < replica) continue;
    replica_workload.batch = ReplicaSequences(plan, replica);
    parts[replica] = CostModel(problem_.cluster, problem_.model, replica_workload, k_)
                         .Evaluate(replica_plans[replica]);
  }
  return CombineReplicas(plan, parts, members, source);
}

PlanCost CostModel::CombineReplicas(const Plan& plan, const std::vector<PlanCost>& parts,
                                    const std::vector<std::vector<int>>& members,
                                    const std::vector<int>& source) const {
  auto busy = [&](int replica) { return parts[source[replica]].replica_busy_seconds.front(); };
  int slowest = 0;  // the first of the slowest: an evaluated replica
  for (int replica = 0; replica < static_cast<int>(members.size()); ++replica)
    if (busy(replica) > busy(slowest)) slowest = replica;
  // The slowest replica sets the phases and the bottleneck; every rank keeps its own figures.
  PlanCost cost = parts[source[slowest]];
  const double slowest_busy = busy(slowest);
  cost.replica_busy_seconds.clear();
  cost.feasible = true;
  cost.infeasible_reason.clear();
  for (size_t replica = 0; replica < members.size(); ++replica) {
    cost.replica_busy_seconds.push_back(busy(replica));
    const PlanCost& part = parts[source[replica]];
    const std::vector<int>& from = members[source[replica]];
    for (size_t index = 0; index < from.size(); ++index) {
      cost.ranks[members[replica][index]] = part.ranks[from[index]];
      cost.ranks[members[replica][index]].rank = members[replica][index];
    }
    cost.max_memory_fraction = std::max(cost.max_memory_fraction, part.max_memory_fraction);
    if (part.feasible || !cost.feasible) continue;
    cost.feasible = false;
    cost.infeasible_reason = "replica " + std::to_string(replica) + ": " + part.infeasible_reason;
  }
  for (int rank : plan.left_out) cost.ranks[rank] = RankCost{.rank = rank};
  std::vector<double> windows, forwards;
  for (size_t replica = 0; replica < members.size(); ++replica) {
    windows.push_back(parts[source[replica]].sync_window_seconds);
    forwards.push_back(parts[source[replica]].forward_window_seconds);
  }
  cost.sync_window_seconds = ReplicasSyncWindowSeconds(cost.replica_busy_seconds, windows);
  cost.forward_window_seconds = ReplicasForwardWindowSeconds(forwards);
  cost.grad_sync_seconds = ExposedGradSync(plan, cost.sync_window_seconds,
                                           cost.forward_window_seconds, SyncRounds(plan));
  for (const std::vector<int>& ranks : members)
    for (int rank : ranks) cost.ranks[rank].grad_sync_seconds = cost.grad_sync_seconds;
  cost.optimizer_seconds = OptimizerStepSeconds(plan);
  cost.iteration_seconds = slowest_busy + cost.grad_sync_seconds + cost.optimizer_seconds;
  cost.tokens_per_second =
      plan.batch * static_cast<double>(problem_.workload.seq_len) / cost.iteration_seconds;
  if (cost.grad_sync_seconds > std::max(cost.local_seconds, cost.ring_seconds))
    cost.bottleneck_phase = "gradient synchronization";
  return cost;
}

PlanCost CostModel::Evaluate(const Plan& plan) const {
  if (NumReplicas(plan) > 1) return EvaluateReplicas(plan);
  const std::vector<RingContext> rings = RingContexts(plan);
  ChainIndex chains;
  chains.Build(plan);
  std::vector<GroupCost> groups;
  groups.reserve(plan.groups.size());
  for (size_t g = 0; g < plan.groups.size(); ++g)
    groups.push_back(EvaluateGroup(plan, static_cast<int>(g), rings[g], chains));
  return Combine(plan, groups);
}

double LinearPhaseFlops(const ModelSpec& model, Recompute recompute, int64_t tokens,
                        const CostConstants& constants) {
  const double token_count = static_cast<double>(tokens);
  const double mlp_fraction = model.MlpParams() / model.LayerGemmParams();
  const double rec = recompute == Recompute::kFull        ? 1.0
                     : recompute == Recompute::kSelective ? mlp_fraction
                                                          : 0.0;
  const double layer =
      token_count * 2.0 * model.LayerGemmParams() * (1 + constants.linear_backward_factor + rec);
  const double head =
      2.0 * token_count * model.vocab * model.hidden * (1 + constants.linear_backward_factor);
  return model.layers * layer + head;
}

double CostModel::TotalLinearFlops() const {
  return problem_.workload.batch * LinearPhaseFlops(problem_.model, problem_.workload.recompute,
                                                    problem_.workload.seq_len, k_);
}

double CostModel::TotalAttentionFlops() const {
  const double pairs = static_cast<double>(CausalPrefixPairs({{0, problem_.workload.seq_len}}));
  const double rec = problem_.workload.recompute == Recompute::kFull ? 1.0 : 0.0;
  return problem_.workload.batch * problem_.model.layers *
         AttentionForwardFlops(problem_.model.head_dim, problem_.model.heads, pairs) *
         (1 + k_.attention_backward_factor + rec);
}

double CostModel::LinearRate(int rank, int64_t tokens) const {
  return problem_.cluster.device(rank).GemmFlopsAt(static_cast<double>(tokens));
}

double CostModel::AttentionRate(int rank, int64_t query_tokens) const {
  return problem_.cluster.device(rank).AttentionFlopsAt(static_cast<double>(query_tokens));
}

double CostModel::IdealIterationSeconds() const {
  const double lin = TotalLinearFlops(), att = TotalAttentionFlops();
  // Devices sorted by attention/GEMM ratio: in an optimal split the ones relatively best at
  // GEMMs do the linear work. For a candidate time T, fill linear work in that order, then
  // check that the remaining device time covers the attention work. Bisect on T.
  std::vector<std::pair<double, double>> rates;  // (gemm, attention) FLOP/s
  for (int r = 0; r < problem_.cluster.num_ranks(); ++r) {
    const DeviceSpec& device = problem_.cluster.device(r);  // at its fastest size
    rates.push_back({device.GemmFlops() * RateCurve::Largest(device.rate_curve.gemm),
                     device.AttentionFlops() * RateCurve::Largest(device.rate_curve.attention)});
  }
  std::sort(rates.begin(), rates.end(),
            [](const auto& a, const auto& b) { return a.second / a.first < b.second / b.first; });
  auto fits = [&](double t) {
    double need_lin = lin, att_capacity = 0;
    for (const auto& [gemm, attn] : rates) {
      double time_left = t;
      if (need_lin > 0) {
        const double used = std::min(t, need_lin / gemm);
        need_lin -= used * gemm;
        time_left -= used;
      }
      att_capacity += time_left * attn;
    }
    return need_lin <= lin * 1e-12 && att_capacity >= att * (1 - 1e-12);
  };
  double lo = 0, hi = 1;
  while (!fits(hi)) hi *= 2;
  for (int iter = 0; iter < 100; ++iter) {
    const double mid = 0.5 * (lo + hi);
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

double CostModel::IdealTokensPerSecond() const {
  return problem_.workload.batch * static_cast<double>(problem_.workload.seq_len) /
         IdealIterationSeconds();
}

void AttachPrediction(Plan& plan, const PlanCost& cost) {
  PlanPrediction p;
  p.iteration_seconds = cost.iteration_seconds;
  p.tokens_per_second = cost.tokens_per_second;
  for (const RankCost& rank_cost : cost.ranks) {
    RankPrediction rp;
    rp.rank = rank_cost.rank;
    rp.memory_bytes = rank_cost.memory_bytes;
    rp.memory_capacity_bytes = rank_cost.memory_capacity_bytes;
    rp.compute_seconds = rank_cost.compute_seconds();
    rp.exposed_comm_seconds = rank_cost.exposed_comm_seconds();
    rp.total_comm_seconds = rank_cost.total_comm_seconds();
    p.ranks.push_back(rp);
  }
  plan.predicted = p;
}

}  // namespace hexiseq
