// Distributed attention executing the layer schedule: one pass driver for forward and backward,
// built from one all-to-all that takes a split table and one sub-ring runner. Ring messages go
// through an event loop over asynchronous point-to-point messages; receives are posted per stream
// (one stream per role and segment) at most kWindow at a time, in ring-distance order; that order,
// together with sends that never block, makes the exchange deadlock-free for every plan (see
// docs/runtime.md).
#include "runtime/dist_attention.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <string>

#include "runtime/attention_kernels.h"
#include "runtime/slowdown.h"
#include "runtime/str_cat.h"

namespace hexiseq::runtime {
namespace {

constexpr size_t kWindow = 2;  // receives posted ahead per stream
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kFloatBytes = static_cast<int64_t>(sizeof(float));
constexpr int kNoRank = -1;

// Message kinds on the ring communicator; part of the tag.
enum Kind : int { kKvForward = 0, kKvBackward = 1, kDkvPartial = 2, kDkvReturn = 3, kNumKinds };

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

using Buffer = std::shared_ptr<std::vector<float>>;

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// Asynchronous sends and windowed receive streams, completed in whatever order they finish.
class MessageLoop {
 public:
  struct Expected {
    int source = 0;
    int tag = 0;
    int64_t count = 0;  // floats
    std::function<void(const Buffer&)> on_arrival;
  };

  MessageLoop(Comm& comm, PhaseTimes& times) : comm_(comm), times_(times) {}

  void Send(Buffer data, int dest, int tag) {
    Pending pending;
    pending.request = comm_.Isend(data->data(), data->size() * sizeof(float), dest, tag);
    pending.buffer = std::move(data);
    times_.ring_bytes_sent += static_cast<double>(pending.buffer->size() * sizeof(float));
    pending_.push_back(std::move(pending));
  }

  void AddStream(std::vector<Expected> expected) {
    if (expected.empty()) return;
    streams_.push_back(Stream{std::move(expected), 0});
    const int stream = static_cast<int>(streams_.size()) - 1;
    for (size_t count = 0; count < kWindow; ++count) PostNext(stream);
  }

  void Run() {
    while (!pending_.empty()) {
      std::vector<Request*> requests;
      for (Pending& pending : pending_) requests.push_back(pending.request.get());
      const Clock::time_point start = Clock::now();
      const size_t index = comm_.WaitAny(requests);
      times_.ring_wait += Since(start);
      Pending done = std::move(pending_[index]);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(index));
      if (done.stream >= 0) {
        PostNext(done.stream);
        streams_[done.stream].expected[done.index].on_arrival(done.buffer);
      }
    }
  }

 private:
  struct Pending {
    RequestPtr request;
    Buffer buffer;
    int stream = -1;  // -1 for a send
    size_t index = 0;
  };
  struct Stream {
    std::vector<Expected> expected;
    size_t next = 0;
  };

  void PostNext(int stream_index) {
    Stream& stream = streams_[stream_index];
    if (stream.next >= stream.expected.size()) return;
    const Expected& expected = stream.expected[stream.next];
    Pending pending;
    pending.buffer = std::make_shared<std::vector<float>>(expected.count);
    pending.request = comm_.Irecv(pending.buffer->data(), pending.buffer->size() * sizeof(float),
                                  expected.source, expected.tag);
    pending.stream = stream_index;
    pending.index = stream.next++;
    pending_.push_back(std::move(pending));
  }

  Comm& comm_;
  PhaseTimes& times_;
  std::deque<Stream> streams_;
  std::vector<Pending> pending_;
};

void AddInto(std::vector<float>& target, const std::vector<float>& source) {
  for (size_t index = 0; index < target.size(); ++index) target[index] += source[index];
}

}  // namespace

struct DistributedAttention::State {
  bool has_forward = false;
  int64_t group_rows = 0;                 // rows of the group's head layout
  std::vector<float> q, o, lse, d_o, dq;  // [heads][group_rows][d] ([heads][group_rows] for lse)
  std::vector<Buffer> kv;                 // per held segment: [K | V], each [seg heads][rows][d]
  std::vector<Buffer> dkv;                // same shape as kv
  // Per held segment: local query-head indices in it; per local head, its KV index in the segment.
  std::vector<std::vector<int>> segment_heads;
  std::vector<int> head_kv_index;
  std::vector<int> kv_segment;  // index in role.kv_heads -> local segment index
  std::vector<int> kv_index;    // index in role.kv_heads -> KV index inside its segment
};

// A token-layout tensor: rows of `heads` heads of `width` values. An inbound exchange reads
// `source`; an outbound one writes `target` (adding when `accumulate`, for dK/dV of shared heads).
struct DistributedAttention::TokenTensor {
  const float* source = nullptr;
  float* target = nullptr;
  int64_t heads = 0;
  int64_t width = 0;
  bool accumulate = false;
};

