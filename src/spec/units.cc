// Parsing and printing of quantities with units (bandwidth, memory, token counts). Decimal
// prefixes for bandwidth (1 GB/s = 1e9 B/s, 1 Gb/s = 1.25e8 B/s), binary or decimal for memory,
// binary for token counts (K = 1024). Rejects zero, negative, NaN and infinite values.
#include "spec/units.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "spec/limits.h"
#include "spec/spec_input.h"

namespace hexiseq {
namespace {

using spec_internal::FieldMessage;
using spec_internal::Lower;
using spec_internal::Quote;
using spec_internal::Trim;

struct Unit {
  const char* text;
  double scale;
};

// Splits "450 GB/s" into 450 and "GB/s". False when there is no leading finite number.
bool SplitNumber(const std::string& text, double* value, std::string* unit) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, *value);
  if (ec != std::errc() || ptr == begin || !std::isfinite(*value)) return false;
  *unit = Trim(std::string(ptr, end));
  return true;
}

// Parses `text` as a positive number with one of `units` (matched exactly, then
// case-insensitively when `fold_case`); a bare number takes `bare_scale`.
Result<double> ParseQuantity(const std::string& raw, const std::string& where,
                             const std::vector<Unit>& units, bool fold_case, double bare_scale,
                             const std::string& kind, const std::string& rule,
                             const std::string& hint, double min, double max,
                             std::string (*format)(double)) {
  const std::string text = Trim(raw);
  double value = 0;
  std::string unit;
  if (!SplitNumber(text, &value, &unit)) {
    return InvalidArgument(FieldMessage(where, Quote(raw), "not " + kind, rule, hint));
  }
  double scale = 0;
  if (unit.empty()) {
    scale = bare_scale;
  } else {
    for (const Unit& candidate : units) {
      if (unit == candidate.text) scale = candidate.scale;
    }
    if (scale == 0 && fold_case) {
      for (const Unit& candidate : units) {
        if (Lower(unit) == Lower(candidate.text)) scale = candidate.scale;
      }
    }
  }
  if (scale == 0) {
    return InvalidArgument(FieldMessage(
        where, Quote(raw), "not " + kind + " (unknown unit " + Quote(unit) + ")", rule, hint));
  }
  if (value <= 0) {
    return InvalidArgument(FieldMessage(where, Quote(raw), "must be > 0", rule, hint));
  }
  const double result = value * scale;
  if (!(result >= min && result <= max)) {  // also catches an overflow to inf
    return InvalidArgument(FieldMessage(
        where, Quote(raw), "outside the plausible range [" + format(min) + ", " + format(max) + "]",
        rule + "; the bounds are in docs/limits.md", hint));
  }
  return result;
}

std::string FormatScaled(double value, double scale, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f %s", value / scale, unit);
  return buf;
}

}  // namespace

Result<double> ParseBandwidth(const std::string& text, const std::string& where) {
  // Case matters: B is bytes, b is bits.
  static const std::vector<Unit> units = {
      {"GB/s", 1e9},    {"Gb/s", 1.25e8}, {"TB/s", 1e12}, {"Tb/s", 1.25e11}, {"MB/s", 1e6},
      {"Mb/s", 1.25e5}, {"B/s", 1.0},     {"GBps", 1e9},  {"Gbps", 1.25e8},  {"Gbit/s", 1.25e8}};
  return ParseQuantity(text, where, units, false, 1e9, "a bandwidth",
                       "a number with unit GB/s, Gb/s or TB/s", "write 450 GB/s",
                       kMinBandwidthBytesPerSecond, kMaxBandwidthBytesPerSecond, FormatBandwidth);
}

Result<double> ParseMemory(const std::string& text, const std::string& where) {
  static const std::vector<Unit> units = {
      {"GiB", kGiB}, {"GB", kGB}, {"TiB", kGiB * 1024.0}, {"TB", 1e12}, {"MiB", 1024.0 * 1024.0},
      {"MB", 1e6},   {"B", 1.0}};
  return ParseQuantity(text, where, units, true, kGiB, "a memory size",
                       "a number with unit GiB, GB or TiB", "write 80 GiB", kMinMemoryBytes,
                       kMaxMemoryBytes, FormatBytes);
}

Result<int64_t> ParseTokenCount(const std::string& raw, const std::string& where) {
  const std::string rule =
      "a whole number of tokens >= 1, optionally with suffix K (x1024) or M (x1048576)";
  const std::string hint = "write 256K or 1M";
  const std::string text = Trim(raw);
  double value = 0;
  std::string suffix;
  if (!SplitNumber(text, &value, &suffix)) {
    return InvalidArgument(FieldMessage(where, Quote(raw), "not a token count", rule, hint));
  }
  double scale = 0;
  const std::string lower = Lower(suffix);
  if (lower.empty()) scale = 1;
  if (lower == "k") scale = 1024.0;
  if (lower == "m") scale = 1024.0 * 1024.0;
  if (lower == "g") scale = 1024.0 * 1024.0 * 1024.0;
  if (scale == 0) {
    return InvalidArgument(FieldMessage(
        where, Quote(raw), "not a token count (unknown suffix " + Quote(suffix) + ")", rule, hint));
  }
  const double tokens = value * scale;
  if (tokens < 1) {
    return InvalidArgument(FieldMessage(where, Quote(raw), "must be >= 1", rule, hint));
  }
  if (tokens != std::floor(tokens)) {
    return InvalidArgument(
        FieldMessage(where, Quote(raw), "not a whole number of tokens", rule, hint));
  }
  if (tokens > static_cast<double>(kMaxSeqLen)) {
    return InvalidArgument(FieldMessage(
        where, Quote(raw), "too large: at most " + std::to_string(kMaxSeqLen) + " tokens (2G)",
        rule + "; the bounds are in docs/limits.md", hint));
  }
  return static_cast<int64_t>(tokens);
}

std::string FormatBytes(double bytes) {
  const double magnitude = std::fabs(bytes);
  if (magnitude >= kGiB * 1024.0) return FormatScaled(bytes, kGiB * 1024.0, "TiB");
  if (magnitude >= kGiB) return FormatScaled(bytes, kGiB, "GiB");
  if (magnitude >= 1024.0 * 1024.0) return FormatScaled(bytes, 1024.0 * 1024.0, "MiB");
  if (magnitude >= 1024.0) return FormatScaled(bytes, 1024.0, "KiB");
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  return buf;
}

std::string FormatBandwidth(double bytes_per_second) {
  const double magnitude = std::fabs(bytes_per_second);
  if (magnitude >= 1e12) return FormatScaled(bytes_per_second, 1e12, "TB/s");
  if (magnitude >= 1e9) return FormatScaled(bytes_per_second, 1e9, "GB/s");
  if (magnitude >= 1e6) return FormatScaled(bytes_per_second, 1e6, "MB/s");
  return FormatScaled(bytes_per_second, 1.0, "B/s");
}

std::string FormatTokens(int64_t tokens) {
  constexpr int64_t kK = 1024;
  constexpr int64_t kM = 1024 * 1024;
  if (tokens > 0 && tokens % kM == 0) return std::to_string(tokens / kM) + "M";
  if (tokens > 0 && tokens % kK == 0) return std::to_string(tokens / kK) + "K";
  return std::to_string(tokens);
}

}  // namespace hexiseq
