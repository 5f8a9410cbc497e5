// Quantities with units as they appear in cluster, model and workload inputs.
// Bandwidth: "450 GB/s", "200 Gb/s", "1.8 TB/s", bare number = GB/s (decimal, 1 GB = 1e9 bytes).
// Memory: "80 GiB", "80 GB", "1 TiB", bare number = GiB. Token counts: "256K", "1M" (K = 1024).
#pragma once

#include <cstdint>
#include <string>

#include "spec/error.h"

namespace hexiseq {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kGB = 1e9;

// Returns bytes per second. `where` names the field for error messages (e.g. "nodes[0].nic").
Result<double> ParseBandwidth(const std::string& text, const std::string& where);
// Returns bytes.
Result<double> ParseMemory(const std::string& text, const std::string& where);
// "256K" -> 262144, "1M" -> 1048576, "4096" -> 4096. Must be >= 1.
Result<int64_t> ParseTokenCount(const std::string& text, const std::string& where);

// "1.5 GiB", "12.0 GB/s", "256K" style pretty printers.
std::string FormatBytes(double bytes);
std::string FormatBandwidth(double bytes_per_second);
std::string FormatTokens(int64_t tokens);

}  // namespace hexiseq
