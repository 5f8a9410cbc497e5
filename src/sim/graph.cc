#include "sim/graph.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include "plan/layer_schedule.h"
#include "spec/error.h"

namespace hexiseq::sim {
namespace {

constexpr int64_t kLseBytes = kFp32Bytes;  // log-sum-exp values stay fp32 in every precision

int64_t Ns(double seconds) { return std::llround(seconds * 1e9); }

// Priority keys: smaller runs first among a rank's ready compute ops. They order the ops of one
// pass: a rank's ops of the next pass depend on its last op of this one, so ops of two passes are
// never ready on a rank at once.
enum Stage : int { kStageBefore = 0, kStageAttention = 1, kStageAfter = 2 };
constexpr int kStageShift = 30;
uint32_t Priority(int stage, int step) {
  HEXISEQ_CHECK(step >= 0 && step < (1 << kStageShift), "priority step out of range");
  return (static_cast<uint32_t>(stage) << kStageShift) | static_cast<uint32_t>(step);
}

// (key, op) pairs of one rank, sorted by key for lookup; the key is an origin ring position, or
// for attention ops the block's ring distance from its origin.
using OriginOps = std::vector<std::pair<int, int>>;

// K/V arrivals come in schedule order, already sorted by origin when there is one KV segment.
void SortByOrigin(std::vector<OriginOps>& per_rank) {
  for (OriginOps& ops : per_rank)
    if (!std::is_sorted(ops.begin(), ops.end())) std::sort(ops.begin(), ops.end());
}

// Turns the layer schedule into engine operations: one pass builder for forward, recompute and
// backward, parameterised by the schedule's direction.
class Builder {
 public:
  Builder(const Plan& plan, const CostModel& cost, const GraphOptions& options)
      : plan_(plan), cost_(cost), options_(options) {
    Setup();
  }

  // The passes of the explicit layers in training order: F1..Fk, then per layer from the last
  // (R) B.
  int num_passes() const { return static_cast<int>(passes_.size()); }
  // Adds pass `index` to `engine`. With `start_ns`, each active rank's first op waits until
  // start_ns[rank] (the pass runs in an engine of its own); else it follows the rank's last op of
  // the previous pass added to the same engine.
  PassMarks AddPass(int index, Engine& engine, const std::vector<int64_t>* start_ns);
  LayerGraph Summary() const;

 private:
  struct PassSpec {
    Direction direction;
    sim::Pass pass;
    int layer;
    double weight;  // PassMarks::weight
  };
  void Setup();
  void SetupVisits();
  // Per rank during one pass: the op each phase ends with (-1: none).
  struct PassOps {
    std::vector<int> before;           // GEMMs before the inbound all-to-all
    std::vector<int> local_in;         // head layout ready
    std::vector<int> ring_done;        // attention (and dK/dV returns) done
    std::vector<int> local_out;        // token layout ready
    std::vector<OriginOps> arrivals;   // per rank: K/V block deliveries
    std::vector<OriginOps> attention;  // per rank: attention ops by the block's ring distance
  };

  int Compute(OpLabel label, int rank, double seconds, uint32_t priority, int arg = -1);
  int Message(OpLabel label, int from, int to, double bytes, int arg = -1);
  int Marker(int rank);
  void Dep(int before, int after) {
    if (before >= 0) engine_->Depend(before, after);
  }

  void BuildPass(Direction direction, PassMarks& marks);
  void ReserveForPass(Direction direction);
  void GemmsBefore(Direction direction, PassOps& ops);
  void AllToAll(Direction direction, bool inbound, PassOps& ops);
  void KvMessages(Direction direction, PassOps& ops);
  void AttentionOps(Direction direction, PassOps& ops);
  void DkvMessages(PassOps& ops);
  void GemmsAfter(Direction direction, PassOps& ops);
  static int FindOp(const OriginOps& ops, int key);
  int RingDistance(int origin, int ring_pos) const {
    const int ring_groups = schedule_.num_ring_groups();
    return (ring_pos - origin + ring_groups) % ring_groups;
  }
  // One K/V send: over link from -> to, of a block that has travelled `distance` ring positions.
  struct LinkSend {
    int from = 0, to = 0, distance = 0, op = 0;
    bool operator<(const LinkSend& other) const {
      return std::tie(from, to, distance, op) <
             std::tie(other.from, other.to, other.distance, other.op);
    }
  };
  void SortBySender(std::vector<LinkSend>& sends) const;
  void SendInOrderPerLink(std::vector<LinkSend>& sends, const std::vector<int>& receiver_ready);
  void JoinLastPerLink(const std::vector<LinkSend>& sorted, const std::vector<int>& ring_done,
                       bool receiver_too);
  std::vector<LinkSend> kv_sends_;  // this pass's K/V sends

