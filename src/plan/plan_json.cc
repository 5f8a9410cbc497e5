// Plan <-> JSON ("hexiseq.plan/2"; "hexiseq.plan/1" is read as one replica), and the plan hash. The
// reader checks every field's type and range against spec/limits.h, rejects unknown and repeated
// keys (as the YAML readers do), and limits nesting depth and file size; each error names the file,
// the JSON path, the value, the rule and a hint. Semantic invariants (partitions, rank sets) are
// Validate()'s job.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "plan/plan.h"
#include "spec/input_file.h"
#include "spec/limits.h"

namespace hexiseq {
namespace {

using nlohmann::json;

// The keys of each object of a plan: exactly what PlanToJson writes (the one writer: the CLI,
// the Python package and the trainer all save plans through it), plus `planner` and
// `input_hash` at the top level, where plans before `provenance` kept them.
const std::vector<std::string> kPlanKeys = {
    "format",    "strategy",   "config",     "model",        "seq_len",    "batch",
    "recompute", "zero_stage", "num_heads",  "num_kv_heads", "num_ranks",  "replicas",
    "left_out",  "predicted",  "provenance", "planner",      "input_hash", "dtype"};
// hexiseq.plan/1: one replica, its groups at the top level.
const std::vector<std::string> kPlanV1Keys = {
    "format",    "strategy",   "config",    "model",        "seq_len",   "batch",
    "recompute", "zero_stage", "num_heads", "num_kv_heads", "num_ranks", "groups",
    "predicted", "provenance", "planner",   "input_hash"};
const std::vector<std::string> kReplicaKeys = {"sequences", "groups"};
const std::vector<std::string> kGroupKeys = {"ranks", "tokens", "members"};
const std::vector<std::string> kMemberKeys = {"rank", "device", "node", "tokens", "heads"};
const std::vector<std::string> kPredictedKeys = {"iteration_seconds", "tokens_per_second", "ranks"};
const std::vector<std::string> kRankPredictionKeys = {"rank",
                                                      "memory_bytes",
                                                      "memory_capacity_bytes",
                                                      "compute_seconds",
                                                      "exposed_comm_seconds",
                                                      "total_comm_seconds"};
const std::vector<std::string> kProvenanceKeys = {"planner", "input_hash", "time_limit_reached"};

constexpr size_t kMaxShownChars = 60;
// A JSON path in a message keeps its last this many characters (a path is at most kMaxJsonDepth
// keys of any length).
constexpr size_t kMaxShownPathChars = 240;
// The JSON parser's own message (it quotes the last token read, which may be the whole file).
constexpr size_t kMaxParserMessageChars = 400;

json RangesToJson(const Ranges& ranges) {
  json out = json::array();
  for (const Range& r : ranges) out.push_back(json::array({r.begin, r.end}));
  return out;
}
constexpr const char* kRegenerateHint = "regenerate the plan with `hexiseq plan --format json -o`";

// `text` cut to `max_chars`.
std::string Cut(const std::string& text, size_t max_chars) {
  return text.size() <= max_chars ? text : text.substr(0, max_chars) + "...";
}

// A JSON value for a message: a scalar as JSON text cut to a readable length; a list or an
// object by its size only (it may be huge or deeply nested).
std::string Show(const json& value) {
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " keys";
  if (value.is_array()) return "a list of " + std::to_string(value.size()) + " items";
  if (value.is_number_float() && !std::isfinite(value.get<double>()))
    return value.get<double>() > 0 ? "inf" : "-inf";  // 1e999 in the file; dump() says null
  return Cut(value.dump(-1, ' ', false, json::error_handler_t::replace), kMaxShownChars);
}

std::string Index(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}
// A key as a path element: as written when it is short and printable, else quoted and cut.
std::string Key(const std::string& path, const std::string& key) {
  const std::string shown = IsPlainFieldName(key) ? key : Show(json(key));
  return path.empty() ? shown : path + "." + shown;
}
// A path for a message: its last kMaxShownPathChars characters.
std::string ShownPath(const std::string& path) {
  if (path.size() <= kMaxShownPathChars) return path;
  return "..." + path.substr(path.size() - kMaxShownPathChars);
}
std::string Bounds(int64_t min, int64_t max) { return IntervalText(min, max, /*closed=*/true); }

// The key of `keys` closest to `key` by edit distance.
std::string ClosestKey(const std::string& key, const std::vector<std::string>& keys) {
  std::string best = keys.front();
  for (const std::string& candidate : keys)
    if (EditDistance(key, candidate) < EditDistance(key, best)) best = candidate;
  return best;
}

std::string JoinKeys(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& key : keys) out += (out.empty() ? "" : ", ") + key;
  return out;
}

// Typed, range-checked accessors; every error names the file and the JSON path.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  std::unexpected<Error> Fail(const std::string& path, const std::string& value,
                              const std::string& problem, const std::string& rule,
                              const std::string& hint = kRegenerateHint) const {
    return InvalidArgument(
        FieldMessage(source_ + ": " + ShownPath(path), value, problem, rule, hint));
  }

  // `value` is an object whose keys are all in `keys`.
  Result<void> Object(const json& value, const std::string& path,
                      const std::vector<std::string>& keys, const std::string& what) const {
    const std::string where = path.empty() ? "the plan" : path;
    if (!value.is_object())
      return Fail(where, Show(value), "must be an object",
                  what + " is an object of " + JoinKeys(keys));
    for (const auto& [key, unused] : value.items()) {
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
      return Fail(Key(path, key), "", "unknown key " + Show(json(key)),
                  "the keys of " + what + " are " + JoinKeys(keys),
                  "did you mean `" + ClosestKey(key, keys) + "`? otherwise remove it");
    }
    return {};
  }

  // The value of `key`; nullptr when it is absent and not `required`.
  Result<const json*> Field(const json& object, const std::string& path, const char* key,
                            bool required) const {
    auto it = object.find(key);
    if (it != object.end()) return &*it;
    if (!required) return static_cast<const json*>(nullptr);
    return Fail(Key(path, key), "", "missing", std::string("required by ") + kPlanFormat);
  }

  Result<int64_t> Int(const json& value, const std::string& path, int64_t min, int64_t max,
                      const std::string& rule) const {
    if (value.is_number_unsigned()) {
      const uint64_t number = value.get<uint64_t>();
      if (number > static_cast<uint64_t>(max))
        return Fail(path, Show(value), "out of range " + Bounds(min, max), rule);
      return InRange(static_cast<int64_t>(number), value, path, min, max, rule);
    }
    if (value.is_number_integer())
      return InRange(value.get<int64_t>(), value, path, min, max, rule);
    if (value.is_number_float()) {
      const double number = value.get<double>();
      if (!std::isfinite(number) || number != std::floor(number))
        return Fail(path, Show(value), "must be an integer", rule);
      if (number < static_cast<double>(min) || number > static_cast<double>(max))
        return Fail(path, Show(value), "out of range " + Bounds(min, max), rule);
      return static_cast<int64_t>(number);
    }
    return Fail(path, Show(value), "must be an integer", rule);
  }

  // A finite number >= 0 (seconds, bytes, tokens per second).
  Result<double> Number(const json& value, const std::string& path) const {
    const std::string rule = "a prediction is a finite number >= 0";
    if (!value.is_number()) return Fail(path, Show(value), "must be a number", rule);
    const double number = value.get<double>();
    if (!std::isfinite(number) || number < 0)
      return Fail(path, Show(value), "must be finite and >= 0", rule);
    return number;
  }

  Result<bool> Bool(const json& value, const std::string& path) const {
    if (value.is_boolean()) return value.get<bool>();
    return Fail(path, Show(value), "must be true or false", "a flag");
  }

  Result<std::string> String(const json& value, const std::string& path) const {
    if (value.is_string()) return value.get<std::string>();
    return Fail(path, Show(value), "must be a string", "a text field");
  }

  // A list of [begin, end) pairs with endpoints in [0, kMaxSeqLen].
  Result<Ranges> RangeList(const json& value, const std::string& path) const {
    const std::string rule = "token ranges are [begin, end) pairs of positions in " +
                             Bounds(0, kMaxSeqLen) + " (docs/limits.md)";
    if (!value.is_array())
      return Fail(path, Show(value), "must be a list of [begin, end) pairs", rule);
    Ranges out;
    out.reserve(value.size());
    for (size_t index = 0; index < value.size(); ++index) {
      const json& pair = value[index];
      const std::string pair_path = Index(path, index);
      if (!pair.is_array() || pair.size() != 2)
        return Fail(pair_path, Show(pair), "must be a [begin, end) pair", rule);
      auto begin = Int(pair[0], Index(pair_path, 0), 0, kMaxSeqLen, rule);
      if (!begin) return std::unexpected(begin.error());
      auto end = Int(pair[1], Index(pair_path, 1), 0, kMaxSeqLen, rule);
      if (!end) return std::unexpected(end.error());
      out.push_back({*begin, *end});
    }
    return out;
  }

  // A list of at most `max + 1` integers in [0, max].
  Result<std::vector<int>> IntList(const json& value, const std::string& path, int64_t max,
                                   const std::string& rule) const {
    if (!value.is_array()) return Fail(path, Show(value), "must be a list of integers", rule);
    if (value.size() > static_cast<size_t>(max) + 1)
      return Fail(path, Show(value), "too long: at most " + std::to_string(max + 1) + " entries",
                  rule);
    std::vector<int> out;
    out.reserve(value.size());
    for (size_t index = 0; index < value.size(); ++index) {
      auto number = Int(value[index], Index(path, index), 0, max, rule);
      if (!number) return std::unexpected(number.error());
      out.push_back(static_cast<int>(*number));
    }
    return out;
  }

 private:
  Result<int64_t> InRange(int64_t number, const json& value, const std::string& path, int64_t min,
                          int64_t max, const std::string& rule) const {
    if (number < min || number > max)
      return Fail(path, Show(value), "out of range " + Bounds(min, max), rule);
    return number;
  }

  std::string source_;
};

