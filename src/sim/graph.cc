#include "sim/graph.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "spec/error.h"

namespace hexiseq::sim {
namespace {

int64_t Ns(double seconds) { return std::llround(seconds * 1e9); }

struct MemberInfo {
  int rank = 0;
  int64_t tokens = 0;
  int heads = 0;
  std::vector<int> kv;  // KV heads needed (sorted)
};

struct GroupInfo {
  Ranges tokens;
  int64_t num_tokens = 0;
  std::vector<MemberInfo> members;
  std::vector<int> primary;  // per KV head: the primary rank
};

// A KV segment: KV heads on which every group's ownership (primary and replica holders) is the
// same, so one message per ring step carries them all.
struct Segment {
  std::vector<int> kv_heads;
  std::vector<int> primary;                // per ring position: the primary rank
  std::vector<std::vector<int>> replicas;  // per ring position: other ranks needing it
};

// Priority keys: smaller runs first among a rank's ready compute ops.
uint64_t Priority(int pass_index, int stage, int step) {
  return (static_cast<uint64_t>(pass_index) << 40) | (static_cast<uint64_t>(stage) << 32) |
         static_cast<uint64_t>(step);
}

class Builder {
 public:
  Builder(const Plan& plan, const CostModel& cost, const GraphOptions& options, Engine& engine)
      : plan_(plan), cost_(cost), options_(options), engine_(engine) {}

  LayerGraph Build();

 private:
  int Compute(OpLabel label, int rank, double seconds, uint64_t priority, int arg = -1) {
    Op op;
    op.pass = pass_;
    op.layer = layer_;
    op.rank = rank;
    op.label = label;
    op.arg = arg;
    op.duration_ns = Ns(seconds);
    op.priority = priority;
    op.kind = op.duration_ns > 0 ? OpKind::kCompute : OpKind::kMarker;
    return engine_.Add(op);
  }
  int Message(OpLabel label, int from, int to, double bytes, int arg = -1) {
    Op op;
    op.kind = OpKind::kMessage;
    op.pass = pass_;
    op.layer = layer_;
    op.label = label;
    op.rank = from;
    op.peer = to;
    op.bytes = bytes;
    op.arg = arg;
    return engine_.Add(op);
  }
  int Marker(int rank) {
    Op op;
    op.pass = pass_;
    op.layer = layer_;
    op.rank = rank;
    return engine_.Add(op);
  }
  void Dep(int before, int after) {
    if (before >= 0) engine_.Depend(before, after);
  }

  void Prepare();
  void ForwardPass(PassMarks& marks);
  void BackwardPass(PassMarks& marks);
  // Positions visited by origin `o`'s block after leaving `o`, in ring order.
  std::vector<int> Path(int origin) const;
  std::vector<int> RingKvMessages(const std::vector<int>& start);
  double BlockBytes(int origin, int kv_count) const {
    return static_cast<double>(groups_[origin].num_tokens) * kv_count * kv_bytes_per_token_head_;
  }
  int KvOverlap(const MemberInfo& m, const Segment& seg) const {
    int n = 0;
    for (int g : seg.kv_heads)
      if (std::binary_search(m.kv.begin(), m.kv.end(), g)) ++n;
    return n;
  }
  double AttentionSeconds(const MemberInfo& m, int pos, int origin) const {
    const DeviceSpec& dev = cost_.cluster().device(m.rank);
    return 4.0 * cost_.model().head_dim * m.heads * static_cast<double>(pairs_[pos][origin]) /
           dev.AttentionFlops();
  }
  double GemmSeconds(const MemberInfo& m, double params) const {
    return 2.0 * static_cast<double>(m.tokens) * params /
           cost_.cluster().device(m.rank).GemmFlops();
  }

  const Plan& plan_;
  const CostModel& cost_;
  const GraphOptions& options_;
  Engine& engine_;

