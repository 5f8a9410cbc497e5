// The discrete-event engine: a dependency graph of operations (compute on a rank's single compute
// stream, messages between ranks, zero-time join markers) executed on a network model. Time is
// integer nanoseconds; events are ordered by (time, class, sequence number), so the same graph
// gives the same result, and a compute stream picks among ready operations by their priority key,
// so the result does not depend on the order in which operations were added.
//
// Network: every message is a flow. A flow inside a node crosses the sender's NVLink egress port
// and the receiver's NVLink ingress port (capacity: the node's intra-node bandwidth). A flow
// between nodes crosses the sender's NIC egress port and the receiver's NIC ingress port (one NIC
// per GPU, the cluster file's per-GPU `nic`), or, with `nics_per_node` = k > 0, the sending
// node's NIC egress pool and the receiving node's ingress pool (k x nic, shared by all the
// node's GPUs). Each resource is shared fairly: a flow runs at the smallest of
// capacity / active flows over its resources, capped by the pair's bandwidth (one pair cannot
// aggregate several NICs). Shares are not redistributed (not max-min): a flow slowed elsewhere
// leaves its share unused. Latency is paid once per message, after its last byte.
// Ignored: switch topology beyond node/NIC, packetisation, compute slowed by communication
// kernels, PCIe contention between NVLink-less GPUs and the NIC.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/cluster.h"

namespace hexiseq::sim {

// What an operation is, for the trace and the per-phase breakdown.
enum class OpLabel : uint8_t {
  kLinearPre,     // QKV projections (forward) or their backward
  kLinearPost,    // output projection + MLP (forward) or their backward
  kRecomputeMlp,  // selective recompute: the MLP forward again
  kAttention,     // one attention block (queries of the group x keys of one origin group)
  kAllToAllQkv,   // token -> head layout (Q, K, V); backward: dQ, dK, dV back
  kAllToAllO,     // head -> token layout (O); backward: dO forward
  kRingKv,        // sub-ring K/V block to the next group's primary
  kReplicaKv,     // K/V block from the primary to another member needing the KV head
  kRingDkv,       // dK/dV accumulator to the next group (or home)
  kReplicaDkv,    // a replica's partial dK/dV back to its primary
  kGradSync,      // one step of the gradient ring (reduce-scatter / all-gather)
  kMarker,        // zero-time join
};
const char* OpLabelName(OpLabel label);

enum class Pass : uint8_t { kForward, kRecompute, kBackward, kGradSync };
const char* PassName(Pass pass);

enum class OpKind : uint8_t { kCompute, kMessage, kMarker };

// A pass at 1024 GPUs holds millions of these, so the record is kept at 32 bytes: a compute op
// or marker has a duration and no size, a message a size and no duration (one union).
struct Op {
  OpKind kind = OpKind::kMarker;
  OpLabel label = OpLabel::kMarker;
  Pass pass = Pass::kForward;
  int32_t rank = 0;       // compute: the rank; message: the sender; marker: the rank it joins for
  int32_t peer = -1;      // message: the receiver
  int32_t arg = -1;       // attention: origin group; ring: origin group; grad sync: step
  int32_t layer = 0;      // explicit layer index
  uint32_t priority = 0;  // compute: smaller runs first among ready ops of the rank
  union {
    int64_t duration_ns = 0;  // compute and marker (read only for compute)
    double bytes;             // message (read only for messages)
  };
};
static_assert(sizeof(Op) == 32, "Op grew: the simulator's memory at scale is per op");

// How long an operation took, once run.
struct OpTiming {
  int64_t start_ns = -1;  // compute: start on the stream; message: first byte; marker: done
  int64_t end_ns = -1;    // compute: end; message: delivered (last byte + latency)
};

struct EngineOptions {
  int nics_per_node = 0;  // 0: one NIC per GPU; k > 0: the node's GPUs share k NICs
};

struct RankStats {
  int64_t busy_ns = 0;          // compute stream busy
  int64_t comm_ns = 0;          // some message of this rank (sent or received) in flight
  int64_t comm_exposed_ns = 0;  // ... while its compute stream is idle
  int64_t last_end_ns = 0;      // last compute finished
};

struct EngineResult {
  int64_t makespan_ns = 0;
  int64_t events = 0;
  std::vector<RankStats> ranks;
  std::vector<OpTiming> timings;  // indexed by op id
};

// A dependency graph and its execution. Not thread-safe; one graph per engine.
class Engine {
 public:
  Engine(const Cluster& cluster, EngineOptions options = {});

  int Add(const Op& op);               // returns the op id
  void Depend(int before, int after);  // `after` starts only when `before` is done
  void ReleaseAt(int op, int64_t ns);  // `op` starts no earlier than `ns`
  // Room for `more_ops` ops and `more_edges` dependencies beyond those added so far.
  void Reserve(int64_t more_ops, int64_t more_edges);
  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<std::pair<int, int>>& edges() const { return edges_; }

  // Runs the graph from time 0. REQUIRES: acyclic (checked: a cycle is a bug in the graph
  // builder and fails an assertion).
  EngineResult Run() const;
  // The same run, for a graph that is not run again: the dependency list is freed once the run
  // has its own successor lists, so the peak memory holds the edges once (edges() is empty
  // afterwards).
  EngineResult RunOnce();

 private:
  Cluster cluster_;
  EngineOptions options_;
  std::vector<Op> ops_;
  std::vector<std::pair<int, int>> edges_;
  std::vector<std::pair<int, int64_t>> releases_;
};

}  // namespace hexiseq::sim
