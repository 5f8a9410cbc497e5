// LayerSchedule: one transformer layer's attention communication as data, a pure function of the
// Plan and the tensor sizes (head dim, bytes per value). Per group the all-to-all split tables
// (forward Q/K/V in and O/LSE out, backward dO in and dQ/dK/dV out); the KV segments of the
// sub-rings with their primary and replica holders; every KV block's chain of groups (groups that
// do not need it causally are skipped) with exact causal pair counts; and the dK/dV return route.
// The runtime executes it, the simulator simulates it, the cost model is tested against its byte
// totals. It ignores devices, links and time: only groups, tokens and heads matter here.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "plan/plan.h"
#include "plan/ranges.h"
#include "spec/error.h"

namespace hexiseq {

inline constexpr int64_t kFp32Bytes = 4;
inline constexpr int64_t kBf16Bytes = 2;

// Sizes of the tensors the schedule moves.
struct ScheduleSizes {
  int head_dim = 0;                    // d_h; REQUIRES: >= 1
  int64_t element_bytes = kFp32Bytes;  // one value of Q, K, V, O, dO, dQ, dK, dV
  int64_t lse_bytes = kFp32Bytes;      // one log-sum-exp value (kept in fp32 in every precision)
  bool operator==(const ScheduleSizes&) const = default;
};

// Forward (Q/K/V in, K/V blocks round the sub-rings, O and LSE out) or backward (dO in, K/V blocks
// again, dK/dV partials and returns, dQ/dK/dV out). One pass driver serves both.
enum class Direction { kForward, kBackward };

// One all-to-all inside one group. Members are indexed in group (plan) order.
// bytes[sender * members + receiver] is what `sender` sends `receiver`; the diagonal is the part a
// member keeps (a local copy, never counted as traffic).
// - Inbound (token -> head layout): rows tau_sender, for the receiver's heads.
//   forward: Q of the receiver's query heads + K and V of its KV heads; backward: dO of its query
//   heads.
// - Outbound (head -> token layout): rows tau_receiver, for the sender's heads.
//   forward: O of the sender's query heads + their LSE; backward: dQ of its query heads + dK and
//   dV of its KV heads (summed at the receiver over members that share a KV head).
struct SplitTable {
  int members = 0;
  std::vector<int64_t> bytes;  // members x members, row-major by sender

  int64_t Bytes(int sender, int receiver) const {
    return bytes[static_cast<size_t>(sender) * members + receiver];
  }
  // Bytes a member sends to / receives from the other members (diagonal excluded).
  int64_t SentBy(int sender) const;
  int64_t ReceivedBy(int receiver) const;
  bool operator==(const SplitTable&) const = default;
};

struct GroupSchedule {
  int plan_index = 0;                   // index in plan.groups
  int ring_pos = -1;                    // position in the ring; -1 for a group without tokens
  std::vector<int> ranks;               // world ranks, in member order
  Ranges tokens;                        // Sigma_k, normalized
  int64_t num_tokens = 0;               // |Sigma_k|
  std::vector<int64_t> member_tokens;   // s_r per member
  std::vector<int> member_query_heads;  // |eta_r| per member
  std::vector<int> member_kv_heads;     // distinct KV heads of eta_r, per member
  SplitTable qkv_in;                    // forward inbound
  SplitTable output_out;                // forward outbound (O + LSE)
  SplitTable grad_output_in;            // backward inbound (dO)
  SplitTable grads_out;                 // backward outbound (dQ + dK + dV)

