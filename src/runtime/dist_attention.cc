// Distributed attention: all-to-alls, sub-ring KV exchange and dKV return, driven by an event
// loop over asynchronous point-to-point messages. Receives are posted per stream (one stream per
// role and segment) at most kWindow at a time, in ring-distance order; that order, together with
// sends that never block, makes the exchange deadlock-free for every plan (see docs/runtime.md).
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
#include "runtime/str_cat.h"

namespace hexiseq::runtime {
namespace {

constexpr size_t kWindow = 2;  // receives posted ahead per stream
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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
  int64_t n = 0;                          // rows of the group's head layout
  std::vector<float> q, o, lse, d_o, dq;  // [heads][n][d] ([heads][n] for lse)
  std::vector<Buffer> kv;                 // per held segment: [K | V], each [seg heads][n][d]
  std::vector<Buffer> dkv;                // same shape as kv
  // Per held segment: local query-head indices in it, and each one's KV index in the segment.
  std::vector<std::vector<int>> seg_heads;
  std::vector<int> head_seg;     // local head index -> local segment index
  std::vector<int> head_kv_pos;  // local head index -> KV index inside its segment
  std::vector<int> kv_seg;       // index in role.kv_heads -> local segment index
  std::vector<int> kv_pos;       // index in role.kv_heads -> KV index inside its segment
};

namespace {

// The kernel inputs of one block: the query heads of held segment `li` (with their KV index in the
// segment) against the block of ring position `origin_pos`, laid out [K | V][seg heads][rows][d].
AttentionInputs BlockInputs(const AttentionLayout& lay, const RankRole& role,
                            const DistributedAttention::State& st, const LayoutGroup& group,
                            int li, int origin_pos, const float* kv_block, int head_dim,
                            float scale) {
  const LayoutGroup& origin = lay.RingGroup(origin_pos);
  const int64_t nk = origin.num_tokens(), n = st.n, d = head_dim;
  const int64_t seg_heads = static_cast<int64_t>(lay.segments[role.segments[li]].kv_heads.size());
  AttentionInputs in;
  in.head_dim = head_dim;
  in.scale = scale;
  in.q_positions = group.positions;
  in.k_positions = origin.positions;
  for (int hi : st.seg_heads[li]) {
    in.q.push_back(st.q.data() + hi * n * d);
    in.kv_index.push_back(st.head_kv_pos[hi]);
  }
  for (int64_t index = 0; index < seg_heads; ++index) {
    in.k.push_back(kv_block + index * nk * d);
    in.v.push_back(kv_block + (seg_heads + index) * nk * d);
  }
  return in;
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
  std::map<uint64_t, std::vector<int>> by_hash;
  std::map<int64_t, std::vector<int>> by_dim;
  for (int rank = 0; rank < comm.size(); ++rank) {
    by_hash[all[rank].hash].push_back(rank);
    by_dim[all[rank].head_dim].push_back(rank);
  }
  auto list = [](const std::vector<int>& ranks) {
    std::string text;
    for (int rank : ranks) text += (text.empty() ? "" : ", ") + std::to_string(rank);
    return text;
  };
  if (by_hash.size() > 1) {
    std::string parts;
    for (const auto& [hash, ranks] : by_hash) {
      parts += StrCat(parts.empty() ? "" : "; ", "rank", ranks.size() > 1 ? "s" : "", " ",
                      list(ranks), " loaded plan hash ", Hex(hash));
    }
    return InvalidArgument(StrCat("plan mismatch across ranks: ", parts,
                                  " (hint: give every rank the same plan file)"));
  }
  if (by_dim.size() > 1) {
    std::string parts;
    for (const auto& [dim, ranks] : by_dim) {
      parts += StrCat(parts.empty() ? "" : "; ", "rank", ranks.size() > 1 ? "s" : "", " ",
                      list(ranks), " use head_dim ", dim);
    }
    return InvalidArgument(StrCat("head_dim mismatch across ranks: ", parts));
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
  auto layout = AttentionLayout::Build(plan);
  if (!layout) return std::unexpected(layout.error());
  const int m = static_cast<int>(layout->ring.size());
  const int64_t num_segments = static_cast<int64_t>(layout->segments.size());
  const int64_t max_tag = (kNumKinds * num_segments) * std::max(m, 1);
  if (max_tag > world.max_tag()) {
    return NotSupported(StrCat("plan needs message tags up to ", max_tag, " (", num_segments,
                               " KV segments x ", m, " ring groups) but the transport allows ",
                               world.max_tag()));
  }
  for (const KvSegment& segment : layout->segments) {
    for (int pos = 0; pos < m; ++pos) {
      const double bytes = 2.0 * static_cast<double>(segment.kv_heads.size()) *
                           static_cast<double>(layout->RingGroup(pos).num_tokens()) * head_dim *
                           sizeof(float);
      if (bytes > static_cast<double>(INT_MAX)) {
        return NotSupported(StrCat("a K/V block of ", layout->RingGroup(pos).num_tokens(),
                                   " tokens x ", segment.kv_heads.size(), " KV heads x head_dim ",
                                   head_dim, " is ", static_cast<int64_t>(bytes),
                                   " bytes, over the ", INT_MAX,
                                   "-byte message limit of the transport (hint: use more groups)"));
      }
    }
  }
  std::unique_ptr<DistributedAttention> attention(
      new DistributedAttention(std::move(*layout), world, head_dim));
  const RankRole& role = attention->layout_.roles[attention->rank_];
  attention->group_comm_ = world.Split(role.group, role.member);
  attention->ring_comm_ = world.Dup();

  State& state = *attention->state_;
  const AttentionLayout& lay = attention->layout_;
  state.n = lay.groups[role.group].num_tokens();
  state.seg_heads.resize(role.segments.size());
  for (size_t hi = 0; hi < role.heads.size(); ++hi) {
    const int kv = lay.kv_of(role.heads[hi]);
    for (size_t li = 0; li < role.segments.size(); ++li) {
      const std::vector<int>& kvs = lay.segments[role.segments[li]].kv_heads;
      auto it = std::find(kvs.begin(), kvs.end(), kv);
      if (it == kvs.end()) continue;
      state.head_seg.push_back(static_cast<int>(li));
      state.head_kv_pos.push_back(static_cast<int>(it - kvs.begin()));
      state.seg_heads[li].push_back(static_cast<int>(hi));
    }
  }
  for (int kv : role.kv_heads) {
    for (size_t li = 0; li < role.segments.size(); ++li) {
      const std::vector<int>& kvs = lay.segments[role.segments[li]].kv_heads;
      auto it = std::find(kvs.begin(), kvs.end(), kv);
      if (it == kvs.end()) continue;
      state.kv_seg.push_back(static_cast<int>(li));
      state.kv_pos.push_back(static_cast<int>(it - kvs.begin()));
    }
  }
  HEXISEQ_CHECK(
      state.head_seg.size() == role.heads.size() && state.kv_seg.size() == role.kv_heads.size(),
      "every needed KV head belongs to exactly one held segment");
  return attention;
}

Result<AttentionOutputs> DistributedAttention::Forward(std::span<const float> q,
                                                       std::span<const float> k,
                                                       std::span<const float> v) {
  const Clock::time_point call_start = Clock::now();
  forward_times_ = PhaseTimes{};
  PhaseTimes& times = forward_times_;
  const AttentionLayout& lay = layout_;
  const RankRole& role = lay.roles[rank_];
  const LayoutGroup& group = lay.groups[role.group];
  const int64_t d = head_dim_;
  const int64_t H = lay.num_heads;
  const int64_t G = lay.num_kv_heads;
  const int64_t s_me = role.num_tokens;
  HEXISEQ_CHECK(static_cast<int64_t>(q.size()) == s_me * H * d, "q must be [s_r][H][head_dim]");
  HEXISEQ_CHECK(static_cast<int64_t>(k.size()) == s_me * G * d, "k must be [s_r][G][head_dim]");
  HEXISEQ_CHECK(static_cast<int64_t>(v.size()) == s_me * G * d, "v must be [s_r][G][head_dim]");
  State& st = *state_;
  const int64_t n = st.n;
  const int64_t nh = static_cast<int64_t>(role.heads.size());
  const int members = static_cast<int>(group.ranks.size());

  // ---- 1. all-to-all: token layout -> head layout.
  Clock::time_point start = Clock::now();
  {
    std::vector<int64_t> send_counts(members), send_displs(members), recv_counts(members),
        recv_displs(members);
    int64_t send_total = 0;
    int64_t recv_total = 0;
    for (int member = 0; member < members; ++member) {
      const RankRole& peer = lay.roles[group.ranks[member]];
      const int64_t s_peer = peer.num_tokens;
      send_counts[member] =
          s_me * (static_cast<int64_t>(peer.heads.size()) + 2 * peer.kv_heads.size()) * d;
      recv_counts[member] = s_peer * (nh + 2 * static_cast<int64_t>(role.kv_heads.size())) * d;
      send_displs[member] = send_total;
      recv_displs[member] = recv_total;
      send_total += send_counts[member];
      recv_total += recv_counts[member];
    }
    std::vector<float> send(send_total);
    for (int member = 0; member < members; ++member) {
      const RankRole& peer = lay.roles[group.ranks[member]];
      float* out = send.data() + send_displs[member];
      for (int head : peer.heads) {
        for (int64_t row = 0; row < s_me; ++row, out += d) {
          std::copy_n(q.data() + (row * H + head) * d, d, out);
        }
      }
      for (const std::span<const float>& source : {k, v}) {
        for (int kv : peer.kv_heads) {
          for (int64_t row = 0; row < s_me; ++row, out += d) {
            std::copy_n(source.data() + (row * G + kv) * d, d, out);
          }
        }
      }
    }
    std::vector<float> recv(recv_total);
    group_comm_->Alltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts,
                           recv_displs);
    st.q.assign(nh * n * d, 0.0f);
    st.kv.clear();
    for (int seg : role.segments) {
      st.kv.push_back(
          std::make_shared<std::vector<float>>(2 * lay.segments[seg].kv_heads.size() * n * d));
    }
    for (int member = 0; member < members; ++member) {
      const int64_t offset = group.member_offset[member];
      const int64_t s_peer = group.member_offset[member + 1] - offset;
      const float* in = recv.data() + recv_displs[member];
      for (int64_t hi = 0; hi < nh; ++hi, in += s_peer * d) {
        std::copy_n(in, s_peer * d, st.q.data() + (hi * n + offset) * d);
      }
      for (int part = 0; part < 2; ++part) {
        for (size_t ki = 0; ki < role.kv_heads.size(); ++ki, in += s_peer * d) {
          const int li = st.kv_seg[ki];
          const int64_t seg_heads =
              static_cast<int64_t>(lay.segments[role.segments[li]].kv_heads.size());
          float* target = st.kv[li]->data() + ((part * seg_heads + st.kv_pos[ki]) * n + offset) * d;
          std::copy_n(in, s_peer * d, target);
        }
      }
    }
  }
  times.alltoall += Since(start);

  // ---- 2. attention over the local block, then the sub-rings.
  st.o.assign(nh * n * d, 0.0f);
  st.lse.assign(nh * n, kNegInf);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto compute = [&](int li, int origin_pos, const float* kv_block) {
    const Clock::time_point compute_start = Clock::now();
    const AttentionInputs in =
        BlockInputs(lay, role, st, group, li, origin_pos, kv_block, head_dim_, scale);
    ForwardOutputs out;
    for (int hi : st.seg_heads[li]) {
      out.o.push_back(st.o.data() + hi * n * d);
      out.lse.push_back(st.lse.data() + hi * n);
    }
    AttentionForward(in, out, /*accumulate=*/true);
    times.compute += Since(compute_start);
  };

  MessageLoop loop(*ring_comm_, times);
  const int m = static_cast<int>(lay.ring.size());
  const int pos = role.ring_pos;
  const int num_segments = static_cast<int>(lay.segments.size());
  auto tag = [&](int kind, int seg, int ring_pos) {
    return (kind * num_segments + seg) * m + ring_pos;
  };
  for (size_t li = 0; li < role.segments.size(); ++li) {
    const int seg = role.segments[li];
    const std::vector<int>& holders = lay.segments[seg].holders[pos];
    const bool primary = holders.front() == role.member;
    const int64_t seg_heads = static_cast<int64_t>(lay.segments[seg].kv_heads.size());
    std::vector<MessageLoop::Expected> stream;
    for (int distance = 1; distance < m; ++distance) {
      const int origin = (pos - distance + m) % m;
      if (!lay.needs[pos][origin]) continue;
      MessageLoop::Expected expected;
      expected.tag = tag(kKvForward, seg, origin);
      expected.count = 2 * seg_heads * lay.RingGroup(origin).num_tokens() * d;
      if (primary) {
        const std::vector<int> chain = lay.Chain(origin);
        const size_t at = std::find(chain.begin(), chain.end(), pos) - chain.begin();
        expected.source = lay.PrimaryRank(seg, at == 0 ? origin : chain[at - 1]);
        const int next = at + 1 < chain.size() ? lay.PrimaryRank(seg, chain[at + 1]) : -1;
        expected.on_arrival = [&, li, origin, next, seg, holders](const Buffer& block) {
          if (next >= 0) loop.Send(block, next, tag(kKvForward, seg, origin));
          for (size_t hi = 1; hi < holders.size(); ++hi) {
            loop.Send(block, group.ranks[holders[hi]], tag(kKvForward, seg, origin));
          }
          compute(static_cast<int>(li), origin, block->data());
        };
      } else {
        expected.source = group.ranks[holders.front()];
        expected.on_arrival = [&, li, origin](const Buffer& block) {
          compute(static_cast<int>(li), origin, block->data());
        };
      }
      stream.push_back(std::move(expected));
    }
    loop.AddStream(std::move(stream));
    if (primary) {
      const std::vector<int> chain = lay.Chain(pos);
      if (!chain.empty()) {
        loop.Send(st.kv[li], lay.PrimaryRank(seg, chain.front()), tag(kKvForward, seg, pos));
      }
    }
  }
  for (size_t li = 0; li < role.segments.size(); ++li) {
    compute(static_cast<int>(li), pos, st.kv[li]->data());
  }
  loop.Run();

  // ---- 3. reverse all-to-all: O and LSE back to token layout.
  start = Clock::now();
  AttentionOutputs result;
  result.o.assign(s_me * H * d, 0.0f);
  result.lse.assign(s_me * H, kNegInf);
  {
    std::vector<int64_t> send_counts(members), send_displs(members), recv_counts(members),
        recv_displs(members);
    int64_t send_total = 0;
    int64_t recv_total = 0;
    for (int member = 0; member < members; ++member) {
      const RankRole& peer = lay.roles[group.ranks[member]];
      send_counts[member] = nh * peer.num_tokens * (d + 1);
      recv_counts[member] = static_cast<int64_t>(peer.heads.size()) * s_me * (d + 1);
      send_displs[member] = send_total;
      recv_displs[member] = recv_total;
      send_total += send_counts[member];
      recv_total += recv_counts[member];
    }
    std::vector<float> send(send_total);
    for (int member = 0; member < members; ++member) {
      const int64_t offset = group.member_offset[member];
      const int64_t s_peer = group.member_offset[member + 1] - offset;
      float* out = send.data() + send_displs[member];
      for (int64_t hi = 0; hi < nh; ++hi, out += s_peer * d) {
        std::copy_n(st.o.data() + (hi * n + offset) * d, s_peer * d, out);
      }
      for (int64_t hi = 0; hi < nh; ++hi, out += s_peer) {
        std::copy_n(st.lse.data() + hi * n + offset, s_peer, out);
      }
    }
    std::vector<float> recv(recv_total);
    group_comm_->Alltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts,
                           recv_displs);
    for (int member = 0; member < members; ++member) {
      const RankRole& peer = lay.roles[group.ranks[member]];
      const float* in = recv.data() + recv_displs[member];
      for (int head : peer.heads) {
        for (int64_t row = 0; row < s_me; ++row, in += d) {
          std::copy_n(in, d, result.o.data() + (row * H + head) * d);
        }
      }
      for (int head : peer.heads) {
        for (int64_t row = 0; row < s_me; ++row, ++in) result.lse[row * H + head] = *in;
      }
    }
  }
  times.alltoall += Since(start);
  st.has_forward = true;
  times.total = Since(call_start);
  return result;
}

Result<AttentionGradients> DistributedAttention::Backward(std::span<const float> d_o) {
  State& st = *state_;
  if (!st.has_forward) {
    return InvalidArgument("DistributedAttention::Backward called before Forward");
  }
  const Clock::time_point call_start = Clock::now();
  backward_times_ = PhaseTimes{};
  PhaseTimes& times = backward_times_;
  const AttentionLayout& lay = layout_;
  const RankRole& role = lay.roles[rank_];
  const LayoutGroup& group = lay.groups[role.group];
  const int64_t d = head_dim_;
  const int64_t H = lay.num_heads;
  const int64_t G = lay.num_kv_heads;
  const int64_t s_me = role.num_tokens;
  HEXISEQ_CHECK(static_cast<int64_t>(d_o.size()) == s_me * H * d, "d_o must be [s_r][H][head_dim]");
  const int64_t n = st.n;
  const int64_t nh = static_cast<int64_t>(role.heads.size());
  const int members = static_cast<int>(group.ranks.size());

  // ---- 1. all-to-all: dO to head layout.
  Clock::time_point start = Clock::now();
  {
    std::vector<int64_t> send_counts(members), send_displs(members), recv_counts(members),
        recv_displs(members);
    int64_t send_total = 0;
    int64_t recv_total = 0;
    for (int member = 0; member < members; ++member) {
      const RankRole& peer = lay.roles[group.ranks[member]];
      send_counts[member] = s_me * static_cast<int64_t>(peer.heads.size()) * d;
      recv_counts[member] = peer.num_tokens * nh * d;
      send_displs[member] = send_total;
      recv_displs[member] = recv_total;
      send_total += send_counts[member];
      recv_total += recv_counts[member];
    }
    std::vector<float> send(send_total);
    for (int member = 0; member < members; ++member) {
      const RankRole& peer = lay.roles[group.ranks[member]];
      float* out = send.data() + send_displs[member];
      for (int head : peer.heads) {
        for (int64_t row = 0; row < s_me; ++row, out += d) {
          std::copy_n(d_o.data() + (row * H + head) * d, d, out);
        }
      }
    }
    std::vector<float> recv(recv_total);
    group_comm_->Alltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts,
                           recv_displs);
    st.d_o.assign(nh * n * d, 0.0f);
    for (int member = 0; member < members; ++member) {
      const int64_t offset = group.member_offset[member];
      const int64_t s_peer = group.member_offset[member + 1] - offset;
      const float* in = recv.data() + recv_displs[member];
      for (int64_t hi = 0; hi < nh; ++hi, in += s_peer * d) {
        std::copy_n(in, s_peer * d, st.d_o.data() + (hi * n + offset) * d);
      }
    }
  }
  times.alltoall += Since(start);