namespace {

using State = DistributedAttention::State;
using TokenTensor = DistributedAttention::TokenTensor;

// ---- All-to-all ---------------------------------------------------------------------------

// One head of one tensor moved by an all-to-all: head `head` of tokens[tensor] in token layout;
// in head layout the rows start at `head_rows` ([group rows][width]; this rank's slots only).
struct Slot {
  int tensor = 0;
  int head = 0;
  float* head_rows = nullptr;
};

// Everything one all-to-all moves: the token tensors, this rank's slots, and each member's slots
// (the heads it holds, in the order the split table counts them).
struct Exchange {
  bool inbound = true;  // token -> head layout
  std::vector<TokenTensor> tokens;
  std::vector<Slot> my_slots;
  std::vector<std::vector<Slot>> member_slots;
};

// The slots of a rank for one exchange: its query heads of the main tensor, (forward outbound)
// their LSE, and (forward inbound, backward outbound) its KV heads of the K and V tensors. With
// `state`, also where they live in this rank's head layout.
std::vector<Slot> SlotsOf(const AttentionLayout& layout, const RankRole& role, Direction direction,
                          bool inbound, State* state, int64_t head_dim) {
  const bool carries_kv = (direction == Direction::kForward) == inbound;
  const bool carries_lse = direction == Direction::kForward && !inbound;
  std::vector<float>* query_rows = nullptr;
  std::vector<Buffer>* kv_rows = nullptr;
  if (state != nullptr) {
    query_rows = direction == Direction::kForward ? (inbound ? &state->q : &state->o)
                                                  : (inbound ? &state->d_o : &state->dq);
    kv_rows = direction == Direction::kForward ? &state->kv : &state->dkv;
  }
  const int64_t rows = state != nullptr ? state->group_rows : 0;
  std::vector<Slot> slots;
  for (size_t local = 0; local < role.heads.size(); ++local) {
    float* head_rows = query_rows ? query_rows->data() + local * rows * head_dim : nullptr;
    slots.push_back(Slot{0, role.heads[local], head_rows});
  }
  if (carries_lse) {
    for (size_t local = 0; local < role.heads.size(); ++local) {
      float* head_rows = state ? state->lse.data() + local * rows : nullptr;
      slots.push_back(Slot{1, role.heads[local], head_rows});
    }
  }
  if (!carries_kv) return slots;
  for (int part = 0; part < 2; ++part) {  // K (or dK), then V (or dV)
    for (size_t local = 0; local < role.kv_heads.size(); ++local) {
      float* head_rows = nullptr;
      if (state != nullptr) {
        const int segment = state->kv_segment[local];
        const int64_t segment_kv =
            static_cast<int64_t>(layout.schedule.segments[role.segments[segment]].kv_heads.size());
        head_rows = (*kv_rows)[segment]->data() +
                    (part * segment_kv + state->kv_index[local]) * rows * head_dim;
      }
      slots.push_back(Slot{1 + part, role.kv_heads[local], head_rows});
    }
  }
  return slots;
}

// Copies what `member` gets from this rank into `out`; returns the floats written.
int64_t PackFor(const Exchange& exchange, int member, int64_t my_tokens, int64_t member_offset,
                int64_t member_tokens, float* out) {
  const float* const start = out;
  if (exchange.inbound) {  // my token rows of the member's heads
    for (const Slot& slot : exchange.member_slots[member]) {
      const TokenTensor& tensor = exchange.tokens[slot.tensor];
      for (int64_t row = 0; row < my_tokens; ++row, out += tensor.width) {
        std::copy_n(tensor.source + (row * tensor.heads + slot.head) * tensor.width, tensor.width,
                    out);
      }
    }
  } else {  // the member's rows of my heads
    for (const Slot& slot : exchange.my_slots) {
      const int64_t width = exchange.tokens[slot.tensor].width;
      out = std::copy_n(slot.head_rows + member_offset * width, member_tokens * width, out);
    }
  }
  return out - start;
}

// Places what this rank got from `member`; returns the floats read.
int64_t UnpackFrom(const Exchange& exchange, int member, int64_t my_tokens, int64_t member_offset,
                   int64_t member_tokens, const float* in) {
  const float* const start = in;
  if (exchange.inbound) {  // the member's token rows of my heads
    for (const Slot& slot : exchange.my_slots) {
      const int64_t width = exchange.tokens[slot.tensor].width;
      std::copy_n(in, member_tokens * width, slot.head_rows + member_offset * width);
      in += member_tokens * width;
    }
  } else {  // my token rows of the member's heads
    for (const Slot& slot : exchange.member_slots[member]) {
      const TokenTensor& tensor = exchange.tokens[slot.tensor];
      for (int64_t row = 0; row < my_tokens; ++row, in += tensor.width) {
        float* target = tensor.target + (row * tensor.heads + slot.head) * tensor.width;
        if (tensor.accumulate) {
          for (int64_t col = 0; col < tensor.width; ++col) target[col] += in[col];
        } else {
          std::copy_n(in, tensor.width, target);
        }
      }
    }
  }
  return in - start;
}

// The one all-to-all: counts and displacements come from the group's split table (bytes of fp32
// values); packing and unpacking from the exchange's slots, checked against the table.
void RunAllToAll(Comm& group_comm, const SplitTable& table, const LayoutGroup& group, int me,
                 const Exchange& exchange) {
  const int members = table.members;
  std::vector<int64_t> send_counts(members), send_displs(members), recv_counts(members),
      recv_displs(members);
  int64_t send_total = 0;
  int64_t recv_total = 0;
  for (int member = 0; member < members; ++member) {
    send_counts[member] = table.Bytes(me, member) / kFloatBytes;
    recv_counts[member] = table.Bytes(member, me) / kFloatBytes;
    send_displs[member] = send_total;
    recv_displs[member] = recv_total;
    send_total += send_counts[member];
    recv_total += recv_counts[member];
  }
  const int64_t my_tokens = group.member_offset[me + 1] - group.member_offset[me];
  std::vector<float> send(send_total);
  for (int member = 0; member < members; ++member) {
    const int64_t offset = group.member_offset[member];
    const int64_t tokens = group.member_offset[member + 1] - offset;
    const int64_t written =
        PackFor(exchange, member, my_tokens, offset, tokens, send.data() + send_displs[member]);
    HEXISEQ_CHECK(written == send_counts[member], "packed exactly the split table's bytes");
  }
  std::vector<float> recv(recv_total);
  group_comm.Alltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts,
                       recv_displs);
  for (int member = 0; member < members; ++member) {
    const int64_t offset = group.member_offset[member];
    const int64_t tokens = group.member_offset[member + 1] - offset;
    const int64_t read =
        UnpackFrom(exchange, member, my_tokens, offset, tokens, recv.data() + recv_displs[member]);
    HEXISEQ_CHECK(read == recv_counts[member], "unpacked exactly the split table's bytes");
  }
}