const std::string kRankRule =
    "ranks are whole numbers in " + Bounds(0, kMaxRanks - 1) + " (docs/limits.md)";
const std::string kHeadRule =
    "heads are query-head ids in " + Bounds(0, kMaxHeads - 1) + " (docs/limits.md)";

Result<PlanMember> ReadMember(const Reader& reader, const json& value, const std::string& path) {
  HEXISEQ_TRY_VOID(reader.Object(value, path, kMemberKeys, "a group member"));
  PlanMember member;
  HEXISEQ_TRY(rank_node, reader.Field(value, path, "rank", true));
  HEXISEQ_TRY(rank, reader.Int(*rank_node, Key(path, "rank"), 0, kMaxRanks - 1, kRankRule));
  member.rank = static_cast<int>(rank);
  HEXISEQ_TRY(device_node, reader.Field(value, path, "device", false));
  if (device_node) {
    HEXISEQ_TRY(device, reader.String(*device_node, Key(path, "device")));
    member.device = device;
  }
  HEXISEQ_TRY(node_node, reader.Field(value, path, "node", false));
  if (node_node) {
    HEXISEQ_TRY(node,
                reader.Int(*node_node, Key(path, "node"), 0, kMaxRanks - 1,
                           "node is the cluster's node index, in " + Bounds(0, kMaxRanks - 1)));
    member.node = static_cast<int>(node);
  }
  HEXISEQ_TRY(tokens_node, reader.Field(value, path, "tokens", true));
  HEXISEQ_TRY(tokens, reader.RangeList(*tokens_node, Key(path, "tokens")));
  member.tokens = std::move(tokens);
  HEXISEQ_TRY(heads_node, reader.Field(value, path, "heads", true));
  HEXISEQ_TRY(heads, reader.IntList(*heads_node, Key(path, "heads"), kMaxHeads - 1, kHeadRule));
  member.heads = std::move(heads);
  return member;
}

