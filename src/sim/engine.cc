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

// At one instant: the completions first (events, in the order they were scheduled), then the
// fair-share rebalance, then the compute streams pick their next operation (in the order they
// were asked to, a queue of its own). This makes a timestamp's outcome independent of the order
// in which its completions are processed.
enum EventType : uint8_t { kComputeDone, kFlowDone, kDelivered, kReleased };

struct Event {
  int64_t time;
  uint64_t seq;
  int32_t id;  // op id; kFlowDone: flow slot
  uint32_t version;
  EventType type;
};
struct EventAfter {
  bool operator()(const Event& a, const Event& b) const {
    if (a.time != b.time) return a.time > b.time;
    return a.seq > b.seq;
  }
};

// Rates are integers in units of 1e-6 bytes/ns (1 kB/s) so that sums over a resource do not
// depend on the order of additions.
constexpr double kRateUnitsPerBytePerNs = 1e6;
int64_t Quantize(double bytes_per_ns) {
  return std::llround(bytes_per_ns * kRateUnitsPerBytePerNs);
}
constexpr double kNsPerSecond = 1e9;
constexpr int kNoSlot = -1;

struct Resource {
  int64_t capacity = 0;    // rate units
  int64_t used = 0;        // sum of the active flows' rates
  std::vector<int> flows;  // active flow slots
};

// One message in flight. Slots are reused once a flow's last byte has left; `version` keeps
// counting across reuses, so an event of an earlier occupant never matches.
struct FlowState {
  int op = -1;
  double remaining = 0;  // bytes
  int64_t rate = 0;      // rate units
  int64_t cap = 0;       // pair cap, rate units
  int64_t last_ns = 0;
  int64_t latency_ns = 0;
  uint32_t version = 0;
  int res[2] = {-1, -1};
  int slot[2] = {-1, -1};  // position in each resource's flow list; -1: not active
  bool dirty = false;
};

// The rebalance's progressive filling, in order of (level, kind, id, version): kind 0 = a
// resource saturates (id: the resource), 1 = a flow reaches its pair cap (id: its op, version:
// its slot).
using LevelEntry = std::tuple<int64_t, int, int, uint32_t>;

// A min-heap over a vector that outlives it (std::priority_queue's operations on a reused
// buffer, so a rebalance allocates nothing). Starts empty.
class FillLevels {
 public:
  explicit FillLevels(std::vector<LevelEntry>& buffer) : heap_(buffer) { heap_.clear(); }
  bool empty() const { return heap_.empty(); }
  const LevelEntry& top() const { return heap_.front(); }
  void push(const LevelEntry& entry) {
    heap_.push_back(entry);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<LevelEntry>());
  }
  void pop() {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<LevelEntry>());
    heap_.pop_back();
  }

 private:
  std::vector<LevelEntry>& heap_;
};

struct ReadyCompute {
  uint32_t priority;
  int op;
  bool operator>(const ReadyCompute& o) const {
    return priority != o.priority ? priority > o.priority : op > o.op;
  }
};

// One run of a graph: the event loop and its state, split along its phases (successor lists,
// resources, readiness, flows, fair-share rebalance, compute dispatch).
class Execution {
 public:
  Execution(const Cluster& cluster, const EngineOptions& options, const std::vector<Op>& ops,
            const std::vector<std::pair<int, int>>& edges,
            const std::vector<std::pair<int, int64_t>>& releases,
            std::vector<std::pair<int, int>>* free_edges = nullptr)
      : cluster_(cluster), options_(options), ops_(ops) {
    BuildSuccessors(edges);
    // The successor lists now hold the edges; a caller that will not run again frees its list
    // before the run's arrays are allocated.
    if (free_edges != nullptr) std::vector<std::pair<int, int>>().swap(*free_edges);
    pending_.assign(ops_.size(), 0);
    for (int after : succ_) ++pending_[after];
    // A release is one more dependency, met by a timer event.
    for (const auto& [op, ns] : releases) {
      ++pending_[op];
      Push(ns, kReleased, op, 0);
    }
    BuildResources();
    const int num_ranks = cluster_.num_ranks();
    result_.ranks.resize(num_ranks);
    result_.timings.resize(ops_.size());
    ready_.resize(num_ranks);
    computing_.assign(num_ranks, 0);
    active_msgs_.assign(num_ranks, 0);
    last_ns_.assign(num_ranks, 0);
    dispatch_pending_.assign(num_ranks, 0);
  }