  // ---- 2. local block and sub-rings; foreign dK/dV partials return to their owners.
  st.dq.assign(nh * n * d, 0.0f);
  st.dkv.clear();
  for (const Buffer& kv : st.kv) st.dkv.push_back(std::make_shared<std::vector<float>>(kv->size()));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto compute = [&](int li, int origin_pos, const float* kv_block, float* dkv_block) {
    const Clock::time_point compute_start = Clock::now();
    const AttentionInputs in =
        BlockInputs(lay, role, st, group, li, origin_pos, kv_block, head_dim_, scale);
    const int64_t nk = lay.RingGroup(origin_pos).num_tokens();
    const int64_t seg_heads = static_cast<int64_t>(in.k.size());
    BackwardArgs args;
    for (int hi : st.seg_heads[li]) {
      args.o.push_back(st.o.data() + hi * n * d);
      args.d_o.push_back(st.d_o.data() + hi * n * d);
      args.lse.push_back(st.lse.data() + hi * n);
      args.dq.push_back(st.dq.data() + hi * n * d);
    }
    for (int64_t index = 0; index < seg_heads; ++index) {
      args.dk.push_back(dkv_block + index * nk * d);
      args.dv.push_back(dkv_block + (seg_heads + index) * nk * d);
    }
    AttentionBackward(in, args);
    times.compute += Since(compute_start);
  };

