#include "sim/engine.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

#include "spec/error.h"

namespace hexiseq::sim {

const char* OpLabelName(OpLabel label) {
  switch (label) {
    case OpLabel::kLinearPre:
      return "linear qkv";
    case OpLabel::kLinearPost:
      return "linear o+mlp";
    case OpLabel::kRecomputeMlp:
      return "recompute mlp";
    case OpLabel::kAttention:
      return "attention";
    case OpLabel::kAllToAllQkv:
      return "a2a qkv";
    case OpLabel::kAllToAllO:
      return "a2a o";
    case OpLabel::kRingKv:
      return "ring kv";
    case OpLabel::kReplicaKv:
      return "replica kv";
    case OpLabel::kRingDkv:
      return "ring dkv";
    case OpLabel::kReplicaDkv:
      return "replica dkv";
    case OpLabel::kGradSync:
      return "grad sync";
    case OpLabel::kMarker:
      return "marker";
  }
  return "?";
}

const char* PassName(Pass pass) {
  switch (pass) {
    case Pass::kForward:
      return "fwd";
    case Pass::kRecompute:
      return "recompute";
    case Pass::kBackward:
      return "bwd";
    case Pass::kGradSync:
      return "grad-sync";
  }
  return "?";
}

namespace {

// Event classes at one instant: completions first, then the fair-share rebalance, then the
// compute streams pick their next operation. This makes a timestamp's outcome independent of
// the order in which its completions are processed.
enum EventClass : int { kClassDone = 0, kClassRebalance = 1, kClassDispatch = 2 };
enum EventType : int { kComputeDone, kFlowDone, kDelivered, kRebalance, kDispatch };

struct Event {
  int64_t time;
  int cls;
  uint64_t seq;
  int type;
  int id;
  uint32_t version;
};
struct EventAfter {
  bool operator()(const Event& a, const Event& b) const {
    if (a.time != b.time) return a.time > b.time;
    if (a.cls != b.cls) return a.cls > b.cls;
    return a.seq > b.seq;
  }
};

// Rates are integers in units of 1e-6 bytes/ns (1 kB/s) so that sums over a resource do not
// depend on the order of additions.
constexpr double kRateUnitsPerBytePerNs = 1e6;
int64_t Quantize(double bytes_per_ns) {
  return std::llround(bytes_per_ns * kRateUnitsPerBytePerNs);
}

struct Resource {
  int64_t capacity = 0;    // rate units
  int64_t used = 0;        // sum of the active flows' rates
  std::vector<int> flows;  // active flow ids (op ids)
};

struct FlowState {
  double remaining = 0;  // bytes
  int64_t rate = 0;      // rate units
  int64_t cap = 0;       // pair cap, rate units
  int64_t last_ns = 0;
  uint32_t version = 0;
  int res[2] = {-1, -1};
  int slot[2] = {-1, -1};  // position in each resource's flow list
  bool dirty = false;
  int64_t latency_ns = 0;
};

struct ReadyCompute {
  uint64_t priority;
  int op;
  bool operator>(const ReadyCompute& o) const {
    return priority != o.priority ? priority > o.priority : op > o.op;
  }
};

}  // namespace

Engine::Engine(const Cluster& cluster, EngineOptions options)
    : cluster_(cluster), options_(options) {}

int Engine::Add(const Op& op) {
  ops_.push_back(op);
  return static_cast<int>(ops_.size()) - 1;
}

void Engine::Depend(int before, int after) {
  HEXISEQ_CHECK(before >= 0 && after >= 0 && before != after, "bad dependency");
  edges_.push_back({before, after});
}

EngineResult Engine::Run() const {
  const int num_ops = static_cast<int>(ops_.size());
  const int num_ranks = cluster_.num_ranks();
  const int num_nodes = static_cast<int>(cluster_.nodes.size());

  // Successor lists (CSR) and dependency counts.
  std::vector<int> pending(num_ops, 0), first(num_ops + 1, 0), succ(edges_.size());
  for (const auto& [before, after] : edges_) {
    ++first[before + 1];
    ++pending[after];
  }
  for (int op = 0; op < num_ops; ++op) first[op + 1] += first[op];
  {
    std::vector<int> fill(first.begin(), first.end() - 1);
    for (const auto& [before, after] : edges_) succ[fill[before]++] = after;
  }

  // Resources: per rank NVLink egress/ingress and NIC egress/ingress ports; per node NIC
  // egress/ingress pools (used instead of the per-rank NIC ports when nics_per_node > 0).
  const bool pooled = options_.nics_per_node > 0;
  std::vector<Resource> resources(4 * num_ranks + 2 * num_nodes);
  auto nvl_out = [](int rank) { return 4 * rank; };
  auto nvl_in = [](int rank) { return 4 * rank + 1; };
  auto nic_out = [&](int rank) {
    return pooled ? 4 * num_ranks + 2 * cluster_.ranks[rank].node : 4 * rank + 2;
  };
  auto nic_in = [&](int rank) {
    return pooled ? 4 * num_ranks + 2 * cluster_.ranks[rank].node + 1 : 4 * rank + 3;
  };
  auto per_nic = [&](int kind_index) { return cluster_.NicPortBandwidth(kind_index) * 1e-9; };
  for (int rank = 0; rank < num_ranks; ++rank) {
    const int kind = cluster_.ranks[rank].kind;
    const double intra = cluster_.kinds[kind].intra_node_bytes_per_second * 1e-9;
    resources[4 * rank].capacity = resources[4 * rank + 1].capacity = Quantize(intra);
    resources[4 * rank + 2].capacity = resources[4 * rank + 3].capacity = Quantize(per_nic(kind));
  }
  for (int node = 0; node < num_nodes; ++node) {
    const int64_t pool = Quantize(options_.nics_per_node * per_nic(cluster_.nodes[node].kind));
    resources[4 * num_ranks + 2 * node].capacity = pool;
    resources[4 * num_ranks + 2 * node + 1].capacity = pool;
  }

  EngineResult result;
  result.ranks.resize(num_ranks);
  result.timings.resize(num_ops);
  std::vector<FlowState> flows(num_ops);
  std::priority_queue<Event, std::vector<Event>, EventAfter> events;
  uint64_t seq = 0;
  auto push = [&](int64_t time, int cls, int type, int id, uint32_t version) {
    events.push(Event{time, cls, seq++, type, id, version});
  };

  // Per-rank compute streams and accounting.
  std::vector<
      std::priority_queue<ReadyCompute, std::vector<ReadyCompute>, std::greater<ReadyCompute>>>
      ready(num_ranks);
  std::vector<char> computing(num_ranks, 0);
  std::vector<int> active_msgs(num_ranks, 0);
  std::vector<int64_t> last_ns(num_ranks, 0);
  std::vector<char> dispatch_pending(num_ranks, 0);
  auto advance = [&](int rank, int64_t now) {
    const int64_t dt = now - last_ns[rank];
    if (dt > 0 && active_msgs[rank] > 0) {
      result.ranks[rank].comm_ns += dt;
      if (!computing[rank]) result.ranks[rank].comm_exposed_ns += dt;
    }
    last_ns[rank] = now;
  };

  std::vector<int> dirty;
  bool rebalance_pending = false;
  auto mark_resource_dirty = [&](int res, int64_t now) {
    for (int f : resources[res].flows) {
      if (flows[f].dirty) continue;
      // Bring the flow up to `now` at its old rate (order independent: rates are constant
      // between rebalances).
      FlowState& fs = flows[f];
      fs.remaining -= static_cast<double>(fs.rate) / kRateUnitsPerBytePerNs *
                      static_cast<double>(now - fs.last_ns);
      fs.last_ns = now;
      fs.dirty = true;
      dirty.push_back(f);
    }
    if (!rebalance_pending) {
      rebalance_pending = true;
      push(now, kClassRebalance, kRebalance, -1, 0);
    }
  };

  // Max-min fair rates for the dirty flows (progressive filling), with the capacity the other
  // flows use held fixed. Deterministic: the dirty set is sorted, ties broken by id, integer sums.
  std::vector<int64_t> residual(resources.size(), 0);
  std::vector<int> unfrozen(resources.size(), 0), stamp(resources.size(), -1);
  std::vector<std::vector<int>> members(resources.size());
  std::vector<uint32_t> res_version(resources.size(), 0);
  int rebalance_count = 0;
  auto Rebalance = [&](int64_t now) {
    ++rebalance_count;
    std::vector<int> live;
    for (int f : dirty) {
      flows[f].dirty = false;
      if (flows[f].slot[0] >= 0) live.push_back(f);
    }
    dirty.clear();
    std::sort(live.begin(), live.end());
    std::vector<int> touched;
    for (int f : live)
      for (int side = 0; side < 2; ++side) {
        const int r = flows[f].res[side];
        if (stamp[r] != rebalance_count) {
          stamp[r] = rebalance_count;
          unfrozen[r] = 0;
          members[r].clear();
          touched.push_back(r);
        }
        resources[r].used -= flows[f].rate;
        ++unfrozen[r];
        members[r].push_back(f);
      }
    // (level, kind, id, version): kind 0 = resource saturates, 1 = flow reaches its pair cap.
    using Entry = std::tuple<int64_t, int, int, uint32_t>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    for (int r : touched) {
      residual[r] = std::max<int64_t>(0, resources[r].capacity - resources[r].used);
      heap.push({residual[r] / unfrozen[r], 0, r, ++res_version[r]});
    }
    for (int f : live) {
      flows[f].rate = -1;  // unfrozen
      heap.push({flows[f].cap, 1, f, 0});
    }
    auto freeze = [&](int f, int64_t level) {
      FlowState& fs = flows[f];
      fs.rate = level;
      for (int side = 0; side < 2; ++side) {
        const int r = fs.res[side];
        residual[r] = std::max<int64_t>(0, residual[r] - level);
        if (--unfrozen[r] > 0) heap.push({residual[r] / unfrozen[r], 0, r, ++res_version[r]});
      }
    };
    while (!heap.empty()) {
      const auto [level, kind, id, version] = heap.top();
      heap.pop();
      if (kind == 1) {
        if (flows[id].rate < 0) freeze(id, level);
        continue;
      }
      if (version != res_version[id] || unfrozen[id] == 0) continue;
      for (int f : members[id])
        if (flows[f].rate < 0) freeze(f, level);
    }
    for (int f : live) {
      FlowState& fs = flows[f];
      for (int side = 0; side < 2; ++side) resources[fs.res[side]].used += fs.rate;
      ++fs.version;
      if (fs.rate <= 0) continue;  // starved until a flow on its resources changes
      const double left = std::max(0.0, fs.remaining);
      const double per_ns = static_cast<double>(fs.rate) / kRateUnitsPerBytePerNs;
      push(now + std::llround(left / per_ns), kClassDone, kFlowDone, f, fs.version);
    }
  };

  std::vector<int> work;
  int64_t completed = 0;
  auto schedule_dispatch = [&](int rank, int64_t now) {
    if (dispatch_pending[rank]) return;
    dispatch_pending[rank] = 1;
    push(now, kClassDispatch, kDispatch, rank, 0);
  };
  auto make_ready = [&](int op_id, int64_t now) {
    const Op& op = ops_[op_id];
    switch (op.kind) {
      case OpKind::kMarker:
        result.timings[op_id].start_ns = now;
        work.push_back(op_id);
        break;
      case OpKind::kCompute:
        ready[op.rank].push({op.priority, op_id});
        schedule_dispatch(op.rank, now);
        break;
      case OpKind::kMessage: {
        result.timings[op_id].start_ns = now;
        if (op.bytes <= 0 || op.rank == op.peer) {
          work.push_back(op_id);
          break;
        }
        FlowState& fs = flows[op_id];
        fs.remaining = op.bytes;
        fs.rate = 0;
        fs.last_ns = now;
        fs.cap = Quantize(cluster_.Bandwidth(op.rank, op.peer) * 1e-9);
        fs.latency_ns = std::llround(cluster_.Latency(op.rank, op.peer) * 1e9);
        if (cluster_.SameNode(op.rank, op.peer)) {
          fs.res[0] = nvl_out(op.rank);
          fs.res[1] = nvl_in(op.peer);
        } else {
          fs.res[0] = nic_out(op.rank);
          fs.res[1] = nic_in(op.peer);
        }
        for (int side = 0; side < 2; ++side) {
          mark_resource_dirty(fs.res[side], now);
          fs.slot[side] = static_cast<int>(resources[fs.res[side]].flows.size());
          resources[fs.res[side]].flows.push_back(op_id);
        }
        if (!fs.dirty) {
          fs.dirty = true;
          dirty.push_back(op_id);
        }
        for (int rank : {op.rank, op.peer}) {
          advance(rank, now);
          ++active_msgs[rank];
        }
        break;
      }
    }
  };
  auto drain = [&](int64_t now) {
    while (!work.empty()) {
      const int op_id = work.back();
      work.pop_back();
      result.timings[op_id].end_ns = now;
      ++completed;
      for (int k = first[op_id]; k < first[op_id + 1]; ++k)
        if (--pending[succ[k]] == 0) make_ready(succ[k], now);
    }
  };

  for (int op = 0; op < num_ops; ++op)
    if (pending[op] == 0) make_ready(op, 0);
  drain(0);

  int64_t now = 0;
  while (!events.empty()) {
    const Event ev = events.top();
    events.pop();
    now = ev.time;
    ++result.events;
    switch (ev.type) {
      case kComputeDone: {
        const Op& op = ops_[ev.id];
        advance(op.rank, now);
        computing[op.rank] = 0;
        result.ranks[op.rank].busy_ns += op.duration_ns;
        result.ranks[op.rank].last_end_ns = now;
        work.push_back(ev.id);
        drain(now);
        schedule_dispatch(op.rank, now);
        break;
      }
      case kFlowDone: {
        FlowState& fs = flows[ev.id];
        if (ev.version != fs.version || fs.dirty) break;  // stale
        for (int side = 0; side < 2; ++side) {
          Resource& res = resources[fs.res[side]];
          const int slot = fs.slot[side];
          const int moved = res.flows.back();
          res.flows[slot] = moved;
          FlowState& ms = flows[moved];
          for (int s = 0; s < 2; ++s)
            if (ms.res[s] == fs.res[side] && ms.slot[s] == static_cast<int>(res.flows.size()) - 1)
              ms.slot[s] = slot;
          res.flows.pop_back();
          fs.slot[side] = -1;
        }
        for (int side = 0; side < 2; ++side) resources[fs.res[side]].used -= fs.rate;
        fs.rate = 0;
        fs.remaining = 0;
        ++fs.version;
        for (int side = 0; side < 2; ++side) mark_resource_dirty(fs.res[side], now);
        if (fs.latency_ns > 0) {
          push(now + fs.latency_ns, kClassDone, kDelivered, ev.id, 0);
        } else {
          const Op& op = ops_[ev.id];
          for (int rank : {op.rank, op.peer}) {
            advance(rank, now);
            --active_msgs[rank];
          }
          work.push_back(ev.id);
          drain(now);
        }
        break;
      }
      case kDelivered: {
        const Op& op = ops_[ev.id];
        for (int rank : {op.rank, op.peer}) {
          advance(rank, now);
          --active_msgs[rank];
        }
        work.push_back(ev.id);
        drain(now);
        break;
      }
      case kRebalance: {
        rebalance_pending = false;
        Rebalance(now);
        break;
      }
      case kDispatch: {
        const int rank = ev.id;
        dispatch_pending[rank] = 0;
        if (computing[rank] || ready[rank].empty()) break;
        const int op_id = ready[rank].top().op;
        ready[rank].pop();
        advance(rank, now);
        computing[rank] = 1;
        result.timings[op_id].start_ns = now;
        push(now + ops_[op_id].duration_ns, kClassDone, kComputeDone, op_id, 0);
        break;
      }
    }
  }
  HEXISEQ_CHECK(completed == num_ops, "simulation graph has a cycle or a dangling dependency");
  for (const OpTiming& t : result.timings)
    result.makespan_ns = std::max(result.makespan_ns, t.end_ns);
  for (int rank = 0; rank < num_ranks; ++rank) advance(rank, result.makespan_ns);
  return result;
}

}  // namespace hexiseq::sim
