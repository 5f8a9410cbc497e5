// `hexiseq calibrate`: measures what each rank of an MPI job really does, at the shapes a plan for
// the model and sequence length would give it, and turns it into a cluster file the planner, the
// cost model and the simulator read unchanged.
//   compute: each rank times the linear phase (a LinearProbe: the trainer's whole linear phase
//            when hexiseq-train runs calibrate, else one layer's GEMMs with OpenBLAS sgemm, which
//            libtorch's fp32 at::linear calls) and the runtime's attention kernels (forward +
//            backward, a causal diagonal block and a full block, as a ring step computes them)
//            at several shard sizes, all ranks at once (as in training, so shared cores show
//            up); the rate at the even split S / N is each kind's rate, the curve below it is
//            its `rate_curve` (the cost model reads a rank's rates at its own shard), and every
//            point goes to the sidecar JSON.
//   optimizer: each rank times one optimizer step over the model's parameters (an OptimizerProbe:
//            the trainer's gradient clipping and AdamW step, else a plain AdamW loop), written
//            as the kind's memory bandwidth (hbm_bandwidth), which the cost model's
//            CostModel::OptimizerStepSeconds charges the step at.
//   links:   every pair of ranks ping-pongs a few message sizes (latency = half the round trip of
//            the smallest, bandwidth from the largest); all ranks then run all-to-alls, reported
//            against the alpha-beta prediction of the pairwise figures.
// The trainer's probe folds the linear phase's non-GEMM work (norms, RoPE, SwiGLU, embedding, loss,
// autograd) into the GEMM rate: the cost model charges GEMM FLOPs only, so the rate it must use
// is the GEMM FLOPs over the time the whole phase takes (docs/measured.md measures the gap).
// Independent of libtorch: only the runtime (Comm, attention kernels, --slowdown) and spec; the
// trainer's probe comes in through CalibrateOptions::linear_probe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "spec/error.h"
#include "spec/model.h"