Result<PlanGroup> ReadGroup(const Reader& reader, const json& value, const std::string& path) {
  HEXISEQ_TRY_VOID(reader.Object(value, path, kGroupKeys, "a group"));
  PlanGroup group;
  HEXISEQ_TRY(ranks_node, reader.Field(value, path, "ranks", true));
  HEXISEQ_TRY(ranks, reader.IntList(*ranks_node, Key(path, "ranks"), kMaxRanks - 1, kRankRule));
  group.ranks = std::move(ranks);
  HEXISEQ_TRY(tokens_node, reader.Field(value, path, "tokens", true));
  HEXISEQ_TRY(tokens, reader.RangeList(*tokens_node, Key(path, "tokens")));
  group.tokens = std::move(tokens);
  HEXISEQ_TRY(members, reader.Field(value, path, "members", true));
  const std::string members_path = Key(path, "members");
  if (!members->is_array())
    return reader.Fail(members_path, Show(*members), "must be a list", "a list of members");
  for (size_t index = 0; index < members->size(); ++index) {
    HEXISEQ_TRY(member, ReadMember(reader, (*members)[index], Index(members_path, index)));
    group.members.push_back(std::move(member));
  }
  return group;
}

// The groups of `object` (the plan in hexiseq.plan/1, a replica in /2), appended to `out`.
Result<void> ReadGroups(const Reader& reader, const json& object, const std::string& path,
                        int replica, std::vector<PlanGroup>& out) {
  HEXISEQ_TRY(groups, reader.Field(object, path, "groups", true));
  const std::string groups_path = Key(path, "groups");
  if (!groups->is_array() || groups->size() + out.size() > static_cast<size_t>(kMaxRanks))
    return reader.Fail(groups_path, Show(*groups), "must be a list of groups",
                       "at most " + std::to_string(kMaxRanks) + " groups (docs/limits.md)");
  for (size_t index = 0; index < groups->size(); ++index) {
    HEXISEQ_TRY(group, ReadGroup(reader, (*groups)[index], Index(groups_path, index)));
    group.replica = replica;
    out.push_back(std::move(group));
  }
  return {};
}