// ---- Sub-ring runner ----------------------------------------------------------------------

// The kernel applied to one block of one held segment: forward merges it into O/LSE; backward
// adds dQ and writes the block's dK/dV partial into `dkv_block`.
using BlockKernel =
    std::function<void(int local_segment, int origin, const float* kv_block, float* dkv_block)>;

// Runs one direction's sub-ring phase for one rank, exactly as the layer schedule lists it
// (ForEachRingMessage): blocks primary to primary along their chains and on to replicas; in
// backward, partials from replicas to their primary and one summed return to the owner's primary.
class SubRingRunner {
 public:
  SubRingRunner(const AttentionLayout& layout, int rank, Direction direction, Comm& ring_comm,
                PhaseTimes& times, State& state, BlockKernel kernel)
      : layout_(layout),
        schedule_(layout.schedule),
        role_(layout.roles[rank]),
        rank_(rank),
        backward_(direction == Direction::kBackward),
        state_(state),
        kernel_(std::move(kernel)),
        loop_(ring_comm, times) {}

  void Run() {
    for (size_t local = 0; local < role_.segments.size(); ++local) {
      PostSegment(static_cast<int>(local));
    }
    for (size_t local = 0; local < role_.segments.size(); ++local) {
      float* own_dkv = backward_ ? state_.dkv[local]->data() : nullptr;
      kernel_(static_cast<int>(local), role_.ring_pos, state_.kv[local]->data(), own_dkv);
    }
    loop_.Run();
    HEXISEQ_CHECK(partials_.empty(), "every dK/dV partial sum was completed and returned");
    HEXISEQ_CHECK(returns_.empty(), "every returned dK/dV sum was added");
  }

 private:
  // The contributions to one block's dK/dV sum at a group's primary. They are added once all
  // have arrived, in a fixed order (the previous hop's sum, then the holders' partials in holder
  // order), so the sum is bit-identical whatever order the messages arrive in.
  struct PartialSum {
    std::vector<Buffer> parts;  // kFedSlot, then HolderSlot(holder)
    size_t missing = 0;
  };
  static constexpr size_t kFedSlot = 0;
  static size_t HolderSlot(size_t holder) { return 1 + holder; }