namespace hexiseq::calibrate {

// Smallest even-split shard the attention probe accepts: one key tile of the kernels.
inline constexpr int64_t kMinShardTokens = 128;

struct RatePoint;

// Times the linear phase of `tokens` rows under --slowdown compute regions: the FLOPs the cost
// model charges for it (RatePoint::flops) and the median seconds it took.
using LinearProbe = RatePoint (*)(const ModelSpec& model, Recompute recompute, int64_t tokens,
                                  int repeats);

// One optimizer step over `params` parameters: the median seconds it took.
struct OptimizerPoint {
  double params = 0;
  double seconds = 0;
};

// Times the optimizer step over the model's parameters (the trainer's, or a plain loop) under
// --slowdown compute regions as the trainer pads it.
using OptimizerProbe = OptimizerPoint (*)(const ModelSpec& model, int repeats);

struct CalibrateOptions {
  ModelSpec model;
  int64_t seq_len = 0;
  Recompute recompute = Recompute::kFull;  // weights forward and backward like the trainer
  int repeats = 3;                         // timed repeats per point (median)
  std::vector<std::string> hosts;          // per rank; empty: each rank's gethostname()
  double merge_tolerance = 0.10;       // neighbouring ranks of a host share a node kind within this
  LinearProbe linear_probe = nullptr;  // nullptr: one layer's GEMMs (sgemm)
  std::string linear_probe_name;       // what linear_probe times, for the outputs
  OptimizerProbe optimizer_probe = nullptr;  // nullptr: a plain AdamW loop (TimeAdamWLoop)
  std::string optimizer_probe_name;
};

// What the built-in optimizer probe times (CalibrateOptions::optimizer_probe = nullptr).
inline constexpr const char* kAdamWLoopProbeName = "a plain AdamW loop over fp32 arrays";

// What the built-in linear probe times (CalibrateOptions::linear_probe = nullptr).
inline constexpr const char* kGemmProbeName = "one layer's GEMMs (sgemm)";

// One point of a rate curve.
struct RatePoint {
  int64_t tokens = 0;  // shard tokens (attention: queries of each of the two blocks)
  double flops = 0;    // FLOPs the cost model charges for what was timed
  double seconds = 0;  // median wall time
  double flops_per_second() const { return seconds > 0 ? flops / seconds : 0; }
};

struct RankMeasurement {
  int rank = 0;
  std::string host;
  double slowdown = 1;               // --slowdown factor this rank ran with
  std::vector<RatePoint> gemm;       // one layer's GEMMs, forward + backward (+ recompute)
  std::vector<RatePoint> attention;  // forward + backward (+ recompute) of two blocks
  double gemm_rate = 0;              // FLOP/s at the even split (the point written out)
  double attention_rate = 0;
  OptimizerPoint optimizer;  // one optimizer step
  // Combined calibrations only: each run's rates, in the order of Calibration::combined_from.
  std::vector<double> gemm_rate_runs, attention_rate_runs;
};

struct PairMeasurement {
  int a = 0, b = 0;
  std::vector<int64_t> bytes;    // message sizes
  std::vector<double> half_rtt;  // median seconds per one-way message, per size
  double latency_seconds = 0;    // half round trip of the smallest message
  double bytes_per_second = 0;   // internal::PairBandwidth
};

struct AllToAllMeasurement {
  int64_t bytes_per_peer = 0;
  double seconds = 0;            // median wall time of one all-to-all (slowest rank)
  double predicted_seconds = 0;  // alpha-beta from the pairwise figures, busiest rank
};

struct Calibration {
  std::string model_name;
  int64_t seq_len = 0;
  int num_ranks = 0;
  int64_t even_shard_tokens = 0;  // S / N: the point the rates are read at
  std::vector<RankMeasurement> ranks;
  std::vector<PairMeasurement> pairs;  // a < b
  std::vector<AllToAllMeasurement> all_to_all;
  double host_memory_bytes = 0;  // physical memory of rank 0's host
  std::string slowdown_padding;  // "spin" or "sleep" (--slowdown-pad), "" when no rank is slowed
  std::string linear_probe;      // what the GEMM rate's probe timed
  std::string optimizer_probe;   // what the optimizer step's probe timed
  std::vector<std::string> combined_from;  // the sidecars a combined calibration is the median of
};

// Checks the options against the world size before anything is measured (same on every rank):
// --seq too small for the kernels, a host list that misses or adds ranks, repeats < 1.
Result<void> CheckOptions(const CalibrateOptions& options, int num_ranks);

// Collective over `world`. Every rank measures; rank 0 receives everything (other ranks get their
// own part only). A rank whose measurement is not a finite positive rate makes every rank return
// the same error naming it.
Result<Calibration> RunCalibration(runtime::Comm& world, const CalibrateOptions& options);

// The cluster file (YAML text with the figures' provenance as comments): node kinds of
// consecutive ranks on one host whose rates agree within options.merge_tolerance, inline devices
// whose bf16_tflops x efficiency equal the measured fp32 GEMM and attention rates, measured
// intra_node / nic / latency, and links between kinds. REQUIRES: calibration from rank 0.
std::string ClusterYaml(const Calibration& calibration, const CalibrateOptions& options,
                        const std::string& name);
// Every raw measurement as JSON (the sidecar file).
std::string CalibrationJson(const Calibration& calibration);

// A sidecar read back (the inverse of CalibrationJson); errors name the file and the field.
Result<Calibration> ParseCalibrationJson(const std::string& text, const std::string& path);
Result<Calibration> ReadCalibrationFile(const std::string& path);
// Calibrations of one job (same model, --seq, ranks, hosts, slowdowns, padding, probe sizes;
// else an error naming the file and the field) as one: every timed point, latency, bandwidth,
// one-way time and all-to-all time is the median over the runs, the rates are read from the
// median curve at the even split, and each rank keeps every run's rates. `paths` name the runs.
Result<Calibration> CombineCalibrations(const std::vector<Calibration>& runs,
                                        const std::vector<std::string>& paths);

}  // namespace hexiseq::calibrate
