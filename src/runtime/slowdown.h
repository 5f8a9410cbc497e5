// Emulated slow devices: `--slowdown RANK=FACTOR` makes one rank's compute regions take FACTOR
// times as long, so that unequal "devices" can be built from equal CPU cores. Every measured
// compute region (an attention kernel call, the trainer's linear/MLP/norm work between two
// attention calls, the optimizer step, a calibration kernel) is padded by (FACTOR - 1) x its own
// measured duration. Two ways to pad (PadMode):
//   spin:  busy-wait on the clock. Exact, and the rank keeps its core, caches and clock frequency,
//          as a slow device would; right when every rank has a core of its own.
//   sleep: free the core. Right when ranks share cores (oversubscription): a spinning pad would
//          take time from the ranks it shares a core with. A sleep costs tens of microseconds, so
//          pads shorter than kMinSleepSeconds are carried over to the next region, and each
//          sleep's overshoot is credited against later padding; a rank that slept computes a
//          little slower after it wakes (cold caches), which spin avoids.
// ChoosePadMode picks spin when the ranks of each host can each have a CPU of their own.
// Deliberately ignored: memory-bandwidth effects of a slower device (only time is stretched).
// Thread-safe: one process-wide factor and mode, set once at start-up; each thread carries its own
// debt and open region (the runtime and the trainer drive a rank's compute from one thread).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "runtime/comm.h"
#include "spec/error.h"

namespace hexiseq::runtime {

enum class PadMode { kSleep, kSpin };

// Pads shorter than this are accumulated instead of slept (a sleep costs tens of microseconds).
inline constexpr double kMinSleepSeconds = 50e-6;

// Parses `RANK=FACTOR[,RANK=FACTOR...]` for a world of `num_ranks` ranks into one factor per rank
// (1 where not named). Errors name `flag`, the bad piece, the rule and a hint: a rank outside
// [0, num_ranks), a rank given twice, a FACTOR that is not a number >= 1 (or above kMaxSlowdown).
// num_ranks = 0 checks the syntax only (before the world size is known) and returns no factors.
Result<std::vector<double>> ParseSlowdown(const std::string& text, int num_ranks,
                                          const std::string& flag = "--slowdown");
inline constexpr double kMaxSlowdown = 1000;

// A rank number of an emulation flag: a whole number in [0, num_ranks) (any >= 0 when num_ranks
// is 0); errors say `where`, the value and `rule`.
Result<int> ParseRankNumber(const std::string& text, const std::string& where, int num_ranks,
                            const std::string& rule);

// The CLI's one call: parses `text` (empty: no slowdown) and sets this rank's factor. Every rank
// parses the same text, so every rank returns the same error.
Result<void> ApplySlowdown(const std::string& text, int rank, int num_ranks,
                           const std::string& flag = "--slowdown");

// A CLI11 validator: "" when the syntax of `text` is right, else the message (exit code 2).
std::string SlowdownSyntaxError(const std::string& text);

// This process's factor (1: no padding). REQUIRES: 1 <= factor <= kMaxSlowdown.
void SetComputeSlowdown(double factor);
double ComputeSlowdown();
// How this process pads (default kSleep).
void SetPadMode(PadMode mode);
PadMode CurrentPadMode();
const char* PadModeName(PadMode mode);

// Whether every rank of `world` can have a CPU of its own: on each host (ranks grouped by host
// name), the ranks' CPU affinity masks admit an assignment of one distinct CPU per rank. The same
// answer on every rank. Collective over `world`.
bool EveryRankHasOwnCpu(Comm& world);

// `requested` = "spin", "sleep" or "auto" (spin when EveryRankHasOwnCpu, else sleep); anything
// else is an error naming `flag`. Collective over `world` for "auto".
Result<PadMode> ChoosePadMode(Comm& world, const std::string& requested,
                              const std::string& flag = "--slowdown-pad");

// Pads a compute region that took `elapsed_seconds` by (factor - 1) x elapsed (see the file
// comment for carry-over). No-op at factor 1.
void PadCompute(double elapsed_seconds);

// Ends a measurement: sleeps the padding still owed (carried pads under kMinSleepSeconds) and
// drops any credit from oversleeping, so that no time moves into the next measurement. No-op at
// factor 1.
void SettlePadding();

// Total seconds of padding requested so far in this process (for reports and tests).
double RequestedPaddingSeconds();

// Times a compute region from construction to destruction and pads it.
class ComputeRegion {
 public:
  ComputeRegion() : start_(std::chrono::steady_clock::now()) {}
  ~ComputeRegion();
  ComputeRegion(const ComputeRegion&) = delete;
  ComputeRegion& operator=(const ComputeRegion&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
};

// For compute that runs between calls rather than inside one scope (autograd's backward runs the
// linear layers between two attention calls): MarkComputeStart() opens a region, and
// PadComputeSinceMark() closes and pads it (a no-op when no region is open).
void MarkComputeStart();
void PadComputeSinceMark();

// Leaves a wait for communication out of an open MarkComputeStart region: pads and closes the
// region on construction and opens a new one on destruction (nothing when none was open).
class ComputePause {
 public:
  ComputePause();
  ~ComputePause();
  ComputePause(const ComputePause&) = delete;
  ComputePause& operator=(const ComputePause&) = delete;

 private:
  bool was_open_;
};

}  // namespace hexiseq::runtime