  // The owner's returned dK/dV sums of its own block (one per returning hop), added in hop order
  // once all have arrived, for the same reason.
  struct Returns {
    std::vector<Buffer> by_hop;
    size_t missing = 0;
  };

  int Tag(int kind, int segment, int ring_pos) const {
    const int segments = static_cast<int>(schedule_.segments.size());
    return (kind * segments + segment) * schedule_.num_ring_groups() + ring_pos;
  }
  int KvKind() const { return backward_ ? kKvBackward : kKvForward; }
  const std::vector<int>& Holders(int local) const {
    return schedule_.segments[role_.segments[local]].holders[role_.ring_pos];
  }
  int64_t BlockFloats(int local, int origin) const {
    return schedule_.BlockBytes(role_.segments[local], origin) / kFloatBytes;
  }

  // Receives for the blocks visiting this group, the partials (primary, backward) and the returns
  // of the own block (primary, backward); sends the own block to the first group of its chain.
  void PostSegment(int local) {
    const int segment = role_.segments[local];
    const bool primary = Holders(local).front() == rank_;
    std::vector<MessageLoop::Expected> blocks;
    std::vector<MessageLoop::Expected> partials;
    std::vector<MessageLoop::Expected> fed_sums;
    for (int origin : schedule_.VisitingOrigins(role_.ring_pos)) {
      blocks.push_back(BlockArrival(local, origin, primary));
      if (!primary || !backward_) continue;
      const int feeder = schedule_.DkvFeeder(schedule_.HopIndex(origin, role_.ring_pos));
      if (feeder >= 0) fed_sums.push_back(FedSum(local, origin, feeder));
      for (size_t replica = 1; replica < Holders(local).size(); ++replica) {
        MessageLoop::Expected partial;
        partial.source = Holders(local)[replica];
        partial.tag = Tag(kDkvPartial, segment, origin);
        partial.count = BlockFloats(local, origin);
        partial.on_arrival = [this, local, origin, replica](const Buffer& data) {
          Contribute(local, origin, HolderSlot(replica), data);
        };
        partials.push_back(std::move(partial));
      }
    }
    loop_.AddStream(std::move(blocks));
    loop_.AddStream(std::move(partials));
    loop_.AddStream(std::move(fed_sums));
    if (!primary) return;
    const BlockChain& chain = schedule_.chains[role_.ring_pos];
    if (!chain.hops.empty()) {
      loop_.Send(state_.kv[local], schedule_.segments[segment].Primary(chain.hops.front().ring_pos),
                 Tag(KvKind(), segment, role_.ring_pos));
    }
    if (backward_) PostReturns(local);
  }

  // Along the chain: the previous hop's summed dK/dV of the block, added to this group's sum.
  MessageLoop::Expected FedSum(int local, int origin, int feeder_hop) {
    const int segment = role_.segments[local];
    MessageLoop::Expected expected;
    expected.source =
        schedule_.segments[segment].Primary(schedule_.chains[origin].hops[feeder_hop].ring_pos);
    expected.tag = Tag(kDkvReturn, segment, origin);
    expected.count = BlockFloats(local, origin);
    expected.on_arrival = [this, local, origin](const Buffer& data) {
      Contribute(local, origin, kFedSlot, data);
    };
    return expected;
  }

  MessageLoop::Expected BlockArrival(int local, int origin, bool primary) {
    const int segment = role_.segments[local];
    const KvSegment& kv_segment = schedule_.segments[segment];
    const BlockChain& chain = schedule_.chains[origin];
    const int hop = schedule_.HopIndex(origin, role_.ring_pos);
    MessageLoop::Expected expected;
    expected.tag = Tag(KvKind(), segment, origin);
    expected.count = BlockFloats(local, origin);
    if (!primary) {
      expected.source = Holders(local).front();
    } else {
      expected.source =
          hop == 0 ? kv_segment.Primary(origin) : kv_segment.Primary(chain.hops[hop - 1].ring_pos);
    }
    const bool has_next = primary && hop + 1 < static_cast<int>(chain.hops.size());
    const int next = has_next ? kv_segment.Primary(chain.hops[hop + 1].ring_pos) : kNoRank;
    expected.on_arrival = [this, local, origin, primary, next](const Buffer& block) {
      OnBlock(local, origin, primary, next, block);
    };
    return expected;
  }

  void OnBlock(int local, int origin, bool primary, int next, const Buffer& block) {
    const int segment = role_.segments[local];
    if (primary) {
      if (next != kNoRank) loop_.Send(block, next, Tag(KvKind(), segment, origin));
      for (size_t replica = 1; replica < Holders(local).size(); ++replica) {
        loop_.Send(block, Holders(local)[replica], Tag(KvKind(), segment, origin));
      }
    }
    if (!backward_) {
      kernel_(local, origin, block->data(), nullptr);
      return;
    }
    auto partial = std::make_shared<std::vector<float>>(block->size(), 0.0f);
    kernel_(local, origin, block->data(), partial->data());
    if (primary) {
      Contribute(local, origin, HolderSlot(0), partial);
    } else {
      loop_.Send(partial, Holders(local).front(), Tag(kDkvPartial, segment, origin));
    }
  }