  const SplitTable& Inbound(Direction direction) const {
    return direction == Direction::kForward ? qkv_in : grad_output_in;
  }
  const SplitTable& Outbound(Direction direction) const {
    return direction == Direction::kForward ? output_out : grads_out;
  }
  bool operator==(const GroupSchedule&) const = default;
};

// A set of KV heads on which every ring group's ownership is constant (the common refinement of
// the groups' head partitions): in each ring group the same members need all of them.
struct KvSegment {
  std::vector<int> kv_heads;  // sorted
  // holders[ring_pos]: world ranks of the members holding the segment in that ring group, in
  // member order; front() is the primary (receives, forwards, returns), the rest are replicas.
  // Empty only when that group needs none of these KV heads (never in a valid plan).
  std::vector<std::vector<int>> holders;
  // holder_query_heads[ring_pos][i]: how many query heads of holders[ring_pos][i] use a KV head
  // of the segment (the heads it computes on each block of this segment).
  std::vector<std::vector<int>> holder_query_heads;

  int Primary(int ring_pos) const { return holders[ring_pos].front(); }
  bool operator==(const KvSegment&) const = default;
};

// One stop of a KV block: a ring group that needs the block, with the exact number of causal
// (query, key) token pairs (key <= query) of its queries Sigma_k against the block's keys.
// Multiply by the query heads of a holder to get its work on the block.
struct ChainHop {
  int ring_pos = 0;
  int64_t causal_pairs = 0;  // > 0
  bool operator==(const ChainHop&) const = default;
};

// The route of the K/V block of ring group `origin` (the same for every segment): the groups after
// it in ring order that need it, in that order. Groups with no causal pair are skipped; a block
// nobody needs is never sent.
struct BlockChain {
  int origin = 0;
  int64_t own_pairs = 0;       // causal pairs of the owner's queries against its own keys
  std::vector<ChainHop> hops;  // in visiting order (increasing ring distance from origin)
  bool operator==(const BlockChain&) const = default;
};

struct RankPlace {
  int group = 0;   // index into LayerSchedule::groups
  int member = 0;  // index inside the group
  bool operator==(const RankPlace&) const = default;
};

// How a group's summed dK/dV of a visiting block leaves the group (backward).
enum class DkvRoute {
  // To the next group on the block's chain, which adds its own sum and passes it on; the last
  // group of the chain returns the total to the owner. Every message but the last crosses the
  // same link as the K/V block.
  kAlongChain,
  // Every group returns its own sum straight to the owner.
  kDirectToOwner,
};
// The one policy (docs/runtime.md says why it is the cheaper). The other route stays selectable
// in the schedule and the simulator so that the choice can be measured (`fidelity_bench N seed
// routes`); the runtime and the cost model follow the policy.
inline constexpr DkvRoute kDkvRoute = DkvRoute::kAlongChain;

// Forwarding and dK/dV return:
// - forward and backward: a block goes primary to primary along its chain, skipping groups that do
//   not need it; each primary that receives it passes it on to its group's replicas;
// - backward: each replica sends its dK/dV partial of the block to its group's primary, which sums
//   them with its own (and, along the chain, with the previous group's sum) and sends one message
//   as the route says.
enum class RingMessageKind {
  kKvBlock,     // K/V block, primary -> next primary on the chain (forward and backward)
  kKvReplica,   // K/V block, primary -> a replica of its group (forward and backward)
  kDkvPartial,  // dK/dV partial, replica -> its primary (backward)
  kDkvReturn,   // summed dK/dV, a primary -> LayerSchedule::DkvTarget (backward)
};

struct RingMessage {
  RingMessageKind kind = RingMessageKind::kKvBlock;
  int segment = 0;
  int origin = 0;  // ring position of the block's owner
  int hop = 0;     // index into chains[origin].hops of the group that sends or receives it
  int source_rank = 0;
  int dest_rank = 0;
  int64_t bytes = 0;
};

struct LayerSchedule {
  ScheduleSizes sizes;
  DkvRoute dkv_route = kDkvRoute;
  int num_heads = 0;
  int num_kv_heads = 0;
  int num_ranks = 0;
  int64_t seq_len = 0;
  std::vector<GroupSchedule> groups;  // in plan order
  std::vector<RankPlace> places;      // by world rank
  std::vector<int> ring;              // group index of each ring position (groups with tokens)
  std::vector<KvSegment> segments;    // ordered by first KV head
  std::vector<BlockChain> chains;     // by origin ring position

