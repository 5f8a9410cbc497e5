#include "sim/trace.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

namespace hexiseq::sim {
namespace {

// Microseconds with nanosecond precision, exact from integer ns.
std::string Micros(int64_t ns) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
  return buf;
}

std::string OpName(const Op& op) {
  std::string name = std::string(PassName(op.pass)) + " " + OpLabelName(op.label);
  if (op.label == OpLabel::kAttention || op.label == OpLabel::kRingKv ||
      op.label == OpLabel::kReplicaKv || op.label == OpLabel::kRingDkv ||
      op.label == OpLabel::kReplicaDkv)
    name += " blk" + std::to_string(op.arg);
  if (op.label == OpLabel::kGradSync) name += " step" + std::to_string(op.arg);
  return name;
}

std::string ReplicaName(const std::vector<SimRank>& ranks, int rank) {
  if (rank >= static_cast<int>(ranks.size())) return "";
  const int replica = ranks[rank].replica;
  return replica >= 0 ? ", replica " + std::to_string(replica) : ", left out";
}

class Writer {
 public:
  explicit Writer(const Cluster& cluster) : cluster_(cluster) {}

  // `ranks` names each rank's data-parallel replica (or "left out").
  void Metadata(const std::vector<SimRank>& ranks) {
    for (const NodeInfo& node : cluster_.nodes) {
      Meta(
          "process_name", node.node, 0,
          "node " + std::to_string(node.node) + " (" + cluster_.kinds[node.kind].device.name + ")");
      Meta("process_sort_index", node.node, 0, "", node.node);
      for (int rank = node.first_rank; rank < node.first_rank + node.num_ranks; ++rank)
        Meta("thread_name", node.node, rank,
             "rank " + std::to_string(rank) + " compute (" + cluster_.device(rank).name + ")" +
                 ReplicaName(ranks, rank));
    }
  }

  void Compute(int rank, int64_t start, int64_t dur, const std::string& name,
               const std::string& args) {
    Event(cluster_.ranks[rank].node, rank, start, dur, name, "compute", args);
  }

  void Message(const Op& op, int64_t start, int64_t end, int64_t offset) {
    const std::pair<int, int> link{op.rank, op.peer};
    std::vector<int64_t>& lanes = lanes_[link];
    size_t lane = 0;
    while (lane < lanes.size() && lanes[lane] > start) ++lane;
    if (lane == lanes.size()) {
      lanes.push_back(0);
      const int tid = next_tid_++;
      tids_[{link, lane}] = tid;
      Meta("thread_name", cluster_.ranks[op.rank].node, tid,
           "link " + std::to_string(op.rank) + "->" + std::to_string(op.peer) +
               (lane > 0 ? " #" + std::to_string(lane) : ""));
    }
    lanes[lane] = end;
    char args[96];
    std::snprintf(args, sizeof args, "{\"bytes\":%.0f,\"from\":%d,\"to\":%d}", op.bytes, op.rank,
                  op.peer);
    Event(cluster_.ranks[op.rank].node, tids_[{link, lane}], start + offset, end - start,
          OpName(op), "comm", args);
  }

  std::string Finish() {
    return "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n" + out_ + "\n]}\n";
  }

 private:
  void Separator() {
    if (!out_.empty()) out_ += ",\n";
  }
  void Meta(const char* what, int pid, int tid, const std::string& name, int sort = -1) {
    Separator();
    out_ += "{\"ph\":\"M\",\"name\":\"" + std::string(what) + "\",\"pid\":" + std::to_string(pid) +
            ",\"tid\":" + std::to_string(tid) + ",\"args\":{";
    if (sort >= 0)
      out_ += "\"sort_index\":" + std::to_string(sort);
    else
      out_ += "\"name\":\"" + name + "\"";
    out_ += "}}";
  }
  void Event(int pid, int tid, int64_t start, int64_t dur, const std::string& name, const char* cat,
             const std::string& args) {
    Separator();
    out_ += "{\"ph\":\"X\",\"name\":\"" + name + "\",\"cat\":\"" + cat +
            "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
            ",\"ts\":" + Micros(start) + ",\"dur\":" + Micros(dur) + ",\"args\":" + args + "}";
  }

  const Cluster& cluster_;
  std::string out_;
  std::map<std::pair<int, int>, std::vector<int64_t>> lanes_;
  std::map<std::pair<std::pair<int, int>, size_t>, int> tids_;
  int next_tid_ = 1000000;
};

}  // namespace

std::string ChromeTraceJson(const SimResult& result, const Cluster& cluster) {
  const Timeline& tl = result.timeline;
  Writer writer(cluster);
  writer.Metadata(result.ranks);
  for (size_t id = 0; id < tl.layer_ops.size(); ++id) {
    const Op& op = tl.layer_ops[id];
    const OpTiming& t = tl.layer_timings[id];
    if (op.kind == OpKind::kCompute) {
      writer.Compute(op.rank, t.start_ns, t.end_ns - t.start_ns, OpName(op),
                     "{\"layer\":" + std::to_string(op.layer) + "}");
    } else if (op.kind == OpKind::kMessage && op.bytes > 0 && op.rank != op.peer) {
      writer.Message(op, t.start_ns, t.end_ns, 0);
    }
  }
  const int64_t head_start = tl.layer_makespan_ns;
  int64_t head_end = head_start;
  for (size_t rank = 0; rank < tl.head_seconds.size(); ++rank) {
    const int64_t dur = std::llround(tl.head_seconds[rank] * 1e9);
    if (dur <= 0) continue;
    writer.Compute(static_cast<int>(rank), head_start, dur, "lm head fwd+bwd", "{}");
    head_end = std::max(head_end, head_start + dur);
  }
  for (size_t id = 0; id < tl.sync_ops.size(); ++id) {
    const Op& op = tl.sync_ops[id];
    const OpTiming& t = tl.sync_timings[id];
    writer.Message(op, t.start_ns + head_end, t.end_ns + head_end, 0);
  }
  return writer.Finish();
}

Result<void> WriteChromeTrace(const SimResult& result, const Cluster& cluster,
                              const std::string& path) {
  std::ofstream file(path, std::ios::binary);
  if (!file) return IoError(path + ": cannot open for writing (hint: check the directory)");
  file << ChromeTraceJson(result, cluster);
  if (!file) return IoError(path + ": write failed");
  return {};
}

}  // namespace hexiseq::sim
