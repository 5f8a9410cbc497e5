// calibrate's driver (calibrate.h): option checks, the compute probes on every rank at once, the
// link probes, and the gathering and checking of every rank's figures.
#include "calibrate/calibrate.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "calibrate/calibrate_internal.h"
#include "runtime/mpi_comm.h"
#include "runtime/slowdown.h"
#include "runtime/str_cat.h"
#include "spec/limits.h"

namespace hexiseq::calibrate {
namespace {

using runtime::StrCat;
constexpr size_t kHostNameBytes = 256;

std::string MyHost(const CalibrateOptions& options, int rank) {
  if (!options.hosts.empty()) return options.hosts[rank];
  char name[kHostNameBytes] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// One rank's figures as doubles, so that every rank can all-gather every rank's figures.
std::vector<double> Pack(const RankMeasurement& mine) {
  std::vector<double> packed = {mine.slowdown, mine.optimizer.params, mine.optimizer.seconds};
  for (const auto* curve : {&mine.gemm, &mine.attention}) {
    for (const RatePoint& point : *curve) {
      packed.insert(packed.end(), {static_cast<double>(point.tokens), point.flops, point.seconds});
    }
  }
  return packed;
}

RankMeasurement Unpack(const double* packed, size_t points, int rank, std::string host) {
  RankMeasurement out;
  out.rank = rank;
  out.host = std::move(host);
  out.slowdown = packed[0];
  out.optimizer = {packed[1], packed[2]};
  const double* cursor = packed + 3;
  for (auto* curve : {&out.gemm, &out.attention}) {
    for (size_t point = 0; point < points; ++point, cursor += 3) {
      curve->push_back(RatePoint{static_cast<int64_t>(cursor[0]), cursor[1], cursor[2]});
    }
  }
  return out;
}

// Every rank's compute figures and host name, on every rank.
std::vector<RankMeasurement> GatherRanks(runtime::Comm& world, const RankMeasurement& mine) {
  const std::vector<double> packed = Pack(mine);
  std::vector<double> all(packed.size() * world.size());
  world.Allgather(packed.data(), packed.size() * sizeof(double), all.data());
  char host[kHostNameBytes] = {};
  std::strncpy(host, mine.host.c_str(), kHostNameBytes - 1);
  std::vector<char> hosts(kHostNameBytes * world.size());
  world.Allgather(host, kHostNameBytes, hosts.data());
  std::vector<RankMeasurement> ranks;
  for (int rank = 0; rank < world.size(); ++rank) {
    ranks.push_back(Unpack(all.data() + rank * packed.size(), mine.gemm.size(), rank,
                           std::string(hosts.data() + rank * kHostNameBytes)));
  }
  return ranks;
}

double PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_bytes > 0 ? static_cast<double>(pages) * page_bytes : 0;
}

}  // namespace

namespace internal {

int PointAt(const std::vector<RatePoint>& curve, int64_t tokens) {
  for (size_t point = 0; point < curve.size(); ++point) {
    if (curve[point].tokens == tokens) return static_cast<int>(point);
  }
  return -1;
}

void ReadEvenSplitRates(RankMeasurement& rank, int64_t even_shard) {
  const int gemm = PointAt(rank.gemm, even_shard), attention = PointAt(rank.attention, even_shard);
  HEXISEQ_CHECK(gemm >= 0 && attention >= 0, "both curves hold a point at the even split");
  rank.gemm_rate = rank.gemm[gemm].flops_per_second();
  rank.attention_rate = rank.attention[attention].flops_per_second();
}

namespace {

bool Positive(double value) { return std::isfinite(value) && value > 0; }

}  // namespace

Result<void> CheckMeasured(const std::vector<RankMeasurement>& ranks,
                           const std::vector<PairMeasurement>& pairs) {
  const std::string rule =
      "rule: every rank must measure a finite, positive rate; a zero would make the planner "
      "give that rank nothing";
  for (const RankMeasurement& rank : ranks) {
    if (rank.host.empty()) {
      return Internal(StrCat("calibrate: rank ", rank.rank, " has no host name (", rule,
                             "; hint: pass --hosts)"));
    }
    for (const auto& [kind, curve] :
         {std::pair{"GEMM", &rank.gemm}, std::pair{"attention", &rank.attention}}) {
      for (const RatePoint& point : *curve) {
        if (!Positive(point.seconds) || !Positive(point.flops_per_second())) {
          return Internal(StrCat("calibrate: rank ", rank.rank, " (", rank.host, "): the ", kind,
                                 " probe at ", point.tokens, " tokens measured ", point.seconds,
                                 " s for ", point.flops, " FLOPs (", rule,
                                 "; hint: rerun; check that the rank's process was not stopped)"));
        }
      }
    }
    for (const auto& [kind, curve, rate] :
         {std::tuple{"GEMM", &rank.gemm, rank.gemm_rate},
          std::tuple{"attention", &rank.attention, rank.attention_rate}}) {
      for (const RatePoint& point : *curve) {
        const double multiple = point.flops_per_second() / rate;
        if (multiple > kMaxRateCurveFactor) {
          return Internal(StrCat(
              "calibrate: rank ", rank.rank, " (", rank.host, "): the ", kind, " probe at ",
              point.tokens, " tokens measured ", multiple,
              " times the rate at the even split (rule: a rank's rates at other sizes are at most ",
              kMaxRateCurveFactor,
              "x that one, as a cluster file's rate_curve must be; so wide "
              "a spread means the rank lost its core while the even split was timed; hint: rerun "
              "on a quieter machine)"));
        }
      }
    }
    if (!Positive(rank.optimizer.seconds) || !Positive(rank.optimizer.params)) {
      return Internal(StrCat("calibrate: rank ", rank.rank, " (", rank.host,
                             "): the optimizer probe measured ", rank.optimizer.seconds, " s for ",
                             rank.optimizer.params, " parameters (", rule,
                             "; hint: rerun; check that the rank's process was not stopped)"));
    }
  }
  for (const PairMeasurement& pair : pairs) {
    if (!Positive(pair.latency_seconds) || !Positive(pair.bytes_per_second)) {
      return Internal(StrCat("calibrate: ranks ", pair.a, " and ", pair.b, ": ping-pong measured ",
                             "latency ", pair.latency_seconds, " s, bandwidth ",
                             pair.bytes_per_second,
                             " B/s (rule: every pair must measure a positive latency and "
                             "bandwidth; hint: rerun on a quieter machine)"));
    }
  }
  return {};
}

}  // namespace internal

Result<void> CheckOptions(const CalibrateOptions& options, int num_ranks) {
  if (options.repeats < 1) {
    return InvalidArgument(StrCat("--repeats = ", options.repeats,
                                  ": must be >= 1 (rule: each point is the median of its "
                                  "repeats; hint: 3)"));
  }
  const int64_t shard = options.seq_len / std::max(num_ranks, 1);
  if (shard < kMinShardTokens) {
    return InvalidArgument(StrCat(
        "--seq = ", options.seq_len, ": the even split over ", num_ranks, " ranks is ", shard,
        " tokens per rank, must be >= ", kMinShardTokens,
        " (rule: calibrate times the attention kernels at the shard a plan would give; one key "
        "tile of the kernels is ",
        kMinShardTokens, " rows; hint: --seq ", kMinShardTokens * num_ranks, " or more)"));
  }
  if (!options.hosts.empty() && static_cast<int>(options.hosts.size()) != num_ranks) {
    const int given = static_cast<int>(options.hosts.size());
    const std::string which = given < num_ranks
                                  ? StrCat("rank ", given, " is missing from the list")
                                  : StrCat("name ", num_ranks, " has no rank");
    return InvalidArgument(StrCat("--hosts names ", given, " host(s) but ", num_ranks,
                                  " ranks are running: ", which,
                                  " (rule: one host name per rank, in rank order; hint: "
                                  "--hosts a,a,b,b for 4 ranks on 2 nodes, or leave it out to "
                                  "use each rank's host name)"));
  }
  for (size_t rank = 0; rank < options.hosts.size(); ++rank) {
    if (options.hosts[rank].empty() || options.hosts[rank].size() >= kHostNameBytes) {
      return InvalidArgument(StrCat("--hosts: the name of rank ", rank, " is '",
                                    options.hosts[rank], "' (rule: 1..", kHostNameBytes - 1,
                                    " characters; hint: --hosts a,a,b,b)"));
    }
  }
  return {};
}

Result<Calibration> RunCalibration(runtime::Comm& world, const CalibrateOptions& options) {
  if (auto checked = CheckOptions(options, world.size()); !checked) {
    return std::unexpected(checked.error());
  }
  Calibration calibration;
  calibration.model_name = options.model.name;
  calibration.seq_len = options.seq_len;
  calibration.num_ranks = world.size();
  calibration.even_shard_tokens = options.seq_len / world.size();
  calibration.host_memory_bytes = PhysicalMemoryBytes();

  RankMeasurement mine;
  mine.rank = world.rank();
  mine.host = MyHost(options, world.rank());
  mine.slowdown = runtime::ComputeSlowdown();
  const LinearProbe linear_probe =
      options.linear_probe ? options.linear_probe : &internal::TimeLayerGemms;
  calibration.linear_probe = options.linear_probe ? options.linear_probe_name : kGemmProbeName;
  const int64_t even = calibration.even_shard_tokens;
  for (int64_t tokens : internal::ProbeSizes(even, options.seq_len)) {
    world.Barrier();  // every rank computes at the same time, as in training
    mine.gemm.push_back(linear_probe(options.model, options.recompute, tokens, options.repeats));
    world.Barrier();
    mine.attention.push_back(internal::TimeAttentionBlocks(
        options.model, options.recompute, tokens,
        internal::ProbeQueryHeads(options.model, even, tokens), options.repeats));
  }
  world.Barrier();
  mine.optimizer = options.optimizer_probe
                       ? options.optimizer_probe(options.model, options.repeats)
                       : internal::TimeAdamWLoop(options.model, options.repeats);
  calibration.optimizer_probe =
      options.optimizer_probe ? options.optimizer_probe_name : kAdamWLoopProbeName;
  calibration.ranks = GatherRanks(world, mine);
  for (RankMeasurement& rank : calibration.ranks) {
    internal::ReadEvenSplitRates(rank, even);
  }
  for (const RankMeasurement& rank : calibration.ranks) {
    if (rank.slowdown > 1)
      calibration.slowdown_padding = runtime::PadModeName(runtime::CurrentPadMode());
  }
  const int64_t block_bytes = internal::KvBlockBytes(options.model, calibration.even_shard_tokens);
  // The links are timed with spinning waits whatever --comm-wait says: a sleeping wait adds its
  // wake-up to a message's time, which is the waiting rank's, not the link's.
  const runtime::WaitMode wait_mode = runtime::CurrentWaitMode();
  runtime::SetWaitMode(runtime::WaitMode::kSpin);
  calibration.pairs = internal::MeasurePairs(world, block_bytes);
  calibration.all_to_all = internal::MeasureAllToAll(world, calibration.pairs, block_bytes);
  runtime::SetWaitMode(wait_mode);
  if (auto checked = internal::CheckMeasured(calibration.ranks, calibration.pairs); !checked) {
    return std::unexpected(checked.error());
  }
  return calibration;
}

}  // namespace hexiseq::calibrate