  EngineResult Run();

 private:
  void BuildSuccessors(const std::vector<std::pair<int, int>>& edges);
  void BuildResources();
  void Push(int64_t time, EventType type, int id, uint32_t version) {
    events_.push(Event{time, seq_++, id, version, type});
  }
  void Advance(int rank, int64_t now);
  void MakeReady(int op_id, int64_t now);
  void StartFlow(int op_id, int64_t now);
  void FinishFlow(const Event& event, int64_t now);
  void EndMessage(int op_id, int64_t now);
  void MarkResourceDirty(int res, int64_t now);
  void Rebalance(int64_t now);
  void RateAlone(int slot);
  void FillRates();
  void Dispatch(int rank, int64_t now);
  void ScheduleDispatch(int rank);
  void Process(const Event& event, int64_t now);
  void Drain(int64_t now);

  const Cluster& cluster_;
  const EngineOptions& options_;
  const std::vector<Op>& ops_;
  EngineResult result_;
  int64_t completed_ = 0;

  std::vector<int> first_, succ_;  // successor lists (CSR)
  std::vector<int> pending_;       // dependencies not met yet
  std::vector<int> work_;          // ops done at the current instant, to release

  std::priority_queue<Event, std::vector<Event>, EventAfter> events_;
  uint64_t seq_ = 0;
  std::vector<int> dispatches_;  // ranks to dispatch at the current instant, in order
  size_t next_dispatch_ = 0;

  // Per-rank compute streams and accounting.
  std::vector<
      std::priority_queue<ReadyCompute, std::vector<ReadyCompute>, std::greater<ReadyCompute>>>
      ready_;
  std::vector<char> computing_, dispatch_pending_;
  std::vector<int> active_msgs_;
  std::vector<int64_t> last_ns_;

  // Network: resources, the flows in flight and the rebalance's work arrays.
  std::vector<Resource> resources_;
  std::vector<FlowState> flows_;
  std::vector<int> free_slots_;
  std::vector<int> dirty_;
  bool rebalance_pending_ = false;
  std::vector<int64_t> residual_;
  std::vector<int> unfrozen_, stamp_;
  std::vector<std::vector<int>> members_;
  std::vector<uint32_t> res_version_;
  std::vector<int> live_, touched_;
  std::vector<LevelEntry> levels_;  // the rebalance's heap, reused
  int rebalance_count_ = 0;
};

void Execution::BuildSuccessors(const std::vector<std::pair<int, int>>& edges) {
  const size_t num_ops = ops_.size();
  first_.assign(num_ops + 1, 0);
  succ_.resize(edges.size());
  for (const auto& edge : edges) ++first_[edge.first + 1];
  for (size_t op = 0; op < num_ops; ++op) first_[op + 1] += first_[op];
  // Filled from the back, each list's end moving down to its start: the lists keep the edges'
  // order without a second array of positions.
  for (size_t op = 0; op < num_ops; ++op) first_[op] = first_[op + 1];
  for (auto edge = edges.rbegin(); edge != edges.rend(); ++edge)
    succ_[--first_[edge->first]] = edge->second;
}

// Per rank NVLink egress/ingress and NIC egress/ingress ports; per node NIC egress/ingress pools
// (used instead of the per-rank NIC ports when nics_per_node > 0).
void Execution::BuildResources() {
  const int num_ranks = cluster_.num_ranks();
  const int num_nodes = static_cast<int>(cluster_.nodes.size());
  resources_.resize(4 * num_ranks + 2 * num_nodes);
  auto per_nic = [&](int kind_index) {
    return cluster_.NicPortBandwidth(kind_index) / kNsPerSecond;
  };
  for (int rank = 0; rank < num_ranks; ++rank) {
    const int kind = cluster_.ranks[rank].kind;
    const double intra = cluster_.kinds[kind].intra_node_bytes_per_second / kNsPerSecond;
    resources_[4 * rank].capacity = resources_[4 * rank + 1].capacity = Quantize(intra);
    resources_[4 * rank + 2].capacity = resources_[4 * rank + 3].capacity = Quantize(per_nic(kind));
  }
  for (int node = 0; node < num_nodes; ++node) {
    const int64_t pool = Quantize(options_.nics_per_node * per_nic(cluster_.nodes[node].kind));
    resources_[4 * num_ranks + 2 * node].capacity = pool;
    resources_[4 * num_ranks + 2 * node + 1].capacity = pool;
  }
  residual_.assign(resources_.size(), 0);
  unfrozen_.assign(resources_.size(), 0);
  stamp_.assign(resources_.size(), -1);
  members_.resize(resources_.size());
  res_version_.assign(resources_.size(), 0);
}

