// Shared helpers for the spec readers: YAML loading with precise errors, checked scalar reads
// and the device-row parser used by both --device-table files and inline cluster devices.
#include "spec/spec_input.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "spec/input_file.h"
#include "spec/limits.h"
#include "spec/units.h"

namespace hexiseq::spec_internal {
namespace {

// Defaults for a new device that does not give these fields; documented in docs/devices.md.
// Conservative: a PCIe Gen4 x16 box on a 100 Gb/s NIC with FlashAttention-2-class kernels.
constexpr double kDefaultHbmBytesPerSecond = 1.0e12;
constexpr double kDefaultIntraNodeBytesPerSecond = 32e9;  // PCIe Gen4 x16, per direction
constexpr double kDefaultNicBytesPerSecond = 12.5e9;      // 100 Gb/s
constexpr double kDefaultGemmEfficiency = 0.70;
constexpr double kDefaultAttentionEfficiency = 0.50;

constexpr size_t kMaxQuotedChars = 60;

std::string Describe(const YAML::Node& node) {
  if (!node.IsDefined()) return "";
  if (node.IsNull()) return "(empty)";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return Quote(node.Scalar());
}

bool IsPlainNumber(const std::string& text) {
  if (text.empty()) return false;
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && ptr == text.data() + text.size() && std::isfinite(value);
}

// Shows numbers bare (count = 0) and text quoted (count = "abc").
std::string ShowScalar(const std::string& text) { return IsPlainNumber(text) ? text : Quote(text); }

}  // namespace

std::string Lower(const std::string& text) {
  std::string out = text;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Trim(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

bool EqualsIgnoreCase(const std::string& a, const std::string& b) { return Lower(a) == Lower(b); }

std::string JoinList(const std::vector<std::string>& items, const std::string& conjunction) {
  std::string out;
  for (size_t index = 0; index < items.size(); ++index) {
    if (index > 0) out += (index + 1 == items.size()) ? " " + conjunction + " " : ", ";
    out += items[index];
  }
  return out;
}

std::vector<std::string> ClosestNames(const std::string& query,
                                      const std::vector<std::string>& names, int count) {
  // Words of the query ("a100-80g" -> "a100", "80g"); a name containing more of them ranks first.
  std::vector<std::string> words;
  std::string word;
  for (char c : Lower(query) + "-") {
    if (c == '-' || c == '_' || c == ' ' || c == '.') {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  struct Scored {
    int words_found;
    int distance;
    size_t order;
  };
  std::vector<Scored> scored;
  for (size_t index = 0; index < names.size(); ++index) {
    const std::string lower_name = Lower(names[index]);
    int found = 0;
    for (const std::string& w : words) {
      if (lower_name.find(w) != std::string::npos) ++found;
    }
    scored.push_back({found, EditDistance(query, names[index]), index});
  }
  std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    if (a.words_found != b.words_found) return a.words_found > b.words_found;
    if (a.distance != b.distance) return a.distance < b.distance;
    return a.order < b.order;
  });
  std::vector<std::string> out;
  for (const Scored& s : scored) {
    if (static_cast<int>(out.size()) >= count) break;
    out.push_back(names[s.order]);
  }
  return out;
}

std::string Quote(const std::string& text) {
  std::string out = "\"";
  size_t shown = 0;
  for (unsigned char c : text) {
    if (shown >= kMaxQuotedChars) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    ++shown;
  }
  out += "\"";
  return out;
}

Result<std::string> ReadTextFile(const std::string& path, const std::string& what) {
  return ReadInputFile(path, what, kMaxSpecFileBytes,
                       what == "cluster file" ? "examples are in examples/clusters/" : "");
}

std::string FileStem(const std::string& path) {
  size_t slash = path.find_last_of('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = base.find_last_of('.');
  if (dot != std::string::npos && dot > 0) base = base.substr(0, dot);
  return base;
}

Result<YAML::Node> ParseYamlDocument(const std::string& text, const std::string& source_name,
                                     const std::string& what, const std::string& example,
                                     bool allow_list) {
  const std::string shape = allow_list ? "a YAML mapping or list" : "a YAML mapping";
  for (size_t offset = 0; offset < text.size(); ++offset) {
    const unsigned char c = static_cast<unsigned char>(text[offset]);
    if ((c < 0x20 && c != '\n' && c != '\r' && c != '\t') || c == 0x7f) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "binary byte 0x%02x at offset %zu", c, offset);
      return InvalidArgument(source_name + ": not a text file: " + buf + " (rule: a " + what +
                             " is " + shape + "; hint: " + example + ")");
    }
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    std::string location = source_name;
    if (e.mark.line >= 0 && e.mark.column >= 0) {
      location += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    }
    return InvalidArgument(location + ": YAML syntax error: " + e.msg + " (rule: a " + what +
                           " is " + shape + "; hint: check indentation, colons and quoting " +
                           "near that line)");
  } catch (const std::exception& e) {
    return InvalidArgument(source_name + ": cannot parse: " + e.what() + " (rule: a " + what +
                           " is " + shape + "; hint: " + example + ")");
  }
  if (!root.IsDefined() || root.IsNull()) {
    return InvalidArgument(source_name + ": empty file (rule: a " + what + " is " + shape +
                           "; hint: " + example + ")");
  }
  if (root.IsMap() || (allow_list && root.IsSequence())) return root;
  std::string got = root.IsSequence() ? "a list" : "the plain text " + Quote(root.Scalar());
  return InvalidArgument(source_name + ": not " + shape + ": the file holds " + got + " (rule: a " +
                         what + " is " + shape + "; hint: " + example + ")");
}

Result<std::vector<std::pair<std::string, YAML::Node>>> CheckedEntries(
    const YAML::Node& map, const std::string& where, const std::vector<std::string>& valid,
    const std::string& what) {
  std::vector<std::pair<std::string, YAML::Node>> entries;
  if (!map.IsMap()) {
    return InvalidArgument(FieldMessage(where, Describe(map), "not a mapping",
                                        what + " is a mapping of " + JoinList(valid, "and"),
                                        "write it as `key: value` lines"));
  }
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) {
      return InvalidArgument(FieldMessage(where, "", "a key is not a plain name",
                                          "keys of " + what + " are " + JoinList(valid, "and"),
                                          "remove the list or mapping used as a key"));
    }
    const std::string key = it->first.Scalar();
    const std::string shown_key = IsPlainFieldName(key) ? key : Quote(key);
    const std::string key_where = where.empty()         ? shown_key
                                  : where.back() == ':' ? where + " " + shown_key
                                                        : where + "." + shown_key;
    if (std::find(valid.begin(), valid.end(), key) == valid.end()) {
      const auto closest = ClosestNames(key, valid, 1);
      return InvalidArgument(
          FieldMessage(key_where, "", "unknown key " + Quote(key),
                       "valid keys of " + what + " are " + JoinList(valid, "and"),
                       closest.empty() ? "remove it" : "did you mean `" + closest[0] + "`?"));
    }
    for (const auto& entry : entries) {
      if (entry.first == key) {
        return InvalidArgument(FieldMessage(key_where, "", "key given twice",
                                            "each key appears once in " + what,
                                            "keep one of the two"));
      }
    }
    entries.emplace_back(key, it->second);
  }
  return entries;
}