  int num_ring_groups() const { return static_cast<int>(ring.size()); }
  const GroupSchedule& RingGroup(int ring_pos) const { return groups[ring[ring_pos]]; }
  // Bytes of the K/V (or dK/dV) block of `segment` owned by ring group `origin`:
  // 2 x |segment KV heads| x |Sigma_origin| x head_dim x element_bytes.
  int64_t BlockBytes(int segment, int origin) const;
  // Index of `ring_pos` in chains[origin].hops, or -1 when the block does not visit it.
  // O(log chain length).
  int HopIndex(int origin, int ring_pos) const;
  // The origins whose blocks visit `ring_pos`, by increasing ring distance (the order in which
  // the blocks arrive and in which receives are posted).
  std::vector<int> VisitingOrigins(int ring_pos) const;
  // Backward: the hop of a chain whose summed dK/dV the group at `hop` adds to its own
  // before sending it on, or -1 (the first hop, or the direct route).
  int DkvFeeder(int hop) const {
    return dkv_route == DkvRoute::kAlongChain && hop > 0 ? hop - 1 : -1;
  }
  // Backward: whether the owner of chains[origin] receives the sum sent by the group at `hop`.
  bool ReturnsToOwner(int origin, int hop) const {
    return dkv_route == DkvRoute::kDirectToOwner ||
           hop + 1 == static_cast<int>(chains[origin].hops.size());
  }
  // Backward: the world rank the group at `hop` of chains[origin] sends its summed dK/dV of
  // `segment` to: the owner's primary, or the next hop's primary along the chain.
  int DkvTarget(int segment, int origin, int hop) const {
    const KvSegment& kv_segment = segments[segment];
    return ReturnsToOwner(origin, hop) ? kv_segment.Primary(origin)
                                       : kv_segment.Primary(chains[origin].hops[hop + 1].ring_pos);
  }
  bool operator==(const LayerSchedule&) const = default;
};

// Checks the invariants the schedule relies on (a precise message for each violation: ranks, each
// in exactly one group or in left_out (a left-out rank sends and receives nothing),
// tokens partitioning [0, S) and each group's tokens, heads partitioning {0..H-1} in each group
// with tokens, idle groups holding no heads) and derives the schedule. Cost: O(ranks + heads x
// ranks + ring groups^2) time; memory linear in the chains' total length plus members^2 per group.
Result<LayerSchedule> BuildLayerSchedule(const Plan& plan, const ScheduleSizes& sizes,
                                         DkvRoute dkv_route = kDkvRoute);

// Every point-to-point message of one direction's sub-ring phase, in a deterministic order
// (segment, origin, hop). Calls `visit` once per message.
void ForEachRingMessage(const LayerSchedule& schedule, Direction direction,
                        const std::function<void(const RingMessage&)>& visit);

// Every off-diagonal piece of one all-to-all phase of every group: `inbound` selects the
// token -> head exchange, else head -> token. Calls visit(source_rank, dest_rank, bytes) for each
// piece with bytes > 0.
void ForEachAllToAllPiece(const LayerSchedule& schedule, Direction direction, bool inbound,
                          const std::function<void(int, int, int64_t)>& visit);

// Per-rank byte totals of one direction, by phase (what the cost model's closed form must match).
struct RankBytes {
  int64_t sent = 0;
  int64_t received = 0;
  bool operator==(const RankBytes&) const = default;
};
struct PhaseBytes {
  std::vector<RankBytes> inbound_alltoall;   // by world rank
  std::vector<RankBytes> kv_ring;            // K/V blocks and their copies to replicas
  std::vector<RankBytes> dkv_return;         // dK/dV partials and returns (backward only)
  std::vector<RankBytes> outbound_alltoall;  // by world rank
};
PhaseBytes BytesPerRank(const LayerSchedule& schedule, Direction direction);

}  // namespace hexiseq