  MessageLoop loop(*ring_comm_, times);
  const int m = static_cast<int>(lay.ring.size());
  const int pos = role.ring_pos;
  const int num_segments = static_cast<int>(lay.segments.size());
  auto tag = [&](int kind, int seg, int ring_pos) {
    return (kind * num_segments + seg) * m + ring_pos;
  };
  // Primary bookkeeping: (local segment, origin) -> partial sum and contributions still missing.
  struct PartialSum {
    Buffer sum;
    size_t missing = 0;
  };
  std::map<std::pair<int, int>, PartialSum> partials;
  auto contribute = [&](int li, int origin, const Buffer& partial, size_t expected) {
    PartialSum& entry = partials[{li, origin}];
    if (!entry.sum) {
      entry.sum = partial;
      entry.missing = expected;
    } else {
      AddInto(*entry.sum, *partial);
    }
    if (--entry.missing == 0) {
      const int seg = role.segments[li];
      loop.Send(entry.sum, lay.PrimaryRank(seg, origin), tag(kDkvReturn, seg, pos));
      partials.erase({li, origin});
    }
  };

  for (size_t li = 0; li < role.segments.size(); ++li) {
    const int seg = role.segments[li];
    const std::vector<int>& holders = lay.segments[seg].holders[pos];
    const bool primary = holders.front() == role.member;
    const int64_t seg_heads = static_cast<int64_t>(lay.segments[seg].kv_heads.size());
    std::vector<int> origins;  // foreign groups whose keys this group needs, by ring distance
    for (int distance = 1; distance < m; ++distance) {
      const int origin = (pos - distance + m) % m;
      if (lay.needs[pos][origin]) origins.push_back(origin);
    }
    std::vector<MessageLoop::Expected> kv_stream;
    std::vector<MessageLoop::Expected> partial_stream;
    for (int origin : origins) {
      const int64_t block_floats = 2 * seg_heads * lay.RingGroup(origin).num_tokens() * d;
      MessageLoop::Expected expected;
      expected.tag = tag(kKvBackward, seg, origin);
      expected.count = block_floats;
      if (primary) {
        const std::vector<int> chain = lay.Chain(origin);
        const size_t at = std::find(chain.begin(), chain.end(), pos) - chain.begin();
        expected.source = lay.PrimaryRank(seg, at == 0 ? origin : chain[at - 1]);
        const int next = at + 1 < chain.size() ? lay.PrimaryRank(seg, chain[at + 1]) : -1;
        const size_t contributions = holders.size();
        expected.on_arrival = [&, li, origin, next, seg, holders, block_floats,
                               contributions](const Buffer& block) {
          if (next >= 0) loop.Send(block, next, tag(kKvBackward, seg, origin));
          for (size_t hi = 1; hi < holders.size(); ++hi) {
            loop.Send(block, group.ranks[holders[hi]], tag(kKvBackward, seg, origin));
          }
          auto partial = std::make_shared<std::vector<float>>(block_floats, 0.0f);
          compute(static_cast<int>(li), origin, block->data(), partial->data());
          contribute(static_cast<int>(li), origin, partial, contributions);
        };
        for (size_t hi = 1; hi < holders.size(); ++hi) {
          MessageLoop::Expected part;
          part.source = group.ranks[holders[hi]];
          part.tag = tag(kDkvPartial, seg, origin);
          part.count = block_floats;
          part.on_arrival = [&, li, origin, contributions](const Buffer& partial) {
            contribute(static_cast<int>(li), origin, partial, contributions);
          };
          partial_stream.push_back(std::move(part));
        }
      } else {
        const int primary_rank = group.ranks[holders.front()];
        expected.source = primary_rank;
        expected.on_arrival = [&, li, origin, seg, primary_rank,
                               block_floats](const Buffer& block) {
          auto partial = std::make_shared<std::vector<float>>(block_floats, 0.0f);
          compute(static_cast<int>(li), origin, block->data(), partial->data());
          loop.Send(partial, primary_rank, tag(kDkvPartial, seg, origin));
        };
      }
      kv_stream.push_back(std::move(expected));
    }
    loop.AddStream(std::move(kv_stream));
    loop.AddStream(std::move(partial_stream));
    if (primary) {
      const std::vector<int> chain = lay.Chain(pos);
      if (!chain.empty()) {
        loop.Send(st.kv[li], lay.PrimaryRank(seg, chain.front()), tag(kKvBackward, seg, pos));
      }
      std::vector<MessageLoop::Expected> returns;
      for (int user : chain) {
        MessageLoop::Expected expected;
        expected.source = lay.PrimaryRank(seg, user);
        expected.tag = tag(kDkvReturn, seg, user);
        expected.count = static_cast<int64_t>(st.dkv[li]->size());
        expected.on_arrival = [&, li](const Buffer& partial) { AddInto(*st.dkv[li], *partial); };
        returns.push_back(std::move(expected));
      }
      loop.AddStream(std::move(returns));
    }
  }
  for (size_t li = 0; li < role.segments.size(); ++li) {
    compute(static_cast<int>(li), pos, st.kv[li]->data(), st.dkv[li]->data());
  }
  loop.Run();
  HEXISEQ_CHECK(partials.empty(), "every dK/dV partial sum was completed and returned");