YAML::Node Get(const std::vector<std::pair<std::string, YAML::Node>>& entries,
               const std::string& key) {
  for (const auto& entry : entries) {
    if (entry.first == key) return entry.second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

Result<std::string> ScalarText(const YAML::Node& node, const std::string& where,
                               const std::string& rule, const std::string& hint) {
  if (!node.IsDefined()) {
    return InvalidArgument(FieldMessage(where, "", "missing", rule, hint));
  }
  if (node.IsNull()) {
    return InvalidArgument(FieldMessage(where, "", "has no value", rule, hint));
  }
  if (!node.IsScalar()) {
    return InvalidArgument(
        FieldMessage(where, Describe(node), "expected a single value", rule, hint));
  }
  return Trim(node.Scalar());
}

Result<int64_t> ReadInt(const YAML::Node& node, const std::string& where, int64_t min, int64_t max,
                        const std::string& rule, const std::string& hint) {
  auto text = ScalarText(node, where, rule, hint);
  if (!text) return std::unexpected(text.error());
  int64_t value = 0;
  const char* begin = text->data();
  const char* end = begin + text->size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec == std::errc::result_out_of_range) {
    return InvalidArgument(FieldMessage(where, *text, "out of range", rule, hint));
  }
  if (ec != std::errc() || ptr != end || begin == end) {
    // A number with a fraction or exponent that happens to be whole (8.0, 1e3) is accepted.
    double as_double = 0;
    auto [dptr, dec] = std::from_chars(begin, end, as_double);
    if (dec == std::errc() && dptr == end && std::isfinite(as_double) &&
        as_double == std::floor(as_double) && std::fabs(as_double) < 9.0e15) {
      value = static_cast<int64_t>(as_double);
    } else {
      return InvalidArgument(
          FieldMessage(where, ShowScalar(*text), "not a whole number", rule, hint));
    }
  }
  if (value < min) {
    return InvalidArgument(
        FieldMessage(where, *text, "must be >= " + std::to_string(min), rule, hint));
  }
  if (value > max) {
    return InvalidArgument(
        FieldMessage(where, *text, "must be <= " + std::to_string(max), rule, hint));
  }
  return value;
}

Result<double> ReadPositive(const YAML::Node& node, const std::string& where, bool fraction,
                            const std::string& rule, const std::string& hint) {
  auto text = ScalarText(node, where, rule, hint);
  if (!text) return std::unexpected(text.error());
  double value = 0;
  const char* begin = text->data();
  const char* end = begin + text->size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end || !std::isfinite(value)) {
    return InvalidArgument(FieldMessage(where, ShowScalar(*text), "not a number", rule, hint));
  }
  if (value <= 0) {
    return InvalidArgument(FieldMessage(where, *text, "must be > 0", rule, hint));
  }
  if (fraction && value > 1) {
    return InvalidArgument(FieldMessage(where, *text, "must be <= 1", rule, hint));
  }
  return value;
}

