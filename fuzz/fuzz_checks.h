// Properties every fuzz harness checks beyond "no crash": an error is a clear message (not empty,
// not internal, naming the input, of readable length) and an accepted input stays inside the
// stated bounds (spec/limits.h). A violated property prints what was violated and aborts, which
// libFuzzer reports as a crash and saves the input that caused it.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "spec/device.h"
#include "spec/error.h"
#include "spec/limits.h"

namespace hexiseq::fuzz {

// The longest error message a reader may return: a message names one field, its value (cut to
// a readable length), the rule and a hint.
inline constexpr size_t kMaxReaderMessageBytes = 4096;
// Validate lists up to 20 violations, each naming fields and values.
inline constexpr size_t kMaxValidateMessageBytes = 16384;

[[noreturn]] inline void Fail(const std::string& property, const std::string& detail) {
  std::fprintf(stderr, "fuzz property violated: %s\n%.2000s\n", property.c_str(), detail.c_str());
  std::abort();
}

inline void Require(bool holds, const std::string& property, const std::string& detail = "") {
  if (!holds) Fail(property, detail);
}

// A clear error: a user-facing code, a message of at most `max_bytes` that names `source_name`
// (when given).
inline void CheckError(const Error& error, const std::string& source_name, size_t max_bytes) {
  Require(error.code != ErrorCode::kInternal, "bad input is not an internal error", error.message);
  Require(!error.message.empty(), "an error has a message");
  Require(error.message.size() <= max_bytes,
          "an error message is at most " + std::to_string(max_bytes) + " bytes",
          std::to_string(error.message.size()) + " bytes: " + error.message.substr(0, 400));
  if (!source_name.empty())
    Require(error.message.find(source_name) != std::string::npos,
            "an error names the file (" + source_name + ")", error.message);
}

// A finite value in [min, max].
inline bool InRange(double value, double min, double max) {
  return std::isfinite(value) && value >= min && value <= max;
}

// A device row inside the plausibility ranges of spec/limits.h.
inline void CheckDevice(const DeviceSpec& device) {
  Require(!device.name.empty(), "a device has a name");
  Require(InRange(device.memory_bytes, kMinMemoryBytes, kMaxMemoryBytes), "device memory in range",
          device.name + ": " + std::to_string(device.memory_bytes));
  Require(InRange(device.peak_flops, kMinPeakTflops * 1e12, kMaxPeakTflops * 1e12),
          "device peak in range", device.name + ": " + std::to_string(device.peak_flops));
  Require(InRange(device.hbm_bytes_per_second, kMinBandwidthBytesPerSecond,
                  kMaxBandwidthBytesPerSecond),
          "HBM bandwidth in range",
          device.name + ": " + std::to_string(device.hbm_bytes_per_second));
  for (double bandwidth : {device.intra_node_bytes_per_second, device.nic_bytes_per_second})
    Require(InRange(bandwidth, kMinBandwidthBytesPerSecond, kMaxBandwidthBytesPerSecond),
            "device link bandwidth in range", device.name + ": " + std::to_string(bandwidth));
  Require(device.gemm_efficiency > 0 && device.gemm_efficiency <= 1, "GEMM efficiency in (0, 1]",
          device.name);
  Require(device.attention_efficiency > 0 && device.attention_efficiency <= 1,
          "attention efficiency in (0, 1]", device.name);
}

}  // namespace hexiseq::fuzz
