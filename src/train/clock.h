// Monotonic wall-clock seconds for the trainer's phase timings.
#pragma once

#include <chrono>

namespace hexiseq::train {

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace hexiseq::train