  // Sums the partials of this group (and the previous hop's sum, along the chain) at its
  // primary; the last contribution sends the sum where the schedule's route says.
  void Contribute(int local, int origin, size_t slot, const Buffer& part) {
    const int hop = schedule_.HopIndex(origin, role_.ring_pos);
    PartialSum& entry = partials_[{local, origin}];
    if (entry.parts.empty()) {
      entry.parts.resize(HolderSlot(Holders(local).size()));
      entry.missing = Holders(local).size() + (schedule_.DkvFeeder(hop) >= 0 ? 1 : 0);
    }
    HEXISEQ_CHECK(!entry.parts[slot], "one dK/dV contribution per slot");
    entry.parts[slot] = part;
    if (--entry.missing > 0) return;
    const Buffer sum = SumInOrder(entry.parts);
    const int segment = role_.segments[local];
    loop_.Send(sum, schedule_.DkvTarget(segment, origin, hop), Tag(kDkvReturn, segment, origin));
    partials_.erase({local, origin});
  }

  // The sum of the present parts, in slot order, accumulated into the first one.
  static Buffer SumInOrder(const std::vector<Buffer>& parts) {
    Buffer sum;
    for (const Buffer& part : parts) {
      if (!part) continue;
      if (!sum) {
        sum = part;
      } else {
        AddInto(*sum, *part);
      }
    }
    return sum;
  }

  void PostReturns(int local) {
    const int segment = role_.segments[local];
    std::vector<MessageLoop::Expected> returns;
    const std::vector<ChainHop>& hops = schedule_.chains[role_.ring_pos].hops;
    Returns& pending = returns_[local];
    pending.by_hop.assign(hops.size(), nullptr);
    for (int hop = 0; hop < static_cast<int>(hops.size()); ++hop) {
      if (!schedule_.ReturnsToOwner(role_.ring_pos, hop)) continue;
      ++pending.missing;
      MessageLoop::Expected expected;
      expected.source = schedule_.segments[segment].Primary(hops[hop].ring_pos);
      expected.tag = Tag(kDkvReturn, segment, role_.ring_pos);
      expected.count = static_cast<int64_t>(state_.dkv[local]->size());
      expected.on_arrival = [this, local, hop](const Buffer& data) {
        Returns& arrived = returns_[local];
        arrived.by_hop[hop] = data;
        if (--arrived.missing > 0) return;
        for (const Buffer& part : arrived.by_hop) {
          if (part) AddInto(*state_.dkv[local], *part);
        }
        returns_.erase(local);
      };
      returns.push_back(std::move(expected));
    }
    if (pending.missing == 0) returns_.erase(local);
    loop_.AddStream(std::move(returns));
  }

  const AttentionLayout& layout_;
  const LayerSchedule& schedule_;
  const RankRole& role_;
  int rank_;
  bool backward_;
  State& state_;
  BlockKernel kernel_;
  MessageLoop loop_;
  std::map<std::pair<int, int>, PartialSum> partials_;  // (local segment, origin)
  std::map<int, Returns> returns_;                      // by local segment
};

// The kernel inputs of one block: the query heads of held segment `local` (with their KV index in
// the segment) against the block of ring position `origin`, laid out [K | V][seg heads][rows][d].
AttentionInputs BlockInputs(const AttentionLayout& layout, const RankRole& role, const State& state,
                            int local, int origin, const float* kv_block, int head_dim) {
  const LayoutGroup& origin_group = layout.RingGroup(origin);
  const int64_t block_rows = origin_group.num_tokens();
  const int64_t query_rows = state.group_rows;
  const int64_t segment_kv =
      static_cast<int64_t>(layout.schedule.segments[role.segments[local]].kv_heads.size());
  AttentionInputs inputs;
  inputs.head_dim = head_dim;
  inputs.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  inputs.q_positions = layout.groups[role.group].positions;
  inputs.k_positions = origin_group.positions;
  for (int head : state.segment_heads[local]) {
    inputs.q.push_back(state.q.data() + head * query_rows * head_dim);
    inputs.kv_index.push_back(state.head_kv_index[head]);
  }
  for (int64_t kv = 0; kv < segment_kv; ++kv) {
    inputs.k.push_back(kv_block + kv * block_rows * head_dim);
    inputs.v.push_back(kv_block + (segment_kv + kv) * block_rows * head_dim);
  }
  return inputs;
}