// hexiseq.plan/2: "replicas" (each its sequences and groups) and "left_out".
Result<void> ReadReplicas(const Reader& reader, const json& plan_json, Plan& plan) {
  HEXISEQ_TRY(replicas, reader.Field(plan_json, "", "replicas", true));
  if (!replicas->is_array() || replicas->empty() ||
      replicas->size() > static_cast<size_t>(kMaxRanks))
    return reader.Fail("replicas", Show(*replicas), "must be a non-empty list of replicas",
                       "each replica is {\"sequences\": N, \"groups\": [...]}, at most " +
                           std::to_string(kMaxRanks));
  for (size_t index = 0; index < replicas->size(); ++index) {
    const json& replica = (*replicas)[index];
    const std::string path = Index("replicas", index);
    HEXISEQ_TRY_VOID(reader.Object(replica, path, kReplicaKeys, "a replica"));
    HEXISEQ_TRY(sequences_node, reader.Field(replica, path, "sequences", true));
    HEXISEQ_TRY(sequences, reader.Int(*sequences_node, Key(path, "sequences"), 1, kMaxBatch,
                                      "sequences per iteration of the replica (docs/limits.md)"));
    plan.replica_sequences.push_back(static_cast<int>(sequences));
    HEXISEQ_TRY_VOID(ReadGroups(reader, replica, path, static_cast<int>(index), plan.groups));
  }
  // One replica that takes the whole batch is the plan without replicas (replica_sequences
  // empty), so a hexiseq.plan/1 file and its /2 rewrite are the same Plan.
  if (plan.replica_sequences.size() == 1 && plan.replica_sequences[0] == plan.batch)
    plan.replica_sequences.clear();
  HEXISEQ_TRY(left_out, reader.Field(plan_json, "", "left_out", false));
  if (!left_out) return {};
  HEXISEQ_TRY(ranks, reader.IntList(*left_out, "left_out", kMaxRanks - 1, kRankRule));
  plan.left_out = std::move(ranks);
  return {};
}