Result<bool> ReadBool(const YAML::Node& node, const std::string& where, const std::string& rule) {
  auto text = ScalarText(node, where, rule, "write true or false");
  if (!text) return std::unexpected(text.error());
  const std::string lower = Lower(*text);
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  return InvalidArgument(
      FieldMessage(where, Quote(*text), "not true or false", rule, "write true or false"));
}

Result<double> ReadBandwidth(const YAML::Node& node, const std::string& where) {
  auto text = ScalarText(node, where, "a number with unit GB/s, Gb/s or TB/s", "write 450 GB/s");
  if (!text) return std::unexpected(text.error());
  return ParseBandwidth(*text, where);
}

Result<double> ReadMemory(const YAML::Node& node, const std::string& where) {
  auto text = ScalarText(node, where, "a number with unit GiB, GB or TiB", "write 80 GiB");
  if (!text) return std::unexpected(text.error());
  return ParseMemory(*text, where);
}

Result<double> ReadDuration(const YAML::Node& node, const std::string& where) {
  const std::string rule = "a duration with unit s, ms, us or ns";
  const std::string hint = "write 3 us";
  auto text = ScalarText(node, where, rule, hint);
  if (!text) return std::unexpected(text.error());
  double value = 0;
  const char* begin = text->data();
  const char* end = begin + text->size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin || !std::isfinite(value)) {
    return InvalidArgument(FieldMessage(where, Quote(*text), "not a duration", rule, hint));
  }
  const std::string unit = Trim(std::string(ptr, end));
  double scale = 0;
  if (unit == "s") scale = 1;
  if (unit == "ms") scale = 1e-3;
  if (unit == "us" || unit == "\xC2\xB5s") scale = 1e-6;
  if (unit == "ns") scale = 1e-9;
  if (scale == 0) {
    return InvalidArgument(FieldMessage(
        where, Quote(*text), unit.empty() ? "needs a unit" : "unknown unit", rule, hint));
  }
  if (value < 0) {
    return InvalidArgument(FieldMessage(where, Quote(*text), "must be >= 0", rule, hint));
  }
  if (value * scale > kMaxLatencySeconds) {
    return InvalidArgument(FieldMessage(where, Quote(*text), "must be <= 1 s",
                                        rule + "; the bounds are in docs/limits.md", hint));
  }
  return value * scale;
}

const std::vector<std::string>& DeviceRowKeys() {
  static const std::vector<std::string> keys = {
      "name",       "bf16_tflops", "memory",          "hbm_bandwidth",
      "intra_node", "nic",         "gemm_efficiency", "attention_efficiency",
      "source"};
  return keys;
}

namespace {

// bf16_tflops and memory into `spec`: required for a new device (`required`), else where given.
Result<void> ReadPeakAndMemory(const std::vector<std::pair<std::string, YAML::Node>>& entries,
                               const std::string& where, bool required, DeviceSpec& spec) {
  const std::string required_rule =
      "a new device gives name, bf16_tflops and memory; hbm_bandwidth, intra_node, nic, "
      "gemm_efficiency and attention_efficiency are optional";
  const std::string required_hint = "write {name: MyAccel, bf16_tflops: 200, memory: 48 GiB}";
  auto prefix = [&](const std::string& key) { return where + "." + key; };
  const YAML::Node tflops = Get(entries, "bf16_tflops");
  if (tflops.IsDefined() || required) {
    auto value = ReadPositive(tflops, prefix("bf16_tflops"), false,
                              "dense BF16 tensor TFLOPS without sparsity, a number > 0",
                              "write bf16_tflops: 312");
    if (!value) return std::unexpected(value.error());
    if (*value < kMinPeakTflops || *value > kMaxPeakTflops) {
      char range[64];
      std::snprintf(range, sizeof range, "[%g, %g]", kMinPeakTflops, kMaxPeakTflops);
      return InvalidArgument(FieldMessage(prefix("bf16_tflops"), ShowScalar(Trim(tflops.Scalar())),
                                          std::string("outside the plausible range ") + range,
                                          "dense BF16 tensor TFLOPS; the bounds are in "
                                          "docs/limits.md",
                                          "write bf16_tflops: 312"));
    }
    spec.peak_flops = *value * 1e12;
  }
  const YAML::Node memory = Get(entries, "memory");
  if (memory.IsDefined() || required) {
    if (!memory.IsDefined()) {
      return InvalidArgument(
          FieldMessage(prefix("memory"), "", "missing", required_rule, required_hint));
    }
    auto value = ReadMemory(memory, prefix("memory"));
    if (!value) return std::unexpected(value.error());
    spec.memory_bytes = *value;
  }
  return {};
}

}  // namespace