// Where each local query head and each needed KV head sits among the held segments.
void IndexHeldSegments(const AttentionLayout& layout, const RankRole& role, State& state) {
  auto locate = [&](int kv, auto&& on_found) {
    for (size_t local = 0; local < role.segments.size(); ++local) {
      const std::vector<int>& kvs = layout.schedule.segments[role.segments[local]].kv_heads;
      auto found = std::find(kvs.begin(), kvs.end(), kv);
      if (found != kvs.end())
        on_found(static_cast<int>(local), static_cast<int>(found - kvs.begin()));
    }
  };
  state.segment_heads.resize(role.segments.size());
  for (size_t head = 0; head < role.heads.size(); ++head) {
    locate(layout.kv_of(role.heads[head]), [&](int local, int kv_index) {
      state.head_kv_index.push_back(kv_index);
      state.segment_heads[local].push_back(static_cast<int>(head));
    });
  }
  for (int kv : role.kv_heads) {
    locate(kv, [&](int local, int kv_index) {
      state.kv_segment.push_back(local);
      state.kv_index.push_back(kv_index);
    });
  }
  HEXISEQ_CHECK(state.head_kv_index.size() == role.heads.size() &&
                    state.kv_segment.size() == role.kv_heads.size(),
                "every needed KV head belongs to exactly one held segment");
}

// Tags and message sizes the transport must support for this schedule.
Result<void> CheckTransportLimits(const LayerSchedule& schedule, const Comm& world) {
  const int ring_groups = schedule.num_ring_groups();
  const int64_t num_segments = static_cast<int64_t>(schedule.segments.size());
  const int64_t max_tag = (kNumKinds * num_segments) * std::max(ring_groups, 1);
  if (max_tag > world.max_tag()) {
    return NotSupported(StrCat("plan needs message tags up to ", max_tag, " (", num_segments,
                               " KV segments x ", ring_groups,
                               " ring groups) but the transport allows ", world.max_tag()));
  }
  for (int segment = 0; segment < num_segments; ++segment) {
    for (int origin = 0; origin < ring_groups; ++origin) {
      const int64_t bytes = schedule.BlockBytes(segment, origin);
      if (bytes <= static_cast<int64_t>(INT_MAX)) continue;
      return NotSupported(StrCat("a K/V block of ", schedule.RingGroup(origin).num_tokens,
                                 " tokens x ", schedule.segments[segment].kv_heads.size(),
                                 " KV heads x head_dim ", schedule.sizes.head_dim, " is ", bytes,
                                 " bytes, over the ", INT_MAX,
                                 "-byte message limit of the transport (hint: use more groups)"));
    }
  }
  return {};
}

std::string RankList(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank);
  return text;
}

// "rank 3 <what> X; ranks 0, 1 <what> Y" for every distinct value.
template <class Value, class Format>
std::string DescribeGroups(const std::map<Value, std::vector<int>>& ranks_by_value,
                           const std::string& what, Format format) {
  std::string parts;
  for (const auto& [value, ranks] : ranks_by_value) {
    parts += StrCat(parts.empty() ? "" : "; ", "rank", ranks.size() > 1 ? "s" : "", " ",
                    RankList(ranks), " ", what, " ", format(value));
  }
  return parts;
}

}  // namespace

Result<void> CheckPlanAgreement(Comm& comm, const Plan& plan, int head_dim) {
  struct Entry {
    uint64_t hash;
    int64_t head_dim;
  };
  const Entry mine{PlanHash(plan), head_dim};
  std::vector<Entry> all(comm.size());
  comm.Allgather(&mine, sizeof(Entry), all.data());
  std::map<uint64_t, std::vector<int>> ranks_by_hash;
  std::map<int64_t, std::vector<int>> ranks_by_dim;
  for (int rank = 0; rank < comm.size(); ++rank) {
    ranks_by_hash[all[rank].hash].push_back(rank);
    ranks_by_dim[all[rank].head_dim].push_back(rank);
  }
  if (ranks_by_hash.size() > 1) {
    return InvalidArgument(StrCat(
        "plan mismatch across ranks: ",
        DescribeGroups(ranks_by_hash, "loaded plan hash", [](uint64_t hash) { return Hex(hash); }),
        " (hint: give every rank the same plan file)"));
  }
  if (ranks_by_dim.size() > 1) {
    return InvalidArgument(
        StrCat("head_dim mismatch across ranks: ",
               DescribeGroups(ranks_by_dim, "use head_dim", [](int64_t dim) { return dim; })));
  }
  if (plan.num_ranks != comm.size()) {
    return InvalidArgument(StrCat("plan: num_ranks = ", plan.num_ranks, " but ", comm.size(),
                                  " processes are running (hint: mpirun -np ", plan.num_ranks,
                                  ")"));
  }
  return {};
}