void Execution::Advance(int rank, int64_t now) {
  const int64_t dt = now - last_ns_[rank];
  if (dt > 0 && active_msgs_[rank] > 0) {
    result_.ranks[rank].comm_ns += dt;
    if (!computing_[rank]) result_.ranks[rank].comm_exposed_ns += dt;
  }
  last_ns_[rank] = now;
}

// The rank picks its next op at this instant, after its completions and rebalance.
void Execution::ScheduleDispatch(int rank) {
  if (dispatch_pending_[rank]) return;
  dispatch_pending_[rank] = 1;
  dispatches_.push_back(rank);
}

void Execution::MakeReady(int op_id, int64_t now) {
  const Op& op = ops_[op_id];
  switch (op.kind) {
    case OpKind::kMarker:
      result_.timings[op_id].start_ns = now;
      work_.push_back(op_id);
      break;
    case OpKind::kCompute:
      ready_[op.rank].push({op.priority, op_id});
      ScheduleDispatch(op.rank);
      break;
    case OpKind::kMessage:
      result_.timings[op_id].start_ns = now;
      if (op.bytes <= 0 || op.rank == op.peer) {
        work_.push_back(op_id);
      } else {
        StartFlow(op_id, now);
      }
      break;
  }
}

// Brings every flow of the resource up to `now` at its old rate (order independent: rates are
// constant between rebalances) and queues it for the rebalance at this instant.
void Execution::MarkResourceDirty(int res, int64_t now) {
  for (int slot : resources_[res].flows) {
    FlowState& flow = flows_[slot];
    if (flow.dirty) continue;
    flow.remaining -= static_cast<double>(flow.rate) / kRateUnitsPerBytePerNs *
                      static_cast<double>(now - flow.last_ns);
    flow.last_ns = now;
    flow.dirty = true;
    dirty_.push_back(slot);
  }
  rebalance_pending_ = true;  // runs once this instant's completions are done (Run)
}