Result<RankPrediction> ReadRankPrediction(const Reader& reader, const json& value,
                                          const std::string& path) {
  HEXISEQ_TRY_VOID(reader.Object(value, path, kRankPredictionKeys, "a rank's prediction"));
  RankPrediction prediction;
  if (auto it = value.find("rank"); it != value.end()) {
    HEXISEQ_TRY(rank, reader.Int(*it, Key(path, "rank"), 0, kMaxRanks - 1, kRankRule));
    prediction.rank = static_cast<int>(rank);
  }
  for (auto [key, target] : {std::pair{"memory_bytes", &prediction.memory_bytes},
                             {"memory_capacity_bytes", &prediction.memory_capacity_bytes},
                             {"compute_seconds", &prediction.compute_seconds},
                             {"exposed_comm_seconds", &prediction.exposed_comm_seconds},
                             {"total_comm_seconds", &prediction.total_comm_seconds}}) {
    auto it = value.find(key);
    if (it == value.end()) continue;
    HEXISEQ_TRY(number, reader.Number(*it, Key(path, key)));
    *target = number;
  }
  return prediction;
}

Result<PlanPrediction> ReadPrediction(const Reader& reader, const json& value) {
  HEXISEQ_TRY_VOID(reader.Object(value, "predicted", kPredictedKeys, "predicted"));
  PlanPrediction prediction;
  for (auto [key, target] : {std::pair{"iteration_seconds", &prediction.iteration_seconds},
                             {"tokens_per_second", &prediction.tokens_per_second}}) {
    auto it = value.find(key);
    if (it == value.end()) continue;
    HEXISEQ_TRY(number, reader.Number(*it, Key("predicted", key)));
    *target = number;
  }
  auto ranks = value.find("ranks");
  if (ranks == value.end()) return prediction;
  if (!ranks->is_array() || ranks->size() > static_cast<size_t>(kMaxRanks))
    return reader.Fail("predicted.ranks", Show(*ranks), "must be a list",
                       "one prediction per rank, at most " + std::to_string(kMaxRanks));
  for (size_t index = 0; index < ranks->size(); ++index) {
    HEXISEQ_TRY(rank, ReadRankPrediction(reader, (*ranks)[index], Index("predicted.ranks", index)));
    prediction.ranks.push_back(rank);
  }
  return prediction;
}

// `planner` and `input_hash`, under "provenance" (as written) or at the top level.
Result<void> ReadProvenance(const Reader& reader, const json& plan_json, Plan& plan) {
  auto read = [&](const json& object, const std::string& path) -> Result<void> {
    for (auto [key, target] :
         {std::pair{"planner", &plan.planner}, {"input_hash", &plan.input_hash}}) {
      auto it = object.find(key);
      if (it == object.end()) continue;
      HEXISEQ_TRY(text, reader.String(*it, Key(path, key)));
      *target = text;
    }
    return {};
  };
  HEXISEQ_TRY_VOID(read(plan_json, ""));
  auto provenance = plan_json.find("provenance");
  if (provenance == plan_json.end()) return {};
  HEXISEQ_TRY_VOID(reader.Object(*provenance, "provenance", kProvenanceKeys, "provenance"));
  if (auto limited = provenance->find("time_limit_reached"); limited != provenance->end()) {
    HEXISEQ_TRY(value, reader.Bool(*limited, "provenance.time_limit_reached"));
    plan.time_limit_reached = value;
  }
  return read(*provenance, "provenance");
}