  std::vector<GroupInfo> groups_;  // active groups (with tokens), in ring order
  std::vector<Segment> segments_;
  std::vector<std::vector<int64_t>> pairs_;  // [pos][origin] causal pairs
  double kv_bytes_per_token_head_ = 0;
  double elem_bytes_ = 0, head_dim_ = 0;
  double qkv_params_ = 0, post_params_ = 0, mlp_params_ = 0;
  int num_ranks_ = 0;
  Pass pass_ = Pass::kForward;
  int layer_ = 0;
  int pass_index_ = 0;
  std::vector<int> prev_end_;  // per rank
};

void Builder::Prepare() {
  const ModelSpec& model = cost_.model();
  const int num_heads = model.heads, num_kv = model.kv_heads;
  num_ranks_ = cost_.cluster().num_ranks();
  elem_bytes_ = cost_.workload().bytes_per_element;
  head_dim_ = model.head_dim;
  kv_bytes_per_token_head_ = 2.0 * head_dim_ * elem_bytes_;
  const double h = model.hidden;
  qkv_params_ = h * num_heads * head_dim_ + 2.0 * h * num_kv * head_dim_;
  post_params_ = model.LayerGemmParams() - qkv_params_;
  mlp_params_ = (model.gated_mlp ? 3.0 : 2.0) * h * model.ffn_hidden;

  for (const PlanGroup& group : plan_.groups) {
    if (TotalTokens(group.tokens) == 0) continue;
    GroupInfo info;
    info.tokens = group.tokens;
    info.num_tokens = TotalTokens(group.tokens);
    info.primary.assign(num_kv, -1);
    for (const PlanMember& member : group.members) {
      MemberInfo m;
      m.rank = member.rank;
      m.tokens = TotalTokens(member.tokens);
      m.heads = static_cast<int>(member.heads.size());
      m.kv = KvHeadsOf(member.heads, num_heads, num_kv);
      for (int g : m.kv)
        if (info.primary[g] < 0) info.primary[g] = m.rank;
      info.members.push_back(std::move(m));
    }
    groups_.push_back(std::move(info));
  }
  const int steps = static_cast<int>(groups_.size());
  pairs_.assign(steps, std::vector<int64_t>(steps, 0));
  for (int pos = 0; pos < steps; ++pos)
    for (int origin = 0; origin < steps; ++origin)
      pairs_[pos][origin] = CausalPairs(groups_[pos].tokens, groups_[origin].tokens);

  // Segments: KV heads with the same (primary, replica set) in every group.
  std::map<std::vector<int>, int> by_signature;
  for (int g = 0; g < num_kv; ++g) {
    std::vector<int> signature;
    Segment seg;
    for (const GroupInfo& group : groups_) {
      signature.push_back(group.primary[g]);
      std::vector<int> replicas;
      for (const MemberInfo& m : group.members)
        if (m.rank != group.primary[g] && std::binary_search(m.kv.begin(), m.kv.end(), g))
          replicas.push_back(m.rank);
      signature.push_back(static_cast<int>(replicas.size()));
      signature.insert(signature.end(), replicas.begin(), replicas.end());
      seg.primary.push_back(group.primary[g]);
      seg.replicas.push_back(std::move(replicas));
    }
    auto [it, inserted] = by_signature.emplace(signature, static_cast<int>(segments_.size()));
    if (inserted) segments_.push_back(std::move(seg));
    segments_[it->second].kv_heads.push_back(g);
  }
}

std::vector<int> Builder::Path(int origin) const {
  const int steps = static_cast<int>(groups_.size());
  std::vector<int> path;
  for (int hop = 1; hop < steps; ++hop) path.push_back((origin + hop) % steps);
  if (options_.skip_masked_blocks) {
    while (!path.empty() && pairs_[path.back()][origin] == 0) path.pop_back();
  }
  return path;
}

// Sends every segment's K/V blocks round its sub-ring, each leaving its origin's primary after
// `start[primary]` and forwarded hop by hop (replicas get a copy where the block is needed).
// Returns arrival[(seg * steps + origin) * ranks + rank] = the op delivering that block there.
std::vector<int> Builder::RingKvMessages(const std::vector<int>& start) {
  const int steps = static_cast<int>(groups_.size());
  const int num_segs = static_cast<int>(segments_.size());
  std::vector<int> arrival(static_cast<size_t>(num_segs) * steps * num_ranks_, -1);
  auto at = [&](int seg, int origin, int rank) -> int& {
    return arrival[(static_cast<size_t>(seg) * steps + origin) * num_ranks_ + rank];
  };
  for (int seg = 0; seg < num_segs; ++seg) {
    const Segment& s = segments_[seg];
    for (int origin = 0; origin < steps; ++origin) {
      int prev = start[s.primary[origin]];
      int prev_pos = origin;
      for (int pos : Path(origin)) {
        const int msg = Message(OpLabel::kRingKv, s.primary[prev_pos], s.primary[pos],
                                BlockBytes(origin, static_cast<int>(s.kv_heads.size())), origin);
        Dep(prev, msg);
        at(seg, origin, s.primary[pos]) = msg;
        if (pairs_[pos][origin] > 0)
          for (int replica : s.replicas[pos]) {
            const MemberInfo* m = nullptr;
            for (const MemberInfo& cand : groups_[pos].members)
              if (cand.rank == replica) m = &cand;
            const int rep = Message(OpLabel::kReplicaKv, s.primary[pos], replica,
                                    BlockBytes(origin, KvOverlap(*m, s)), origin);
            Dep(msg, rep);
            at(seg, origin, replica) = rep;
          }
        prev = msg;
        prev_pos = pos;
      }
    }
  }
  return arrival;
}

void Builder::ForwardPass(PassMarks& marks) {
  const int steps = static_cast<int>(groups_.size());
  const int num_segs = static_cast<int>(segments_.size());
  marks.pass = pass_;
  marks.layer = layer_;
  marks.start = prev_end_;
  marks.local_in.assign(num_ranks_, -1);
  marks.ring_done.assign(num_ranks_, -1);
  marks.end.assign(num_ranks_, -1);
  std::vector<int> lin_pre(num_ranks_, -1), attn_done(num_ranks_, -1);

  // QKV GEMMs and the ragged all-to-all into head layout.
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& m : group.members) {
      lin_pre[m.rank] = Compute(OpLabel::kLinearPre, m.rank, GemmSeconds(m, qkv_params_),
                                Priority(pass_index_, 0, 0));
      Dep(prev_end_[m.rank], lin_pre[m.rank]);
      marks.local_in[m.rank] = Marker(m.rank);
      Dep(lin_pre[m.rank], marks.local_in[m.rank]);
    }
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& from : group.members)
      for (const MemberInfo& to : group.members) {
        if (from.rank == to.rank) continue;
        const double bytes = from.tokens * (to.heads + 2.0 * static_cast<double>(to.kv.size())) *
                             head_dim_ * elem_bytes_;
        if (bytes <= 0) continue;
        const int msg = Message(OpLabel::kAllToAllQkv, from.rank, to.rank, bytes);
        Dep(lin_pre[from.rank], msg);
        Dep(msg, marks.local_in[to.rank]);
      }

