// The wall-clock limit of a whole planning command (`--time-limit`): made once when the command
// starts and handed, inside ScheduleOptions, to every search, baseline and comparison under it.
// Each checks it where a candidate, baseline, data-parallel degree, factorisation or training
// configuration starts, and skips that work once the deadline has passed; work already started
// runs to its end, so the command overruns the limit by at most one such step. Copies share one
// record of whether any check found the deadline passed, so the command can say that its result
// is the best found so far. Wall time only (not CPU time).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "spec/error.h"

namespace hexiseq {

class Deadline {
 public:
  Deadline() = default;  // never passes

  // A deadline `seconds` from now (0: none). kInvalidArgument, naming `flag`, unless `seconds`
  // is finite and in [0, kMaxTimeLimitSeconds].
  static Result<Deadline> FromTimeLimit(double seconds, const std::string& flag = "--time-limit");

  // True once the deadline has passed (never without a limit); the caller then skips the work it
  // was about to start. A true answer is recorded for CutShort, in every copy. Thread-safe.
  bool Expired() const;
  // Whether some check found the deadline passed, i.e. some search was cut short.
  bool CutShort() const;
  double limit_seconds() const { return limit_seconds_; }  // 0: none

 private:
  std::chrono::steady_clock::time_point at_{};
  double limit_seconds_ = 0;
  std::shared_ptr<std::atomic<bool>> cut_short_;
};

// The limit as text, e.g. "0.5 s" ("none" without a limit).
std::string LimitText(const Deadline& deadline);
// The reason given for a strategy that the deadline stopped before it scored any plan.
std::string NotScoredReason(const Deadline& deadline);

}  // namespace hexiseq