  // ---- 3. reverse all-to-all: dQ, dK, dV to token layout (dK, dV summed over replicas).
  start = Clock::now();
  AttentionGradients grads;
  grads.dq.assign(s_me * H * d, 0.0f);
  grads.dk.assign(s_me * G * d, 0.0f);
  grads.dv.assign(s_me * G * d, 0.0f);
  {
    const int64_t nkv = static_cast<int64_t>(role.kv_heads.size());
    std::vector<int64_t> send_counts(members), send_displs(members), recv_counts(members),
        recv_displs(members);
    int64_t send_total = 0;
    int64_t recv_total = 0;
    for (int member = 0; member < members; ++member) {
      const RankRole& peer = lay.roles[group.ranks[member]];
      send_counts[member] = (nh + 2 * nkv) * peer.num_tokens * d;
      recv_counts[member] = (static_cast<int64_t>(peer.heads.size()) +
                             2 * static_cast<int64_t>(peer.kv_heads.size())) *
                            s_me * d;
      send_displs[member] = send_total;
      recv_displs[member] = recv_total;
      send_total += send_counts[member];
      recv_total += recv_counts[member];
    }
    std::vector<float> send(send_total);
    for (int member = 0; member < members; ++member) {
      const int64_t offset = group.member_offset[member];
      const int64_t s_peer = group.member_offset[member + 1] - offset;
      float* out = send.data() + send_displs[member];
      for (int64_t hi = 0; hi < nh; ++hi, out += s_peer * d) {
        std::copy_n(st.dq.data() + (hi * n + offset) * d, s_peer * d, out);
      }
      for (int part = 0; part < 2; ++part) {
        for (int64_t ki = 0; ki < nkv; ++ki, out += s_peer * d) {
          const int li = st.kv_seg[ki];
          const int64_t seg_heads =
              static_cast<int64_t>(lay.segments[role.segments[li]].kv_heads.size());
          std::copy_n(st.dkv[li]->data() + ((part * seg_heads + st.kv_pos[ki]) * n + offset) * d,
                      s_peer * d, out);
        }
      }
    }
    std::vector<float> recv(recv_total);
    group_comm_->Alltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts,
                           recv_displs);
    for (int member = 0; member < members; ++member) {
      const RankRole& peer = lay.roles[group.ranks[member]];
      const float* in = recv.data() + recv_displs[member];
      for (int head : peer.heads) {
        for (int64_t row = 0; row < s_me; ++row, in += d) {
          std::copy_n(in, d, grads.dq.data() + (row * H + head) * d);
        }
      }
      for (std::vector<float>* target : {&grads.dk, &grads.dv}) {
        for (int kv : peer.kv_heads) {
          for (int64_t row = 0; row < s_me; ++row, in += d) {
            float* out = target->data() + (row * G + kv) * d;
            for (int64_t col = 0; col < d; ++col) out[col] += in[col];
          }
        }
      }
    }
  }
  times.alltoall += Since(start);
  // Free what only backward needed; q, o, lse and K/V stay for a repeated backward.
  st.d_o = {};
  st.dq = {};
  st.dkv.clear();
  times.total = Since(call_start);
  return grads;
}

}  // namespace hexiseq::runtime