  // Sub-rings: the op delivering each (segment, origin) block to each rank.
  const std::vector<int> arrival = RingKvMessages(marks.local_in);
  auto at = [&](int seg, int origin, int rank) {
    return arrival[(static_cast<size_t>(seg) * steps + origin) * num_ranks_ + rank];
  };

  // Attention: the diagonal block first, then one op per arriving origin block.
  for (int pos = 0; pos < steps; ++pos)
    for (const MemberInfo& m : groups_[pos].members) {
      attn_done[m.rank] = Marker(m.rank);
      Dep(marks.local_in[m.rank], attn_done[m.rank]);
      if (m.heads == 0) continue;
      for (int hop = 0; hop < steps; ++hop) {
        const int origin = (pos - hop + steps) % steps;
        if (pairs_[pos][origin] == 0) continue;
        const int op = Compute(OpLabel::kAttention, m.rank, AttentionSeconds(m, pos, origin),
                               Priority(pass_index_, 1, hop), origin);
        Dep(marks.local_in[m.rank], op);
        if (hop > 0)
          for (int seg = 0; seg < num_segs; ++seg)
            if (KvOverlap(m, segments_[seg]) > 0) {
              HEXISEQ_CHECK(at(seg, origin, m.rank) >= 0, "a needed K/V block never arrives");
              Dep(at(seg, origin, m.rank), op);
            }
        Dep(op, attn_done[m.rank]);
      }
    }