  double GemmSeconds(int rank, double params) const {
    return 2.0 * static_cast<double>(TokensOf(rank)) * params /
           cost_.LinearRate(rank, TokensOf(rank));
  }
  double AttentionSeconds(int rank, int query_heads, int64_t pairs) const {
    const int64_t query_tokens = schedule_.groups[schedule_.places[rank].group].num_tokens;
    return AttentionForwardFlops(cost_.model().head_dim, query_heads, static_cast<double>(pairs)) /
           cost_.AttentionRate(rank, query_tokens);
  }
  int64_t TokensOf(int rank) const {
    const RankPlace& place = schedule_.places[rank];
    return schedule_.groups[place.group].member_tokens[place.member];
  }
  // Ranks that hold tokens (members of ring groups), in ring order.
  const std::vector<int>& ActiveRanks() const { return active_ranks_; }

  const Plan& plan_;
  const CostModel& cost_;
  const GraphOptions& options_;
  Engine* engine_ = nullptr;
  std::vector<PassSpec> passes_;
  double qkv_params_ = 0, post_params_ = 0, mlp_params_ = 0;

  LayerSchedule schedule_;
  std::vector<int> active_ranks_;
  // A visiting block: its origin and the index of the visited group in chains[origin].hops.
  struct Visit {
    int origin = 0, hop = 0;
  };
  std::vector<std::vector<Visit>> visiting_;  // per ring position: by arrival order
  int num_ranks_ = 0;
  sim::Pass pass_ = sim::Pass::kForward;
  int layer_ = 0;
  std::vector<int> prev_end_;  // per rank
};

int Builder::Compute(OpLabel label, int rank, double seconds, uint32_t priority, int arg) {
  Op op;
  op.pass = pass_;
  op.layer = layer_;
  op.rank = rank;
  op.label = label;
  op.arg = arg;
  op.duration_ns = Ns(seconds);
  op.priority = priority;
  op.kind = op.duration_ns > 0 ? OpKind::kCompute : OpKind::kMarker;
  return engine_->Add(op);
}

int Builder::Message(OpLabel label, int from, int to, double bytes, int arg) {
  Op op;
  op.kind = OpKind::kMessage;
  op.pass = pass_;
  op.layer = layer_;
  op.label = label;
  op.rank = from;
  op.peer = to;
  op.bytes = bytes;
  op.arg = arg;
  return engine_->Add(op);
}

int Builder::Marker(int rank) {
  Op op;
  op.pass = pass_;
  op.layer = layer_;
  op.rank = rank;
  return engine_->Add(op);
}

int Builder::FindOp(const OriginOps& ops, int key) {
  auto found = std::lower_bound(ops.begin(), ops.end(), std::make_pair(key, -1));
  return found != ops.end() && found->first == key ? found->second : -1;
}

// Forward: the QKV GEMMs. Backward: (selective: the MLP forward again) then the output
// projection and MLP backward. Then a marker for "head layout ready".
void Builder::GemmsBefore(Direction direction, PassOps& ops) {
  const CostConstants& constants = cost_.constants();
  const bool selective = cost_.workload().recompute == Recompute::kSelective;
  for (int rank : ActiveRanks()) {
    int last = prev_end_[rank];
    if (direction == Direction::kForward) {
      const int qkv = Compute(OpLabel::kLinearPre, rank, GemmSeconds(rank, qkv_params_),
                              Priority(kStageBefore, 0));
      Dep(last, qkv);
      last = qkv;
    } else {
      if (selective) {
        const int mlp = Compute(OpLabel::kRecomputeMlp, rank, GemmSeconds(rank, mlp_params_),
                                Priority(kStageBefore, 0));
        Dep(last, mlp);
        last = mlp;
      }
      const int post = Compute(OpLabel::kLinearPost, rank,
                               constants.linear_backward_factor * GemmSeconds(rank, post_params_),
                               Priority(kStageBefore, 1));
      Dep(last, post);
      last = post;
    }
    ops.before[rank] = last;
    ops.local_in[rank] = Marker(rank);
    Dep(last, ops.local_in[rank]);
  }
}

// One all-to-all phase of every group, message by message from the split tables.
void Builder::AllToAll(Direction direction, bool inbound, PassOps& ops) {
  const bool carries_qkv = (direction == Direction::kForward) == inbound;
  const OpLabel label = carries_qkv ? OpLabel::kAllToAllQkv : OpLabel::kAllToAllO;
  if (!inbound)
    for (int rank : ActiveRanks()) {
      ops.local_out[rank] = Marker(rank);
      Dep(ops.ring_done[rank], ops.local_out[rank]);
    }
  ForEachAllToAllPiece(schedule_, direction, inbound, [&](int from, int to, int64_t bytes) {
    const int message = Message(label, from, to, static_cast<double>(bytes));
    Dep(inbound ? ops.before[from] : ops.ring_done[from], message);
    Dep(inbound ? ops.before[to] : ops.ring_done[to], message);  // rendezvous: both in the phase
    Dep(message, inbound ? ops.local_in[to] : ops.local_out[to]);
  });
}

// K/V blocks along their chains (primary to primary, each leaving its owner once the head layout
// is ready, forwarded as soon as received) and copies to replicas. dK/dV messages are left to
// DkvMessages, which needs the attention ops.
void Builder::KvMessages(Direction direction, PassOps& ops) {
  int delivered_to_primary = -1;  // the K/V block message of the current hop
  std::vector<LinkSend>& sends = kv_sends_;
  sends.clear();
  const int ring_groups = schedule_.num_ring_groups();
  ForEachRingMessage(schedule_, direction, [&](const RingMessage& message) {
    const double bytes = static_cast<double>(message.bytes);
    const std::vector<ChainHop>& hops = schedule_.chains[message.origin].hops;
    switch (message.kind) {
      case RingMessageKind::kKvBlock: {
        const int op = Message(OpLabel::kRingKv, message.source_rank, message.dest_rank, bytes,
                               message.origin);
        Dep(message.hop == 0 ? ops.local_in[message.source_rank] : delivered_to_primary, op);
        delivered_to_primary = op;
        ops.arrivals[message.dest_rank].push_back({message.origin, op});
        const int sender_pos = message.hop == 0 ? message.origin : hops[message.hop - 1].ring_pos;
        sends.push_back({message.source_rank, message.dest_rank,
                         (sender_pos - message.origin + ring_groups) % ring_groups, op});
        break;
      }
      case RingMessageKind::kKvReplica: {
        const int op = Message(OpLabel::kReplicaKv, message.source_rank, message.dest_rank, bytes,
                               message.origin);
        Dep(delivered_to_primary, op);
        ops.arrivals[message.dest_rank].push_back({message.origin, op});
        sends.push_back({message.source_rank, message.dest_rank,
                         (hops[message.hop].ring_pos - message.origin + ring_groups) % ring_groups,
                         op});
        break;
      }
      case RingMessageKind::kDkvPartial:
      case RingMessageKind::kDkvReturn:
        break;  // DkvMessages, once the attention ops exist
    }
  });
  SendInOrderPerLink(sends, ops.local_in);
  SortByOrigin(ops.arrivals);
}

// Sorts `sends` as operator< does, in place: sends are swapped into their sender's range (the
// order inside a range is lost, but the op ids make the key unique), then each range is sorted by
// the rest of the key (many short sorts instead of one long one).
void Builder::SortBySender(std::vector<LinkSend>& sends) const {
  std::vector<size_t> first(num_ranks_ + 1, 0);
  for (const LinkSend& send : sends) ++first[send.from + 1];
  for (int rank = 0; rank < num_ranks_; ++rank) first[rank + 1] += first[rank];
  std::vector<size_t> next(first.begin(), first.end() - 1);
  for (int rank = 0; rank < num_ranks_; ++rank)
    while (next[rank] < first[rank + 1]) {
      LinkSend& send = sends[next[rank]];
      if (send.from == rank)
        ++next[rank];
      else
        std::swap(send, sends[next[send.from]++]);
    }
  for (int rank = 0; rank < num_ranks_; ++rank)
    std::sort(sends.begin() + static_cast<std::ptrdiff_t>(first[rank]),
              sends.begin() + static_cast<std::ptrdiff_t>(first[rank + 1]));
}

// A rank sends the K/V blocks it forwards over one link in the order they reached it (one
// channel per peer, as the runtime's step loop does), so blocks do not share a link's bandwidth
// and arrive whole one after another. Transfers are rendezvous: a link's first send starts only
// once its receiver is ready (`receiver_ready[to]`, its ring phase entered), and the others follow
// it.
void Builder::SendInOrderPerLink(std::vector<LinkSend>& sends,
                                 const std::vector<int>& receiver_ready) {
  SortBySender(sends);
  for (size_t index = 0; index < sends.size(); ++index) {
    const LinkSend& current = sends[index];
    const bool first =
        index == 0 || sends[index - 1].from != current.from || sends[index - 1].to != current.to;
    if (first)
      Dep(receiver_ready[current.to], current.op);
    else
      engine_->Depend(sends[index - 1].op, current.op);
  }
}

// The ring phase of a rank ends after its sends have left (and, with `receiver_too`, after what
// it receives): each link's sends are chained in order, so only the last one of a link needs the
// join. REQUIRES: `sorted` sorted by SendInOrderPerLink.
void Builder::JoinLastPerLink(const std::vector<LinkSend>& sorted,
                              const std::vector<int>& ring_done, bool receiver_too) {
  for (size_t index = 0; index < sorted.size(); ++index) {
    const LinkSend& send = sorted[index];
    const bool last = index + 1 == sorted.size() || sorted[index + 1].from != send.from ||
                      sorted[index + 1].to != send.to;
    if (!last) continue;
    Dep(send.op, ring_done[send.from]);
    if (receiver_too) Dep(send.op, ring_done[send.to]);
  }
}

// Per rank with query heads: the diagonal block, then one op per visiting block in arrival order,
// each after every K/V block (segment) of that origin the rank holds has arrived.
void Builder::AttentionOps(Direction direction, PassOps& ops) {
  const double factor =
      direction == Direction::kBackward ? cost_.constants().attention_backward_factor : 1.0;
  for (int ring_pos = 0; ring_pos < schedule_.num_ring_groups(); ++ring_pos) {
    const GroupSchedule& group = schedule_.RingGroup(ring_pos);
    for (size_t member = 0; member < group.ranks.size(); ++member) {
      const int rank = group.ranks[member];
      const int query_heads = group.member_query_heads[member];
      ops.ring_done[rank] = Marker(rank);
      Dep(ops.local_in[rank], ops.ring_done[rank]);
      if (query_heads == 0) continue;
      auto add_block = [&](int origin, int64_t pairs, int order) {
        const int op =
            Compute(OpLabel::kAttention, rank, factor * AttentionSeconds(rank, query_heads, pairs),
                    Priority(kStageAttention, order), origin);
        Dep(ops.local_in[rank], op);
        Dep(op, ops.ring_done[rank]);
        // Added by increasing distance (own block first, then by arrival): sorted.
        ops.attention[rank].push_back({RingDistance(origin, ring_pos), op});
        return op;
      };
      add_block(ring_pos, schedule_.chains[ring_pos].own_pairs, 0);
      const std::vector<Visit>& visits = visiting_[ring_pos];
      for (size_t order = 0; order < visits.size(); ++order) {
        const int origin = visits[order].origin;
        const int64_t pairs = schedule_.chains[origin].hops[visits[order].hop].causal_pairs;
        const int op = add_block(origin, pairs, static_cast<int>(order) + 1);
        const OriginOps& arrivals = ops.arrivals[rank];
        auto first = std::lower_bound(arrivals.begin(), arrivals.end(), std::make_pair(origin, -1));
        HEXISEQ_CHECK(first != arrivals.end() && first->first == origin,
                      "a needed K/V block never arrives");
        for (; first != arrivals.end() && first->first == origin; ++first) Dep(first->second, op);
      }
    }
  }
}

// Backward: each replica's dK/dV partial goes to its primary after its attention on the block;
// the primary sums them with its own (and, along the chain, with the previous group's sum) and
// sends one message where the schedule's route says. Sums a rank sends over one link leave in the
// order it computes them (one channel per peer, as for K/V).
void Builder::DkvMessages(PassOps& ops) {
  std::vector<int> partials;
  std::vector<LinkSend> sends;
  int feeding_return = -1;  // the previous hop's sum of the current (segment, origin)
  const int ring_groups = schedule_.num_ring_groups();
  // The schedule's messages again (cheaper than holding the pass's dK/dV messages meanwhile).
  ForEachRingMessage(schedule_, Direction::kBackward, [&](const RingMessage& message) {
    if (message.kind != RingMessageKind::kDkvPartial && message.kind != RingMessageKind::kDkvReturn)
      return;
    const int source_pos = schedule_.groups[schedule_.places[message.source_rank].group].ring_pos;
    const int computed =
        FindOp(ops.attention[message.source_rank], RingDistance(message.origin, source_pos));
    HEXISEQ_CHECK(computed >= 0, "a dK/dV message from a rank that did not compute the block");
    const double bytes = static_cast<double>(message.bytes);
    if (message.kind == RingMessageKind::kDkvPartial) {
      const int op = Message(OpLabel::kReplicaDkv, message.source_rank, message.dest_rank, bytes,
                             message.origin);
      Dep(computed, op);
      Dep(ops.local_in[message.dest_rank], op);
      Dep(op, ops.ring_done[message.source_rank]);
      partials.push_back(op);
      return;
    }
    const int op =
        Message(OpLabel::kRingDkv, message.source_rank, message.dest_rank, bytes, message.origin);
    Dep(computed, op);
    for (int partial : partials) Dep(partial, op);
    partials.clear();
    if (schedule_.DkvFeeder(message.hop) >= 0) Dep(feeding_return, op);
    feeding_return = op;
    const int ring_pos = schedule_.chains[message.origin].hops[message.hop].ring_pos;
    sends.push_back({message.source_rank, message.dest_rank,
                     (ring_pos - message.origin + ring_groups) % ring_groups, op});
  });
  SendInOrderPerLink(sends, ops.local_in);
  JoinLastPerLink(sends, ops.ring_done, /*receiver_too=*/true);
}

// Forward: output projection + MLP. Backward: the QKV GEMMs' backward.
void Builder::GemmsAfter(Direction direction, PassOps& ops) {
  const bool forward = direction == Direction::kForward;
  const double factor = forward ? 1.0 : cost_.constants().linear_backward_factor;
  for (int rank : ActiveRanks()) {
    const int op = Compute(forward ? OpLabel::kLinearPost : OpLabel::kLinearPre, rank,
                           factor * GemmSeconds(rank, forward ? post_params_ : qkv_params_),
                           Priority(kStageAfter, 0));
    Dep(ops.local_out[rank], op);
    prev_end_[rank] = op;
  }
}

// An estimate of the ops and dependencies one pass adds, so that the engine's arrays grow once:
// per all-to-all piece one message and two edges; per K/V block or copy two edges (its
// predecessor, the link order; the ring-end joins are per link); per dK/dV partial four (its
// block, the ring end, the link order, the sum waiting for it); per sum three (its block, the
// feeder, the link order); per attention op its arrivals and two joins; a few GEMMs, markers and
// per-link joins per rank.
void Builder::ReserveForPass(Direction direction) {
  constexpr int64_t kOpsPerRank = 8, kEdgesPerRank = 12, kEdgesPerKv = 2, kEdgesPerPartial = 4,
                    kEdgesPerSum = 3, kEdgesPerAttention = 3;
  const bool backward = direction == Direction::kBackward;
  int64_t ops = 0, edges = 0;
  for (bool inbound : {true, false})
    ForEachAllToAllPiece(schedule_, direction, inbound, [&](int, int, int64_t) {
      ops += 1;
      edges += 2;
    });
  for (const KvSegment& segment : schedule_.segments)
    for (const BlockChain& chain : schedule_.chains)
      for (const ChainHop& hop : chain.hops) {
        const int64_t holders = static_cast<int64_t>(segment.holders[hop.ring_pos].size());
        ops += backward ? 2 * holders : holders;
        edges += kEdgesPerKv * holders +
                 (backward ? kEdgesPerPartial * (holders - 1) + kEdgesPerSum : 0);
      }
  for (int ring_pos = 0; ring_pos < schedule_.num_ring_groups(); ++ring_pos) {
    const int64_t attention = static_cast<int64_t>(schedule_.RingGroup(ring_pos).ranks.size()) *
                              (1 + static_cast<int64_t>(visiting_[ring_pos].size()));
    ops += attention;
    edges += kEdgesPerAttention * attention;
  }
  const int64_t ranks = static_cast<int64_t>(ActiveRanks().size());
  engine_->Reserve(ops + kOpsPerRank * ranks, edges + kEdgesPerRank * ranks);
}

void Builder::BuildPass(Direction direction, PassMarks& marks) {
  ReserveForPass(direction);
  PassOps ops;
  for (std::vector<int>* per_rank : {&ops.before, &ops.local_in, &ops.ring_done, &ops.local_out})
    per_rank->assign(num_ranks_, -1);
  ops.arrivals.resize(num_ranks_);
  ops.attention.resize(num_ranks_);
  marks.pass = pass_;
  marks.layer = layer_;
  marks.start = prev_end_;
  GemmsBefore(direction, ops);
  AllToAll(direction, /*inbound=*/true, ops);
  KvMessages(direction, ops);
  AttentionOps(direction, ops);
  std::vector<OriginOps>().swap(ops.arrivals);  // read by the attention ops only
  // A rank's ring phase ends when its own sends have left too (the runtime waits on them before
  // reusing the buffers), so the next pass never shares a link with this one's backlog.
  JoinLastPerLink(kv_sends_, ops.ring_done, /*receiver_too=*/false);
  std::vector<LinkSend>().swap(kv_sends_);  // not needed while the rest is built and run
  if (direction == Direction::kBackward) DkvMessages(ops);
  AllToAll(direction, /*inbound=*/false, ops);
  GemmsAfter(direction, ops);
  marks.local_in = std::move(ops.local_in);
  marks.ring_done = std::move(ops.ring_done);
  marks.end.assign(num_ranks_, -1);
  for (int rank : ActiveRanks()) marks.end[rank] = prev_end_[rank];
}

// visiting_[ring_pos]: the blocks that visit it by increasing ring distance from their origin,
// as LayerSchedule::VisitingOrigins orders them, with their hop index (one pass over the chains
// instead of a search per block and pass). Origins are added in decreasing order, so each list
// holds the origins above ring_pos, then those below it; the nearest come first once rotated.
void Builder::SetupVisits() {
  const int ring_groups = schedule_.num_ring_groups();
  visiting_.assign(ring_groups, {});
  for (int origin = ring_groups - 1; origin >= 0; --origin) {
    const std::vector<ChainHop>& hops = schedule_.chains[origin].hops;
    for (size_t hop = 0; hop < hops.size(); ++hop)
      visiting_[hops[hop].ring_pos].push_back({origin, static_cast<int>(hop)});
  }
  for (int ring_pos = 0; ring_pos < ring_groups; ++ring_pos) {
    std::vector<Visit>& visits = visiting_[ring_pos];
    auto below = std::find_if(visits.begin(), visits.end(),
                              [&](const Visit& visit) { return visit.origin < ring_pos; });
    std::rotate(visits.begin(), below, visits.end());
  }
}

void Builder::Setup() {
  const ModelSpec& model = cost_.model();
  ScheduleSizes sizes;
  sizes.head_dim = model.head_dim;
  sizes.element_bytes = cost_.workload().bytes_per_element;
  sizes.lse_bytes = kLseBytes;
  auto schedule = BuildLayerSchedule(plan_, sizes, options_.dkv_route);
  HEXISEQ_CHECK(schedule.has_value(), "a validated plan has a layer schedule");
  schedule_ = std::move(*schedule);
  num_ranks_ = cost_.cluster().num_ranks();
  qkv_params_ = model.QkvParams();
  post_params_ = model.LayerGemmParams() - qkv_params_;
  mlp_params_ = model.MlpParams();
  for (int ring_pos = 0; ring_pos < schedule_.num_ring_groups(); ++ring_pos) {
    const GroupSchedule& group = schedule_.RingGroup(ring_pos);
    active_ranks_.insert(active_ranks_.end(), group.ranks.begin(), group.ranks.end());
  }
  SetupVisits();
  prev_end_.assign(num_ranks_, -1);
  const int model_layers = std::max(1, model.layers);
  const int layers = std::clamp(options_.explicit_layers, 1, model_layers);
  // Only the first forward starts on every rank at once; one more forward than explicit layers
  // measures the staggered start of the model's other layers.
  const int forwards = std::min(model_layers, layers + 1);
  const double later_forward_weight =
      forwards > 1 ? static_cast<double>(model_layers - 1) / (forwards - 1) : 1.0;
  const double backward_weight = static_cast<double>(model_layers) / layers;
  const bool full = cost_.workload().recompute == Recompute::kFull;
  for (int layer = 0; layer < forwards; ++layer)
    passes_.push_back(
        {Direction::kForward, sim::Pass::kForward, layer, layer == 0 ? 1.0 : later_forward_weight});
  for (int layer = layers - 1; layer >= 0; --layer) {
    if (full)
      passes_.push_back({Direction::kForward, sim::Pass::kRecompute, layer, backward_weight});
    passes_.push_back({Direction::kBackward, sim::Pass::kBackward, layer, backward_weight});
  }
}

PassMarks Builder::AddPass(int index, Engine& engine, const std::vector<int64_t>* start_ns) {
  engine_ = &engine;
  const PassSpec& spec = passes_[index];
  pass_ = spec.pass;
  layer_ = spec.layer;
  if (start_ns != nullptr) {
    for (int rank : ActiveRanks()) {
      prev_end_[rank] = Marker(rank);
      engine.ReleaseAt(prev_end_[rank], (*start_ns)[rank]);
    }
  }
  PassMarks marks;
  BuildPass(spec.direction, marks);
  marks.weight = spec.weight;
  return marks;
}

LayerGraph Builder::Summary() const {
  LayerGraph graph;
  graph.num_segments = static_cast<int>(schedule_.segments.size());
  graph.head_seconds.assign(num_ranks_, 0);
  const ModelSpec& model = cost_.model();
  const double head_params = static_cast<double>(model.vocab) * model.hidden;
  for (int rank : ActiveRanks())
    graph.head_seconds[rank] =
        (1 + cost_.constants().linear_backward_factor) * GemmSeconds(rank, head_params);
  return graph;
}

}  // namespace

struct LayerGraphBuilder::Impl {
  Impl(const Plan& plan, const CostModel& cost, const GraphOptions& options)
      : options(options), builder(plan, cost, this->options) {}
  GraphOptions options;
  Builder builder;
};

LayerGraphBuilder::LayerGraphBuilder(const Plan& plan, const CostModel& cost,
                                     const GraphOptions& options)
    : impl_(std::make_unique<Impl>(plan, cost, options)) {}
LayerGraphBuilder::~LayerGraphBuilder() = default;
int LayerGraphBuilder::num_passes() const { return impl_->builder.num_passes(); }
PassMarks LayerGraphBuilder::AddPass(int index, Engine& engine,
                                     const std::vector<int64_t>& start_ns) {
  return impl_->builder.AddPass(index, engine, &start_ns);
}
LayerGraph LayerGraphBuilder::Summary() const { return impl_->builder.Summary(); }

LayerGraph BuildLayerGraph(const Plan& plan, const CostModel& cost, const GraphOptions& options,
                           Engine& engine) {
  Builder builder(plan, cost, options);
  LayerGraph graph = builder.Summary();
  for (int index = 0; index < builder.num_passes(); ++index)
    graph.passes.push_back(builder.AddPass(index, engine, nullptr));
  return graph;
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

// The participating GPUs of each node, in rank order; nodes without any are dropped.
std::vector<std::vector<int>> ParticipantsByNode(const Cluster& cluster,
                                                 const std::vector<int>& participants) {
  std::vector<std::vector<int>> by_node(cluster.nodes.size());
  for (int rank : participants) by_node[cluster.ranks[rank].node].push_back(rank);
  std::erase_if(by_node, [](const std::vector<int>& ranks) { return ranks.empty(); });
  return by_node;
}

// Phase A: a ring over each node's participating GPUs, g - 1 steps of bucket / g bytes; a GPU
// sends step s once it has received step s - 1 and sent step s - 1 (a channel sends its chunks in
// order, so two steps never share a port). Returns the ops that end the phase.
std::vector<int> IntraNodeRings(const std::vector<std::vector<int>>& nodes, double bucket,
                                Engine& engine) {
  std::vector<int> ends;
  for (const std::vector<int>& gpus : nodes) {
    const int size = static_cast<int>(gpus.size());
    std::vector<int> received(size, -1), sent(size, -1);
    for (int step = 0; step + 1 < size; ++step) {
      for (int local = 0; local < size; ++local) {
        const int from = gpus[local];
        const int to = gpus[(local + 1) % size];
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

// Phase B: a ring over the participating nodes, N - 1 steps; at each step every participating
// GPU j of node i sends its bucket / (N g_i) share to GPU j mod g_{i+1} of the next node, after
// its node has received the whole previous step (a per-node join) and after its own previous send
// (in order).
void InterNodeRing(const std::vector<std::vector<int>>& nodes, int num_ranks, double bucket,
                   int start, Engine& engine) {
  const int num_nodes = static_cast<int>(nodes.size());
  std::vector<int> node_ready(num_nodes, start);
  std::vector<int> last_sent(num_ranks, -1);
  for (int step = 0; step + 1 < num_nodes; ++step) {
    std::vector<int> node_received(num_nodes, -1);
    for (int index = 0; index < num_nodes; ++index) {
      const std::vector<int>& to = nodes[(index + 1) % num_nodes];
      node_received[(index + 1) % num_nodes] = GradSyncMarker(to.front(), engine);
    }
    for (int index = 0; index < num_nodes; ++index) {
      const std::vector<int>& from = nodes[index];
      const std::vector<int>& to = nodes[(index + 1) % num_nodes];
      const int from_gpus = static_cast<int>(from.size());
      const double flow_bytes = bucket / num_nodes / from_gpus;
      for (int local = 0; local < from_gpus; ++local) {
        const int message =
            engine.Add(GradSyncMessage(from[local], to[local % to.size()], flow_bytes, step));
        engine.Depend(node_ready[index], message);
        engine.Depend(message, node_received[(index + 1) % num_nodes]);
        int& previous = last_sent[from[local]];
        if (previous >= 0) engine.Depend(previous, message);
        previous = message;
      }
    }
    node_ready = node_received;
  }
}

}  // namespace

void BuildGradSyncGraph(const CostModel& cost, Engine& engine) {
  std::vector<int> every_rank(cost.cluster().num_ranks());
  for (int rank = 0; rank < cost.cluster().num_ranks(); ++rank) every_rank[rank] = rank;
  BuildGradSyncGraph(cost, every_rank, engine);
}

void BuildGradSyncGraph(const CostModel& cost, const std::vector<int>& participants,
                        Engine& engine) {
  if (participants.size() <= 1) return;
  const double bucket = cost.GradBucketBytes();
  const std::vector<std::vector<int>> nodes = ParticipantsByNode(cost.cluster(), participants);
  const std::vector<int> intra_ends = IntraNodeRings(nodes, bucket, engine);
  if (nodes.size() <= 1) return;
  const int barrier = GradSyncMarker(participants.front(), engine);
  for (int op : intra_ends) engine.Depend(op, barrier);
  InterNodeRing(nodes, cost.cluster().num_ranks(), bucket, barrier, engine);
}

}  // namespace hexiseq::sim