Result<void> ReadEfficiencies(const std::vector<std::pair<std::string, YAML::Node>>& entries,
                              const std::string& where, DeviceSpec& device) {
  struct FractionField {
    const char* key;
    double* target;
  };
  for (FractionField field :
       {FractionField{"gemm_efficiency", &device.gemm_efficiency},
        FractionField{"attention_efficiency", &device.attention_efficiency}}) {
    const YAML::Node node = Get(entries, field.key);
    if (!node.IsDefined()) continue;
    auto value = ReadPositive(node, where + "." + field.key, true,
                              "the achievable fraction of peak, a number in (0, 1]",
                              "write 0.6 for 60% of peak");
    if (!value) return std::unexpected(value.error());
    *field.target = *value;
  }
  return {};
}

Result<DeviceSpec> ParseDeviceRow(const YAML::Node& row, const std::string& where,
                                  const DeviceSpec* base, const std::string& default_source) {
  auto entries = CheckedEntries(row, where, DeviceRowKeys(), "a device");
  if (!entries) return std::unexpected(entries.error());
  const std::string required_rule =
      "a new device gives name, bf16_tflops and memory; hbm_bandwidth, intra_node, nic, "
      "gemm_efficiency and attention_efficiency are optional";
  const std::string required_hint = "write {name: MyAccel, bf16_tflops: 200, memory: 48 GiB}";
  DeviceSpec spec;
  if (base != nullptr) {
    spec = *base;
  } else {
    spec.hbm_bytes_per_second = kDefaultHbmBytesPerSecond;
    spec.intra_node_bytes_per_second = kDefaultIntraNodeBytesPerSecond;
    spec.nic_bytes_per_second = kDefaultNicBytesPerSecond;
    spec.gemm_efficiency = kDefaultGemmEfficiency;
    spec.attention_efficiency = kDefaultAttentionEfficiency;
    spec.source = default_source;
  }
  auto prefix = [&](const std::string& key) { return where + "." + key; };

  auto name = ScalarText(Get(*entries, "name"), prefix("name"), required_rule, required_hint);
  if (!name) return std::unexpected(name.error());
  if (name->empty()) {
    return InvalidArgument(
        FieldMessage(prefix("name"), "\"\"", "empty name", required_rule, required_hint));
  }
  spec.name = *name;

  if (auto sizes = ReadPeakAndMemory(*entries, where, base == nullptr, spec); !sizes)
    return std::unexpected(sizes.error());
  struct BandwidthField {
    const char* key;
    double* target;
  };
  for (BandwidthField field : {BandwidthField{"hbm_bandwidth", &spec.hbm_bytes_per_second},
                               BandwidthField{"intra_node", &spec.intra_node_bytes_per_second},
                               BandwidthField{"nic", &spec.nic_bytes_per_second}}) {
    const YAML::Node node = Get(*entries, field.key);
    if (!node.IsDefined()) continue;
    auto value = ReadBandwidth(node, prefix(field.key));
    if (!value) return std::unexpected(value.error());
    *field.target = *value;
  }
  if (auto efficiencies = ReadEfficiencies(*entries, where, spec); !efficiencies)
    return std::unexpected(efficiencies.error());
  const YAML::Node source = Get(*entries, "source");
  if (source.IsDefined()) {
    auto text = ScalarText(source, prefix("source"), "free text naming where the figures come from",
                           "write source: \"vendor datasheet\"");
    if (!text) return std::unexpected(text.error());
    spec.source = *text;
  } else if (base != nullptr) {
    spec.source = base->source + "; overridden by " + default_source;
  }
  return spec;
}

}  // namespace hexiseq::spec_internal