  // All-to-all back to token layout, then output projection + MLP.
  std::vector<int> out_done(num_ranks_, -1);
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& m : group.members) {
      out_done[m.rank] = Marker(m.rank);
      Dep(attn_done[m.rank], out_done[m.rank]);
      marks.ring_done[m.rank] = attn_done[m.rank];
    }
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& from : group.members)
      for (const MemberInfo& to : group.members) {
        if (from.rank == to.rank) continue;
        const double bytes = static_cast<double>(to.tokens) * from.heads * head_dim_ * elem_bytes_;
        if (bytes <= 0) continue;
        const int msg = Message(OpLabel::kAllToAllO, from.rank, to.rank, bytes);
        Dep(attn_done[from.rank], msg);
        Dep(msg, out_done[to.rank]);
      }
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& m : group.members) {
      const int op = Compute(OpLabel::kLinearPost, m.rank, GemmSeconds(m, post_params_),
                             Priority(pass_index_, 2, 0));
      Dep(out_done[m.rank], op);
      marks.end[m.rank] = op;
      prev_end_[m.rank] = op;
    }
}

void Builder::BackwardPass(PassMarks& marks) {
  const int steps = static_cast<int>(groups_.size());
  const int num_segs = static_cast<int>(segments_.size());
  const CostConstants& k = cost_.constants();
  marks.pass = pass_;
  marks.layer = layer_;
  marks.start = prev_end_;
  marks.local_in.assign(num_ranks_, -1);
  marks.ring_done.assign(num_ranks_, -1);
  marks.end.assign(num_ranks_, -1);
  std::vector<int> post_bwd(num_ranks_, -1), dout_done(num_ranks_, -1);

  // Backward of output projection + MLP (after a selective MLP recompute), then dO into head
  // layout.
  const bool selective = cost_.workload().recompute == Recompute::kSelective;
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& m : group.members) {
      int before = prev_end_[m.rank];
      if (selective) {
        const int rec = Compute(OpLabel::kRecomputeMlp, m.rank, GemmSeconds(m, mlp_params_),
                                Priority(pass_index_, 0, 0));
        Dep(before, rec);
        before = rec;
      }
      post_bwd[m.rank] = Compute(OpLabel::kLinearPost, m.rank,
                                 k.linear_backward_factor * GemmSeconds(m, post_params_),
                                 Priority(pass_index_, 0, 1));
      Dep(before, post_bwd[m.rank]);
      dout_done[m.rank] = Marker(m.rank);
      Dep(post_bwd[m.rank], dout_done[m.rank]);
      marks.local_in[m.rank] = dout_done[m.rank];
    }
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& from : group.members)
      for (const MemberInfo& to : group.members) {
        if (from.rank == to.rank) continue;
        const double bytes = static_cast<double>(from.tokens) * to.heads * head_dim_ * elem_bytes_;
        if (bytes <= 0) continue;
        const int msg = Message(OpLabel::kAllToAllO, from.rank, to.rank, bytes);
        Dep(post_bwd[from.rank], msg);
        Dep(msg, dout_done[to.rank]);
      }

  // K/V go round again (from the start of the attention backward).
  const std::vector<int> arrival = RingKvMessages(dout_done);
  auto at = [&](int seg, int origin, int rank) {
    return arrival[(static_cast<size_t>(seg) * steps + origin) * num_ranks_ + rank];
  };

  // Attention backward per block.
  std::vector<std::vector<int>> attn_op(num_ranks_, std::vector<int>(steps, -1));  // [rank][origin]
  std::vector<int> ring_done(num_ranks_, -1);
  for (int pos = 0; pos < steps; ++pos)
    for (const MemberInfo& m : groups_[pos].members) {
      ring_done[m.rank] = Marker(m.rank);
      Dep(dout_done[m.rank], ring_done[m.rank]);
      if (m.heads == 0) continue;
      for (int hop = 0; hop < steps; ++hop) {
        const int origin = (pos - hop + steps) % steps;
        if (pairs_[pos][origin] == 0) continue;
        const int op = Compute(OpLabel::kAttention, m.rank,
                               k.attention_backward_factor * AttentionSeconds(m, pos, origin),
                               Priority(pass_index_, 1, hop), origin);
        Dep(dout_done[m.rank], op);
        if (hop > 0)
          for (int seg = 0; seg < num_segs; ++seg)
            if (KvOverlap(m, segments_[seg]) > 0) {
              HEXISEQ_CHECK(at(seg, origin, m.rank) >= 0, "a needed K/V block never arrives");
              Dep(at(seg, origin, m.rank), op);
            }
        Dep(op, ring_done[m.rank]);
        attn_op[m.rank][origin] = op;
      }
    }

  // dK/dV accumulators: start at the first group that needs the block, follow its path, and
  // return to the owner's primary.
  for (int seg = 0; seg < num_segs; ++seg) {
    const Segment& s = segments_[seg];
    for (int origin = 0; origin < steps; ++origin) {
      int acc = -1;
      int holder_pos = -1;
      for (int pos : Path(origin)) {
        if (acc >= 0) {  // forward the accumulator to this group's primary
          const int msg = Message(OpLabel::kRingDkv, s.primary[holder_pos], s.primary[pos],
                                  BlockBytes(origin, static_cast<int>(s.kv_heads.size())), origin);
          Dep(acc, msg);
          acc = msg;
        }
        if (pairs_[pos][origin] == 0) {
          if (acc >= 0) holder_pos = pos;
          continue;
        }
        // Contributions of this group: the primary's and the replicas' (sent back to it).
        const int join = Marker(s.primary[pos]);
        Dep(acc, join);
        Dep(attn_op[s.primary[pos]][origin], join);
        for (int replica : s.replicas[pos]) {
          const MemberInfo* m = nullptr;
          for (const MemberInfo& cand : groups_[pos].members)
            if (cand.rank == replica) m = &cand;
          const int rep = Message(OpLabel::kReplicaDkv, replica, s.primary[pos],
                                  BlockBytes(origin, KvOverlap(*m, s)), origin);
          Dep(attn_op[replica][origin], rep);
          Dep(rep, join);
        }
        acc = join;
        holder_pos = pos;
      }
      if (acc < 0) continue;
      const int home = s.primary[origin];
      const int msg = Message(OpLabel::kRingDkv, s.primary[holder_pos], home,
                              BlockBytes(origin, static_cast<int>(s.kv_heads.size())), origin);
      Dep(acc, msg);
      Dep(msg, ring_done[home]);
    }
  }

  // dQ, dK, dV back to token layout, then the QKV GEMMs' backward.
  std::vector<int> din_done(num_ranks_, -1);
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& m : group.members) {
      din_done[m.rank] = Marker(m.rank);
      Dep(ring_done[m.rank], din_done[m.rank]);
      marks.ring_done[m.rank] = ring_done[m.rank];
    }
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& from : group.members)
      for (const MemberInfo& to : group.members) {
        if (from.rank == to.rank) continue;
        const double bytes = static_cast<double>(to.tokens) *
                             (from.heads + 2.0 * static_cast<double>(from.kv.size())) * head_dim_ *
                             elem_bytes_;
        if (bytes <= 0) continue;
        const int msg = Message(OpLabel::kAllToAllQkv, from.rank, to.rank, bytes);
        Dep(ring_done[from.rank], msg);
        Dep(msg, din_done[to.rank]);
      }
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& m : group.members) {
      const int op = Compute(OpLabel::kLinearPre, m.rank,
                             k.linear_backward_factor * GemmSeconds(m, qkv_params_),
                             Priority(pass_index_, 2, 0));
      Dep(din_done[m.rank], op);
      marks.end[m.rank] = op;
      prev_end_[m.rank] = op;
    }
}