DistributedAttention::DistributedAttention(AttentionLayout layout, Comm& world, int head_dim)
    : layout_(std::move(layout)),
      world_(world),
      head_dim_(head_dim),
      rank_(world.rank()),
      state_(std::make_unique<State>()) {}

DistributedAttention::~DistributedAttention() = default;

Result<std::unique_ptr<DistributedAttention>> DistributedAttention::Create(const Plan& plan,
                                                                           Comm& world,
                                                                           int head_dim) {
  if (auto agreed = CheckPlanAgreement(world, plan, head_dim); !agreed) {
    return std::unexpected(agreed.error());
  }
  // From here on every decision depends only on (plan, head_dim, world size), which all ranks
  // share, so every rank returns the same error or none.
  if (auto valid = ValidateStructure(plan); !valid) return std::unexpected(valid.error());
  if (head_dim < 1) {
    return InvalidArgument(StrCat("head_dim = ", head_dim, ": must be >= 1"));
  }
  auto layout = AttentionLayout::Build(plan, head_dim);
  if (!layout) return std::unexpected(layout.error());
  if (auto limits = CheckTransportLimits(layout->schedule, world); !limits) {
    return std::unexpected(limits.error());
  }
  std::unique_ptr<DistributedAttention> attention(
      new DistributedAttention(std::move(*layout), world, head_dim));
  const RankRole& role = attention->layout_.roles[attention->rank_];
  attention->group_comm_ = world.Split(role.group, role.member);
  attention->ring_comm_ = world.Dup();
  State& state = *attention->state_;
  state.group_rows = attention->layout_.groups[role.group].num_tokens();
  IndexHeldSegments(attention->layout_, role, state);
  return attention;
}

void DistributedAttention::AllocateHeadLayout(Direction direction) {
  State& state = *state_;
  const RankRole& role = layout_.roles[rank_];
  const int64_t head_floats =
      static_cast<int64_t>(role.heads.size()) * state.group_rows * head_dim_;
  std::vector<Buffer>& blocks = direction == Direction::kForward ? state.kv : state.dkv;
  blocks.clear();
  for (int segment : role.segments) {
    blocks.push_back(std::make_shared<std::vector<float>>(
        2 * layout_.schedule.segments[segment].kv_heads.size() * state.group_rows * head_dim_));
  }
  if (direction == Direction::kForward) {
    state.q.assign(head_floats, 0.0f);
    state.o.assign(head_floats, 0.0f);
    state.lse.assign(static_cast<int64_t>(role.heads.size()) * state.group_rows, kNegInf);
  } else {
    state.d_o.assign(head_floats, 0.0f);
    state.dq.assign(head_floats, 0.0f);
  }
}

void DistributedAttention::ComputeBlock(Direction direction, int local, int origin,
                                        const float* kv_block, float* dkv_block,
                                        PhaseTimes& times) {
  const Clock::time_point start = Clock::now();
  State& state = *state_;
  const RankRole& role = layout_.roles[rank_];
  const AttentionInputs inputs =
      BlockInputs(layout_, role, state, local, origin, kv_block, head_dim_);
  const int64_t query_floats = state.group_rows * head_dim_;
  if (direction == Direction::kForward) {
    ForwardOutputs outputs;
    for (int head : state.segment_heads[local]) {
      outputs.o.push_back(state.o.data() + head * query_floats);
      outputs.lse.push_back(state.lse.data() + head * state.group_rows);
    }
    AttentionForward(inputs, outputs, /*accumulate=*/true);
  } else {
    const int64_t block_floats = layout_.RingGroup(origin).num_tokens() * head_dim_;
    const int64_t segment_kv = static_cast<int64_t>(inputs.k.size());
    BackwardArgs args;
    for (int head : state.segment_heads[local]) {
      args.o.push_back(state.o.data() + head * query_floats);
      args.d_o.push_back(state.d_o.data() + head * query_floats);
      args.lse.push_back(state.lse.data() + head * state.group_rows);
      args.dq.push_back(state.dq.data() + head * query_floats);
    }
    for (int64_t kv = 0; kv < segment_kv; ++kv) {
      args.dk.push_back(dkv_block + kv * block_floats);
      args.dv.push_back(dkv_block + (segment_kv + kv) * block_floats);
    }
    AttentionBackward(inputs, args);
  }
  PadCompute(Since(start));  // --slowdown: an emulated slow device
  times.compute += Since(start);
}

