// The command-wide planning deadline (deadline.h).
#include "sched/deadline.h"

#include <cmath>
#include <cstdio>

#include "spec/limits.h"

namespace hexiseq {

Result<Deadline> Deadline::FromTimeLimit(double seconds, const std::string& flag) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > kMaxTimeLimitSeconds) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", seconds);
    return InvalidArgument(flag + " = " + value +
                           ": must be a finite number of seconds in [0, 1e6] (0 means no limit)");
  }
  Deadline deadline;
  deadline.cut_short_ = std::make_shared<std::atomic<bool>>(false);
  if (seconds == 0) return deadline;
  deadline.limit_seconds_ = seconds;
  deadline.at_ = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(seconds));
  return deadline;
}

bool Deadline::Expired() const {
  if (limit_seconds_ <= 0 || std::chrono::steady_clock::now() < at_) return false;
  cut_short_->store(true, std::memory_order_relaxed);
  return true;
}

bool Deadline::CutShort() const {
  return cut_short_ && cut_short_->load(std::memory_order_relaxed);
}

std::string LimitText(const Deadline& deadline) {
  if (deadline.limit_seconds() <= 0) return "none";
  char text[32];
  std::snprintf(text, sizeof text, "%g s", deadline.limit_seconds());
  return text;
}

std::string NotScoredReason(const Deadline& deadline) {
  return "not scored: the time limit of " + LimitText(deadline) +
         " was reached before it started (hint: raise --time-limit; 0 means none)";
}

}  // namespace hexiseq