LayerGraph Builder::Build() {
  Prepare();
  LayerGraph graph;
  graph.num_segments = static_cast<int>(segments_.size());
  prev_end_.assign(num_ranks_, -1);
  const int layers = std::max(1, options_.explicit_layers);
  const bool full = cost_.workload().recompute == Recompute::kFull;
  for (int layer = 0; layer < layers; ++layer) {
    pass_ = Pass::kForward;
    layer_ = layer;
    graph.passes.emplace_back();
    ForwardPass(graph.passes.back());
    ++pass_index_;
  }
  for (int layer = layers - 1; layer >= 0; --layer) {
    layer_ = layer;
    if (full) {
      pass_ = Pass::kRecompute;
      graph.passes.emplace_back();
      ForwardPass(graph.passes.back());
      ++pass_index_;
    }
    pass_ = Pass::kBackward;
    graph.passes.emplace_back();
    BackwardPass(graph.passes.back());
    ++pass_index_;
  }
  graph.head_seconds.assign(num_ranks_, 0);
  const ModelSpec& model = cost_.model();
  for (const GroupInfo& group : groups_)
    for (const MemberInfo& m : group.members)
      graph.head_seconds[m.rank] = (1 + cost_.constants().linear_backward_factor) * 2.0 *
                                   static_cast<double>(m.tokens) * model.vocab * model.hidden /
                                   cost_.cluster().device(m.rank).GemmFlops();
  return graph;
}

}  // namespace