void DistributedAttention::RunPass(Direction direction, const std::vector<TokenTensor>& inbound,
                                   const std::vector<TokenTensor>& outbound, PhaseTimes& times) {
  const RankRole& role = layout_.roles[rank_];
  const LayoutGroup& group = layout_.groups[role.group];
  const GroupSchedule& group_schedule = layout_.schedule.groups[role.group];
  AllocateHeadLayout(direction);
  auto exchange_of = [&](bool is_inbound, const std::vector<TokenTensor>& tensors) {
    Exchange exchange;
    exchange.inbound = is_inbound;
    exchange.tokens = tensors;
    exchange.my_slots = SlotsOf(layout_, role, direction, is_inbound, state_.get(), head_dim_);
    for (int member_rank : group.ranks) {
      exchange.member_slots.push_back(
          SlotsOf(layout_, layout_.roles[member_rank], direction, is_inbound, nullptr, head_dim_));
    }
    return exchange;
  };
  Clock::time_point start = Clock::now();
  RunAllToAll(*group_comm_, group_schedule.Inbound(direction), group, role.member,
              exchange_of(true, inbound));
  times.alltoall += Since(start);
  if (role.ring_pos >= 0) {
    SubRingRunner(layout_, rank_, direction, *ring_comm_, times, *state_,
                  [&](int local, int origin, const float* kv_block, float* dkv_block) {
                    ComputeBlock(direction, local, origin, kv_block, dkv_block, times);
                  })
        .Run();
  }
  start = Clock::now();
  RunAllToAll(*group_comm_, group_schedule.Outbound(direction), group, role.member,
              exchange_of(false, outbound));
  times.alltoall += Since(start);
}

Result<AttentionOutputs> DistributedAttention::Forward(std::span<const float> q,
                                                       std::span<const float> k,
                                                       std::span<const float> v) {
  const Clock::time_point call_start = Clock::now();
  forward_times_ = PhaseTimes{};
  const int64_t heads = layout_.num_heads;
  const int64_t kv_heads = layout_.num_kv_heads;
  const int64_t rows = num_tokens();
  HEXISEQ_CHECK(static_cast<int64_t>(q.size()) == rows * heads * head_dim_,
                "q must be [s_r][H][head_dim]");
  HEXISEQ_CHECK(static_cast<int64_t>(k.size()) == rows * kv_heads * head_dim_,
                "k must be [s_r][G][head_dim]");
  HEXISEQ_CHECK(static_cast<int64_t>(v.size()) == rows * kv_heads * head_dim_,
                "v must be [s_r][G][head_dim]");
  AttentionOutputs result;
  result.o.assign(rows * heads * head_dim_, 0.0f);
  result.lse.assign(rows * heads, kNegInf);
  RunPass(Direction::kForward,
          {{q.data(), nullptr, heads, head_dim_, false},
           {k.data(), nullptr, kv_heads, head_dim_, false},
           {v.data(), nullptr, kv_heads, head_dim_, false}},
          {{nullptr, result.o.data(), heads, head_dim_, false},
           {nullptr, result.lse.data(), heads, 1, false}},
          forward_times_);
  state_->has_forward = true;
  forward_times_.total = Since(call_start);
  return result;
}

Result<AttentionGradients> DistributedAttention::Backward(std::span<const float> d_o) {
  if (!state_->has_forward) {
    return InvalidArgument("DistributedAttention::Backward called before Forward");
  }
  const Clock::time_point call_start = Clock::now();
  backward_times_ = PhaseTimes{};
  const int64_t heads = layout_.num_heads;
  const int64_t kv_heads = layout_.num_kv_heads;
  const int64_t rows = num_tokens();
  HEXISEQ_CHECK(static_cast<int64_t>(d_o.size()) == rows * heads * head_dim_,
                "d_o must be [s_r][H][head_dim]");
  AttentionGradients grads;
  grads.dq.assign(rows * heads * head_dim_, 0.0f);
  grads.dk.assign(rows * kv_heads * head_dim_, 0.0f);
  grads.dv.assign(rows * kv_heads * head_dim_, 0.0f);
  // dK, dV of a KV head held by several members of a group are summed at the token owner.
  RunPass(Direction::kBackward, {{d_o.data(), nullptr, heads, head_dim_, false}},
          {{nullptr, grads.dq.data(), heads, head_dim_, false},
           {nullptr, grads.dk.data(), kv_heads, head_dim_, true},
           {nullptr, grads.dv.data(), kv_heads, head_dim_, true}},
          backward_times_);
  // Free what only backward needed; q, o, lse and K/V stay for a repeated backward.
  State& state = *state_;
  state.d_o = {};
  state.dq = {};
  state.dkv.clear();
  backward_times_.total = Since(call_start);
  return grads;
}

}  // namespace hexiseq::runtime