// format, the text fields and the sizes.
Result<void> ReadHeader(const Reader& reader, const json& plan_json, Plan& plan) {
  HEXISEQ_TRY(format_node, reader.Field(plan_json, "", "format", true));
  HEXISEQ_TRY(format, reader.String(*format_node, "format"));
  if (format != kPlanFormat && format != kPlanFormatV1)
    return reader.Fail("format", Show(*format_node),
                       std::string("must be \"") + kPlanFormat + "\" or \"" + kPlanFormatV1 + "\"",
                       "the plan formats this version of hexiseq reads", kRegenerateHint);
  plan.format = kPlanFormat;  // a /1 plan is read as one replica
  for (auto [key, target] : {std::pair{"strategy", &plan.strategy},
                             {"config", &plan.config},
                             {"model", &plan.model},
                             {"recompute", &plan.recompute},
                             {"dtype", &plan.dtype}}) {
    HEXISEQ_TRY(node, reader.Field(plan_json, "", key, false));
    if (!node) continue;
    HEXISEQ_TRY(text, reader.String(*node, key));
    *target = text;
  }
  if (!ParseRecompute(plan.recompute))
    return reader.Fail("recompute", Show(json(plan.recompute)), "not a recompute policy",
                       "one of full, selective, none");
  if (!ParseDtype(plan.dtype))
    return reader.Fail("dtype", Show(json(plan.dtype)), "not a precision", "bf16 or fp32");
  struct IntField {
    const char* key;
    bool required;
    int64_t min, max;
    const char* rule;
  };
  const IntField fields[] = {
      {"seq_len", true, 1, kMaxSeqLen, "tokens per sequence (docs/limits.md)"},
      {"num_heads", true, 1, kMaxHeads, "the model's query heads (docs/limits.md)"},
      {"num_kv_heads", true, 1, kMaxHeads, "the model's KV heads (docs/limits.md)"},
      {"num_ranks", true, 1, kMaxRanks, "the cluster's GPUs (docs/limits.md)"},
      {"batch", false, 1, kMaxBatch, "sequences per iteration (docs/limits.md)"},
      {"zero_stage", false, 0, 3, "a ZeRO stage"}};
  int64_t values[std::size(fields)] = {0, 0, 0, 0, plan.batch, plan.zero_stage};
  for (size_t index = 0; index < std::size(fields); ++index) {
    const IntField& field = fields[index];
    HEXISEQ_TRY(node, reader.Field(plan_json, "", field.key, field.required));
    if (!node) continue;
    HEXISEQ_TRY(number, reader.Int(*node, field.key, field.min, field.max, field.rule));
    values[index] = number;
  }
  plan.seq_len = values[0];
  plan.num_heads = static_cast<int>(values[1]);
  plan.num_kv_heads = static_cast<int>(values[2]);
  plan.num_ranks = static_cast<int>(values[3]);
  plan.batch = static_cast<int>(values[4]);
  plan.zero_stage = static_cast<int>(values[5]);
  return {};
}

Result<Plan> FromJson(const json& plan_json, const std::string& source) {
  const Reader reader(source);
  const auto format = plan_json.is_object() ? plan_json.find("format") : plan_json.end();
  const bool version1 = format != plan_json.end() && *format == kPlanFormatV1;
  HEXISEQ_TRY_VOID(reader.Object(plan_json, "", version1 ? kPlanV1Keys : kPlanKeys,
                                 version1 ? std::string("a hexiseq.plan/1 plan") : "a plan"));
  Plan plan;
  HEXISEQ_TRY_VOID(ReadHeader(reader, plan_json, plan));
  if (version1) {
    HEXISEQ_TRY_VOID(ReadGroups(reader, plan_json, "", 0, plan.groups));
  } else {
    HEXISEQ_TRY_VOID(ReadReplicas(reader, plan_json, plan));
  }
  if (auto it = plan_json.find("predicted"); it != plan_json.end()) {
    HEXISEQ_TRY(prediction, ReadPrediction(reader, *it));
    plan.predicted = std::move(prediction);
  }
  HEXISEQ_TRY_VOID(ReadProvenance(reader, plan_json, plan));
  return plan;
}

