// Internal to src/spec (not a public header): helpers shared by the YAML readers of clusters,
// device tables and models. They turn yaml-cpp nodes into checked values and build error
// messages of the form `<where> = <value>: <problem> (rule: <rule>; hint: <hint>)`.
// Deliberately ignores YAML features the inputs do not use (anchors are resolved by yaml-cpp,
// tags are ignored).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "spec/device.h"
#include "spec/error.h"

namespace hexiseq::spec_internal {

std::string Lower(const std::string& text);
std::string Trim(const std::string& text);
bool EqualsIgnoreCase(const std::string& a, const std::string& b);
// "a, b and c" style list; `conjunction` is "and" or "or".
std::string JoinList(const std::vector<std::string>& items, const std::string& conjunction);
// The `count` names closest to `query`: names containing more of the query's words (split at
// '-', '_', '.', ' ') first, then by EditDistance; ties keep the order of `names`.
std::vector<std::string> ClosestNames(const std::string& query,
                                      const std::vector<std::string>& names, int count);
// A value for a message: double-quoted, escaped, and cut to a readable length.
std::string Quote(const std::string& text);
// "<where> = <value>: <problem> (rule: <rule>; hint: <hint>)"; value may be empty.
using ::hexiseq::FieldMessage;

// Reads a whole file; kIo error naming the path and the OS reason.
Result<std::string> ReadTextFile(const std::string& path, const std::string& what);
// The file name without folders and extension ("examples/clusters/a.yaml" -> "a").
std::string FileStem(const std::string& path);

// Parses YAML text and requires a mapping at the top (or, when `allow_list`, a list).
// Errors: not text (binary), syntax error with 1-based line:column, empty, wrong top-level kind.
// `what` is e.g. "cluster file"; `example` is shown in hints.
Result<YAML::Node> ParseYamlDocument(const std::string& text, const std::string& source_name,
                                     const std::string& what, const std::string& example,
                                     bool allow_list);

// A mapping's entries as (key, value) in file order. Rejects keys not in `valid` (with the
// closest valid key), duplicate keys and non-scalar keys.
Result<std::vector<std::pair<std::string, YAML::Node>>> CheckedEntries(
    const YAML::Node& map, const std::string& where, const std::vector<std::string>& valid,
    const std::string& what);
// The value for `key` in entries from CheckedEntries, or an undefined node.
YAML::Node Get(const std::vector<std::pair<std::string, YAML::Node>>& entries,
               const std::string& key);

// The text of a scalar; an error naming `where` for a missing, null, list or mapping value.
Result<std::string> ScalarText(const YAML::Node& node, const std::string& where,
                               const std::string& rule, const std::string& hint);
// A whole number >= `min`, <= `max`.
Result<int64_t> ReadInt(const YAML::Node& node, const std::string& where, int64_t min, int64_t max,
                        const std::string& rule, const std::string& hint);
// A finite number > 0 (or in (0, 1] when `fraction`).
Result<double> ReadPositive(const YAML::Node& node, const std::string& where, bool fraction,
                            const std::string& rule, const std::string& hint);
Result<bool> ReadBool(const YAML::Node& node, const std::string& where, const std::string& rule);
Result<double> ReadBandwidth(const YAML::Node& node, const std::string& where);
Result<double> ReadMemory(const YAML::Node& node, const std::string& where);
// A duration with unit s, ms, us or ns (a bare number is rejected as ambiguous).
Result<double> ReadDuration(const YAML::Node& node, const std::string& where);

// Valid keys of a device row (device tables and inline cluster devices).
const std::vector<std::string>& DeviceRowKeys();
// Parses one device row. With `base` the row replaces only the fields it gives; without it,
// name, bf16_tflops and memory are required and the rest take documented defaults.
Result<DeviceSpec> ParseDeviceRow(const YAML::Node& row, const std::string& where,
                                  const DeviceSpec* base, const std::string& default_source);
// gemm_efficiency and attention_efficiency of `entries` (from CheckedEntries), where given, into
// `device`; `where` names the entry in errors.
Result<void> ReadEfficiencies(const std::vector<std::pair<std::string, YAML::Node>>& entries,
                              const std::string& where, DeviceSpec& device);

}  // namespace hexiseq::spec_internal
