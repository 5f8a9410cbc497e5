// The stated bounds on every size and physical quantity HexiSeq accepts from a file or a flag
// (docs/limits.md lists them for users). Readers reject a value outside its bound with a clear
// error; inside the bounds every count and product is computed without overflow (causal pair
// counts of sequences up to kMaxSeqLen fit int64_t, see plan/ranges.h).
// Physical bounds are plausibility ranges, wide enough for any real device and link; they exist
// so that a typo (1e-300 GB/s, 1e30 GB/s) is an error instead of an `inf` in a result.
#pragma once

#include <cstdint>

namespace hexiseq {

// Sizes.
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 31;   // tokens per sequence (2G)
inline constexpr int64_t kMaxRanks = int64_t{1} << 20;    // GPUs in a cluster, ranks in a plan
inline constexpr int64_t kMaxHeads = 4096;                // query heads (and KV heads) of a model
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 16;  // head dimension
inline constexpr int64_t kMaxModelWidth = int64_t{1} << 24;  // layers, hidden, ffn_hidden, vocab
inline constexpr int64_t kMaxBatch = int64_t{1} << 20;       // sequences per iteration
inline constexpr int64_t kMaxNodeKinds = 65536;              // entries of a cluster's `nodes:`
inline constexpr int64_t kMaxNicsPerNode = 1024;             // simulate --nics-per-node
inline constexpr int64_t kMaxRateCurvePoints = 64;           // points of a node kind's rate_curve

// Inputs.
inline constexpr int64_t kMaxSpecFileBytes = int64_t{64} << 20;   // cluster, model, device table
inline constexpr int64_t kMaxPlanFileBytes = int64_t{512} << 20;  // plan JSON
inline constexpr int64_t kMaxDataFileBytes = int64_t{1} << 30;    // train --data (raw bytes)
inline constexpr int kMaxJsonDepth = 64;  // nesting of a plan (a valid plan nests 9 deep)

// Physical plausibility ranges (inclusive).
inline constexpr double kMinBandwidthBytesPerSecond = 1e6;     // 1 MB/s
inline constexpr double kMaxBandwidthBytesPerSecond = 1e14;    // 100 TB/s
inline constexpr double kMinMemoryBytes = 1024.0 * 1024.0;     // 1 MiB
inline constexpr double kMaxMemoryBytes = 1125899906842624.0;  // 1 PiB
inline constexpr double kMinPeakTflops = 1e-3;
inline constexpr double kMaxPeakTflops = 1e6;
inline constexpr double kMaxLatencySeconds = 1.0;
inline constexpr double kMaxRateCurveFactor = 4.0;   // rate_curve factors, in (0, 4]
inline constexpr double kMaxTimeLimitSeconds = 1e6;  // --time-limit

}  // namespace hexiseq