// The byte offset where `text` nests deeper than `max_depth` lists/objects, or npos. Brackets
// inside strings do not count.
size_t FindTooDeep(const std::string& text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t offset = 0; offset < text.size(); ++offset) {
    const char c = text[offset];
    if (in_string) {
      if (c == '\\')
        ++offset;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return offset;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

// Watches the parser's events and records the path of the first key given twice in an object
// (nlohmann::json would silently keep the last value).
class DuplicateKeyFinder {
 public:
  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    using Event = json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        frames_.push_back({event == Event::object_start, {}, "", 0});
        break;
      case Event::key: {
        Frame& frame = frames_.back();
        frame.key = parsed.get<std::string>();
        if (!frame.keys.insert(frame.key).second && duplicate_.empty()) duplicate_ = Path();
        break;
      }
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        ElementDone();
        break;
      case Event::value:
        ElementDone();
        break;
    }
    return true;
  }
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool object;
    std::set<std::string> keys;
    std::string key;
    size_t index;
  };
  void ElementDone() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }
  std::string Path() const {
    std::string path;
    for (const Frame& frame : frames_)
      path = frame.object ? Key(path, frame.key) : Index(path, frame.index);
    return path;
  }
  std::vector<Frame> frames_;
  std::string duplicate_;
};

Result<json> ParseChecked(const std::string& text, const std::string& source_name) {
  if (const size_t offset = FindTooDeep(text, kMaxJsonDepth); offset != std::string::npos)
    return InvalidArgument(source_name + ": nested deeper than " + std::to_string(kMaxJsonDepth) +
                           " lists or objects at byte " + std::to_string(offset) + " (rule: a " +
                           kPlanFormat + " plan nests at most 9 deep; hint: " + kRegenerateHint +
                           ")");
  DuplicateKeyFinder duplicates;
  json parsed;
  try {
    parsed = json::parse(text, std::ref(duplicates));
  } catch (const json::exception& e) {
    return InvalidArgument(source_name +
                           ": not valid JSON: " + Cut(e.what(), kMaxParserMessageChars) +
                           " (hint: plans are written by `hexiseq plan --format json`)");
  }
  if (!duplicates.duplicate().empty())
    return InvalidArgument(FieldMessage(source_name + ": " + ShownPath(duplicates.duplicate()), "",
                                        "key given twice", "each key appears once in an object",
                                        "keep one of the two"));
  return parsed;
}

}  // namespace

std::string PlanToJson(const Plan& plan, int indent) {
  json j;
  j["format"] = plan.format;
  j["strategy"] = plan.strategy;
  if (!plan.config.empty()) j["config"] = plan.config;
  j["model"] = plan.model;
  j["seq_len"] = plan.seq_len;
  j["batch"] = plan.batch;
  j["recompute"] = plan.recompute;
  if (plan.dtype != "bf16") j["dtype"] = plan.dtype;
  j["zero_stage"] = plan.zero_stage;
  j["num_heads"] = plan.num_heads;
  j["num_kv_heads"] = plan.num_kv_heads;
  j["num_ranks"] = plan.num_ranks;
  json replicas = json::array();
  for (int r = 0; r < NumReplicas(plan); ++r)
    replicas.push_back({{"sequences", ReplicaSequences(plan, r)}, {"groups", json::array()}});
  for (const PlanGroup& g : plan.groups) {
    json gj;
    gj["ranks"] = g.ranks;
    gj["tokens"] = RangesToJson(g.tokens);
    json members = json::array();
    for (const PlanMember& m : g.members) {
      json mj;
      mj["rank"] = m.rank;
      mj["device"] = m.device;
      if (m.node >= 0) mj["node"] = m.node;
      mj["tokens"] = RangesToJson(m.tokens);
      mj["heads"] = m.heads;
      members.push_back(std::move(mj));
    }
    gj["members"] = std::move(members);
    replicas[std::clamp(g.replica, 0, NumReplicas(plan) - 1)]["groups"].push_back(std::move(gj));
  }
  j["replicas"] = std::move(replicas);
  if (!plan.left_out.empty()) j["left_out"] = plan.left_out;
  if (plan.predicted) {
    const PlanPrediction& p = *plan.predicted;
    json pj;
    pj["iteration_seconds"] = p.iteration_seconds;
    pj["tokens_per_second"] = p.tokens_per_second;
    json ranks = json::array();
    for (const RankPrediction& r : p.ranks) {
      ranks.push_back({{"rank", r.rank},
                       {"memory_bytes", r.memory_bytes},
                       {"memory_capacity_bytes", r.memory_capacity_bytes},
                       {"compute_seconds", r.compute_seconds},
                       {"exposed_comm_seconds", r.exposed_comm_seconds},
                       {"total_comm_seconds", r.total_comm_seconds}});
    }
    pj["ranks"] = std::move(ranks);
    j["predicted"] = std::move(pj);
  }
  json prov;
  prov["planner"] = plan.planner;
  prov["input_hash"] = plan.input_hash;
  if (plan.time_limit_reached) prov["time_limit_reached"] = true;
  j["provenance"] = std::move(prov);
  return j.dump(indent) + "\n";
}