LayerGraph BuildLayerGraph(const Plan& plan, const CostModel& cost, const GraphOptions& options,
                           Engine& engine) {
  Builder builder(plan, cost, options, engine);
  return builder.Build();
}

namespace {

Op GradSyncMessage(int from, int to, double bytes, int step) {
  Op op;
  op.kind = OpKind::kMessage;
  op.label = OpLabel::kGradSync;
  op.pass = Pass::kGradSync;
  op.rank = from;
  op.peer = to;
  op.bytes = bytes;
  op.arg = step;
  return op;
}

int GradSyncMarker(int rank, Engine& engine) {
  Op op;
  op.pass = Pass::kGradSync;
  op.rank = rank;
  return engine.Add(op);
}

// Phase A: a ring over each node's GPUs, g - 1 steps of bucket / g bytes; a GPU sends step s
// once it has received step s - 1 and sent step s - 1 (a channel sends its chunks in order, so
// two steps never share a port). Returns the ops that end the phase.
std::vector<int> IntraNodeRings(const Cluster& cluster, double bucket, Engine& engine) {
  std::vector<int> ends;
  for (const NodeInfo& node : cluster.nodes) {
    const int size = node.num_ranks;
    std::vector<int> received(size, -1), sent(size, -1);
    for (int step = 0; step + 1 < size; ++step) {
      for (int local = 0; local < size; ++local) {
        const int from = node.first_rank + local;
        const int to = node.first_rank + (local + 1) % size;
        const int message = engine.Add(GradSyncMessage(from, to, bucket / size, step));
        if (received[local] >= 0) engine.Depend(received[local], message);
        if (sent[local] >= 0) engine.Depend(sent[local], message);  // one channel: in order
        sent[local] = message;
      }
      for (int local = 0; local < size; ++local) received[(local + 1) % size] = sent[local];
    }
    for (int op : received)
      if (op >= 0) ends.push_back(op);
  }
  return ends;
}

// Phase B: a ring over the nodes, N - 1 steps; at each step every GPU j of node i sends its
// bucket / (N g_i) share to GPU j mod g_{i+1} of the next node, after its node has received the
// whole previous step (a per-node join) and after its own previous send (in order).
void InterNodeRing(const Cluster& cluster, double bucket, int start, Engine& engine) {
  const int num_nodes = static_cast<int>(cluster.nodes.size());
  std::vector<int> node_ready(num_nodes, start);
  std::vector<int> last_sent(cluster.num_ranks(), -1);
  for (int step = 0; step + 1 < num_nodes; ++step) {
    std::vector<int> node_received(num_nodes, -1);
    for (int index = 0; index < num_nodes; ++index) {
      const NodeInfo& to = cluster.nodes[(index + 1) % num_nodes];
      node_received[(index + 1) % num_nodes] = GradSyncMarker(to.first_rank, engine);
    }
    for (int index = 0; index < num_nodes; ++index) {
      const NodeInfo& from = cluster.nodes[index];
      const NodeInfo& to = cluster.nodes[(index + 1) % num_nodes];
      const double flow_bytes = bucket / num_nodes / from.num_ranks;
      for (int local = 0; local < from.num_ranks; ++local) {
        const int message = engine.Add(GradSyncMessage(
            from.first_rank + local, to.first_rank + local % to.num_ranks, flow_bytes, step));
        engine.Depend(node_ready[index], message);
        engine.Depend(message, node_received[(index + 1) % num_nodes]);
        int& previous = last_sent[from.first_rank + local];
        if (previous >= 0) engine.Depend(previous, message);
        previous = message;
      }
    }
    node_ready = node_received;
  }
}

}  // namespace

void BuildGradSyncGraph(const CostModel& cost, Engine& engine) {
  const Cluster& cluster = cost.cluster();
  if (cluster.num_ranks() <= 1) return;
  const double bucket = cost.GradBucketBytes();
  const std::vector<int> intra_ends = IntraNodeRings(cluster, bucket, engine);
  if (cluster.nodes.size() <= 1) return;
  const int barrier = GradSyncMarker(0, engine);
  for (int op : intra_ends) engine.Depend(op, barrier);
  InterNodeRing(cluster, bucket, barrier, engine);
}

}  // namespace hexiseq::sim