void Execution::StartFlow(int op_id, int64_t now) {
  const Op& op = ops_[op_id];
  int slot = kNoSlot;
  if (free_slots_.empty()) {
    slot = static_cast<int>(flows_.size());
    flows_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  FlowState& flow = flows_[slot];
  flow.op = op_id;
  flow.remaining = op.bytes;
  flow.rate = 0;
  flow.last_ns = now;
  flow.dirty = false;
  flow.cap = Quantize(cluster_.Bandwidth(op.rank, op.peer) / kNsPerSecond);
  flow.latency_ns = std::llround(cluster_.Latency(op.rank, op.peer) * kNsPerSecond);
  const int num_ranks = cluster_.num_ranks();
  const bool pooled = options_.nics_per_node > 0;
  if (cluster_.SameNode(op.rank, op.peer)) {
    flow.res[0] = 4 * op.rank;
    flow.res[1] = 4 * op.peer + 1;
  } else if (pooled) {
    flow.res[0] = 4 * num_ranks + 2 * cluster_.ranks[op.rank].node;
    flow.res[1] = 4 * num_ranks + 2 * cluster_.ranks[op.peer].node + 1;
  } else {
    flow.res[0] = 4 * op.rank + 2;
    flow.res[1] = 4 * op.peer + 3;
  }
  for (int side = 0; side < 2; ++side) {
    MarkResourceDirty(flows_[slot].res[side], now);
    Resource& res = resources_[flows_[slot].res[side]];
    flows_[slot].slot[side] = static_cast<int>(res.flows.size());
    res.flows.push_back(slot);
  }
  if (!flows_[slot].dirty) {
    flows_[slot].dirty = true;
    dirty_.push_back(slot);
  }
  for (int rank : {op.rank, op.peer}) {
    Advance(rank, now);
    ++active_msgs_[rank];
  }
}

// The flow's last byte has left: off its resources (their other flows are re-shared), then
// delivered after the link latency.
void Execution::FinishFlow(const Event& event, int64_t now) {
  FlowState& flow = flows_[event.id];
  if (event.version != flow.version || flow.dirty || flow.slot[0] < 0) return;  // stale
  for (int side = 0; side < 2; ++side) {
    Resource& res = resources_[flow.res[side]];
    const int position = flow.slot[side];
    const int moved = res.flows.back();
    res.flows[position] = moved;
    FlowState& moved_flow = flows_[moved];
    for (int other = 0; other < 2; ++other)
      if (moved_flow.res[other] == flow.res[side] &&
          moved_flow.slot[other] == static_cast<int>(res.flows.size()) - 1)
        moved_flow.slot[other] = position;
    res.flows.pop_back();
    flow.slot[side] = -1;
  }
  for (int side = 0; side < 2; ++side) resources_[flow.res[side]].used -= flow.rate;
  flow.rate = 0;
  flow.remaining = 0;
  ++flow.version;
  for (int side = 0; side < 2; ++side) MarkResourceDirty(flow.res[side], now);
  const int op_id = flow.op;
  const int64_t latency_ns = flow.latency_ns;
  free_slots_.push_back(event.id);
  if (latency_ns > 0) {
    Push(now + latency_ns, kDelivered, op_id, 0);
  } else {
    EndMessage(op_id, now);
  }
}

void Execution::EndMessage(int op_id, int64_t now) {
  const Op& op = ops_[op_id];
  for (int rank : {op.rank, op.peer}) {
    Advance(rank, now);
    --active_msgs_[rank];
  }
  work_.push_back(op_id);
  Drain(now);
}

// Max-min fair rates for the dirty flows (progressive filling), with the capacity the other
// flows use held fixed. Deterministic: the dirty set is sorted, ties broken by op id, integer
// sums.
void Execution::Rebalance(int64_t now) {
  ++rebalance_count_;
  live_.clear();
  for (int slot : dirty_) {
    flows_[slot].dirty = false;
    if (flows_[slot].slot[0] >= 0) live_.push_back(slot);
  }
  dirty_.clear();
  std::sort(live_.begin(), live_.end(), [&](int a, int b) { return flows_[a].op < flows_[b].op; });
  if (live_.size() == 1)
    RateAlone(live_.front());
  else
    FillRates();
  for (int slot : live_) {
    FlowState& flow = flows_[slot];
    for (int side = 0; side < 2; ++side) resources_[flow.res[side]].used += flow.rate;
    ++flow.version;
    if (flow.rate <= 0) continue;  // starved until a flow on its resources changes
    const double left = std::max(0.0, flow.remaining);
    const double per_ns = static_cast<double>(flow.rate) / kRateUnitsPerBytePerNs;
    Push(now + std::llround(left / per_ns), kFlowDone, slot, flow.version);
  }
}

// One dirty flow: progressive filling freezes it at the lowest of its pair cap and its two
// resources' residuals, which this takes directly.
void Execution::RateAlone(int slot) {
  FlowState& flow = flows_[slot];
  int64_t rate = flow.cap;
  for (int side = 0; side < 2; ++side) {
    Resource& res = resources_[flow.res[side]];
    res.used -= flow.rate;
    rate = std::min(rate, std::max<int64_t>(0, res.capacity - res.used));
  }
  flow.rate = rate;
}

// Progressive filling over the live flows (sorted by op id), the other flows' rates held.
void Execution::FillRates() {
  touched_.clear();
  for (int slot : live_)
    for (int side = 0; side < 2; ++side) {
      const int r = flows_[slot].res[side];
      if (stamp_[r] != rebalance_count_) {
        stamp_[r] = rebalance_count_;
        unfrozen_[r] = 0;
        members_[r].clear();
        touched_.push_back(r);
      }
      resources_[r].used -= flows_[slot].rate;
      ++unfrozen_[r];
      members_[r].push_back(slot);
    }
  FillLevels heap(levels_);
  for (int r : touched_) {
    residual_[r] = std::max<int64_t>(0, resources_[r].capacity - resources_[r].used);
    heap.push({residual_[r] / unfrozen_[r], 0, r, ++res_version_[r]});
  }
  for (int slot : live_) {
    flows_[slot].rate = -1;  // unfrozen
    heap.push({flows_[slot].cap, 1, flows_[slot].op, static_cast<uint32_t>(slot)});
  }
  auto freeze = [&](int slot, int64_t level) {
    FlowState& flow = flows_[slot];
    flow.rate = level;
    for (int side = 0; side < 2; ++side) {
      const int r = flow.res[side];
      residual_[r] = std::max<int64_t>(0, residual_[r] - level);
      if (--unfrozen_[r] > 0) heap.push({residual_[r] / unfrozen_[r], 0, r, ++res_version_[r]});
    }
  };
  while (!heap.empty()) {
    const auto [level, kind, id, version] = heap.top();
    heap.pop();
    if (kind == 1) {
      if (flows_[version].rate < 0) freeze(static_cast<int>(version), level);
      continue;
    }
    if (version != res_version_[id] || unfrozen_[id] == 0) continue;
    for (int slot : members_[id])
      if (flows_[slot].rate < 0) freeze(slot, level);
  }
}

void Execution::Dispatch(int rank, int64_t now) {
  dispatch_pending_[rank] = 0;
  if (computing_[rank] || ready_[rank].empty()) return;
  const int op_id = ready_[rank].top().op;
  ready_[rank].pop();
  Advance(rank, now);
  computing_[rank] = 1;
  result_.timings[op_id].start_ns = now;
  Push(now + ops_[op_id].duration_ns, kComputeDone, op_id, 0);
}

void Execution::Drain(int64_t now) {
  while (!work_.empty()) {
    const int op_id = work_.back();
    work_.pop_back();
    result_.timings[op_id].end_ns = now;
    ++completed_;
    for (int index = first_[op_id]; index < first_[op_id + 1]; ++index)
      if (--pending_[succ_[index]] == 0) MakeReady(succ_[index], now);
  }
}

void Execution::Process(const Event& event, int64_t now) {
  switch (event.type) {
    case kComputeDone: {
      const Op& op = ops_[event.id];
      Advance(op.rank, now);
      computing_[op.rank] = 0;
      result_.ranks[op.rank].busy_ns += op.duration_ns;
      result_.ranks[op.rank].last_end_ns = now;
      work_.push_back(event.id);
      Drain(now);
      ScheduleDispatch(op.rank);
      break;
    }
    case kFlowDone:
      FinishFlow(event, now);
      break;
    case kDelivered:
      EndMessage(event.id, now);
      break;
    case kReleased:
      if (--pending_[event.id] == 0) MakeReady(event.id, now);
      Drain(now);
      break;
  }
}

EngineResult Execution::Run() {
  const int num_ops = static_cast<int>(ops_.size());
  for (int op = 0; op < num_ops; ++op)
    if (pending_[op] == 0) MakeReady(op, 0);
  Drain(0);
  int64_t now = 0;
  while (true) {
    // An instant ends with its rebalance (no event of its own), then its dispatches; each counts
    // as an event.
    const bool completions_now = !events_.empty() && events_.top().time == now;
    if (!completions_now && rebalance_pending_) {
      rebalance_pending_ = false;
      Rebalance(now);
      continue;
    }
    if (!completions_now && next_dispatch_ < dispatches_.size()) {
      ++result_.events;
      Dispatch(dispatches_[next_dispatch_++], now);
      continue;
    }
    if (next_dispatch_ == dispatches_.size()) {
      dispatches_.clear();
      next_dispatch_ = 0;
    }
    if (events_.empty()) break;
    const Event event = events_.top();
    events_.pop();
    now = event.time;
    ++result_.events;
    Process(event, now);
  }
  HEXISEQ_CHECK(completed_ == num_ops, "simulation graph has a cycle or a dangling dependency");
  for (const OpTiming& timing : result_.timings)
    result_.makespan_ns = std::max(result_.makespan_ns, timing.end_ns);
  for (int rank = 0; rank < cluster_.num_ranks(); ++rank) Advance(rank, result_.makespan_ns);
  return std::move(result_);
}

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

void Engine::Reserve(int64_t more_ops, int64_t more_edges) {
  ops_.reserve(ops_.size() + static_cast<size_t>(std::max<int64_t>(0, more_ops)));
  edges_.reserve(edges_.size() + static_cast<size_t>(std::max<int64_t>(0, more_edges)));
}

void Engine::ReleaseAt(int op, int64_t ns) {
  HEXISEQ_CHECK(op >= 0 && ns >= 0, "bad release");
  releases_.push_back({op, ns});
}

EngineResult Engine::Run() const {
  Execution execution(cluster_, options_, ops_, edges_, releases_);
  return execution.Run();
}

EngineResult Engine::RunOnce() {
  Execution execution(cluster_, options_, ops_, edges_, releases_, &edges_);
  return execution.Run();
}

}  // namespace hexiseq::sim