Result<Plan> ParsePlanJson(const std::string& text, const std::string& source_name) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    return InvalidArgument(source_name + ": the file is empty (rule: a " + kPlanFormat +
                           " JSON object; hint: write one with `hexiseq plan --format json -o`)");
  if (static_cast<int64_t>(text.size()) > kMaxPlanFileBytes)
    return InvalidArgument(source_name + ": the plan is " + std::to_string(text.size() >> 20) +
                           " MiB (rule: plans are at most " +
                           std::to_string(kMaxPlanFileBytes >> 20) + " MiB; docs/limits.md)");
  HEXISEQ_TRY(parsed, ParseChecked(text, source_name));
  return FromJson(parsed, source_name);
}

Result<Plan> LoadPlan(const std::string& path) {
  HEXISEQ_TRY(text, ReadInputFile(path, "plan file", kMaxPlanFileBytes,
                                  "plans are written by `hexiseq plan --format json -o FILE`"));
  return ParsePlanJson(text, path);
}

Result<void> SavePlan(const Plan& plan, const std::string& path) {
  if (plan.predicted && !(std::isfinite(plan.predicted->iteration_seconds) &&
                          std::isfinite(plan.predicted->tokens_per_second)))
    return Internal(path + ": the plan's prediction is not finite; not written");
  std::ofstream out(path, std::ios::binary);
  if (!out) return IoError(path + ": cannot open for writing: " + std::strerror(errno));
  out << PlanToJson(plan);
  out.close();
  if (!out) return IoError(path + ": write failed (hint: is the disk full?)");
  return {};
}

uint64_t PlanHash(const Plan& plan) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) {
    for (int byte = 0; byte < 8; ++byte) {
      h ^= static_cast<uint64_t>(v >> (8 * byte)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(plan.seq_len);
  mix(plan.num_heads);
  mix(plan.num_kv_heads);
  mix(plan.num_ranks);
  mix(plan.batch);
  mix(NumReplicas(plan));
  for (int r = 0; r < NumReplicas(plan); ++r) mix(ReplicaSequences(plan, r));
  mix(static_cast<int64_t>(plan.left_out.size()));
  for (int rank : plan.left_out) mix(rank);
  mix(static_cast<int64_t>(plan.groups.size()));
  for (const PlanGroup& g : plan.groups) {
    mix(g.replica);
    mix(static_cast<int64_t>(g.ranks.size()));
    for (int r : g.ranks) mix(r);
    mix(static_cast<int64_t>(g.tokens.size()));
    for (const Range& t : g.tokens) {
      mix(t.begin);
      mix(t.end);
    }
    mix(static_cast<int64_t>(g.members.size()));
    for (const PlanMember& m : g.members) {
      mix(m.rank);
      mix(static_cast<int64_t>(m.tokens.size()));
      for (const Range& t : m.tokens) {
        mix(t.begin);
        mix(t.end);
      }
      mix(static_cast<int64_t>(m.heads.size()));
      for (int head : m.heads) mix(head);
    }
  }
  return h;
}

std::vector<int> KvHeadsOf(const std::vector<int>& heads, int num_heads, int num_kv_heads) {
  std::vector<int> kv;
  for (int head : heads) {
    const int g = KvHeadOf(head, num_heads, num_kv_heads);
    if (kv.empty() || kv.back() != g) kv.push_back(g);
  }
  std::sort(kv.begin(), kv.end());
  kv.erase(std::unique(kv.begin(), kv.end()), kv.end());
  return kv;
}

}  // namespace hexiseq
