// Plan <-> JSON ("hexiseq.plan/1"), and the plan hash. The parser checks types and names the JSON
// path of any bad field; semantic invariants are Validate()'s job.
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "plan/plan.h"

namespace hexiseq {
namespace {

using nlohmann::json;

json RangesToJson(const Ranges& ranges) {
  json out = json::array();
  for (const Range& r : ranges) out.push_back(json::array({r.begin, r.end}));
  return out;
}

// Minimal typed accessors that name the JSON path in errors.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  Result<const json*> Field(const json& obj, const std::string& path, const char* key,
                            bool required = true) const {
    auto it = obj.find(key);
    if (it == obj.end()) {
      if (!required) return static_cast<const json*>(nullptr);
      return InvalidArgument(source_ + ": " + path + "." + key +
                             " is missing (rule: required by " + kPlanFormat + ")");
    }
    return &*it;
  }
  Result<int64_t> Int(const json& v, const std::string& path) const {
    if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())
      return static_cast<int64_t>(v.get<double>());
    return InvalidArgument(source_ + ": " + path + " = " + v.dump() + ": must be an integer");
  }
  Result<double> Number(const json& v, const std::string& path) const {
    if (v.is_number()) return v.get<double>();
    return InvalidArgument(source_ + ": " + path + " = " + v.dump() + ": must be a number");
  }
  Result<std::string> String(const json& v, const std::string& path) const {
    if (v.is_string()) return v.get<std::string>();
    return InvalidArgument(source_ + ": " + path + " = " + v.dump() + ": must be a string");
  }
  Result<Ranges> RangeList(const json& v, const std::string& path) const {
    if (!v.is_array())
      return InvalidArgument(source_ + ": " + path + " = " + v.dump().substr(0, 80) +
                             ": must be a list of [begin, end) pairs");
    Ranges out;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = path + "[" + std::to_string(i) + "]";
      if (!v[i].is_array() || v[i].size() != 2)
        return InvalidArgument(source_ + ": " + p + " = " + v[i].dump() +
                               ": must be a [begin, end) pair");
      auto b = Int(v[i][0], p + "[0]");
      if (!b) return std::unexpected(b.error());
      auto e = Int(v[i][1], p + "[1]");
      if (!e) return std::unexpected(e.error());
      out.push_back({*b, *e});
    }
    return out;
  }
  Result<std::vector<int>> IntList(const json& v, const std::string& path) const {
    if (!v.is_array())
      return InvalidArgument(source_ + ": " + path + " = " + v.dump().substr(0, 80) +
                             ": must be a list of integers");
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i) {
      auto x = Int(v[i], path + "[" + std::to_string(i) + "]");
      if (!x) return std::unexpected(x.error());
      out.push_back(static_cast<int>(*x));
    }
    return out;
  }

 private:
  std::string source_;
};

#define HEXISEQ_TRY(var, expr)                         \
  auto var##_result = (expr);                          \
  if (!var##_result) return std::unexpected(var##_result.error()); \
  auto var = *var##_result

Result<Plan> FromJson(const json& j, const std::string& source) {
  Reader rd(source);
  if (!j.is_object())
    return InvalidArgument(source + ": the plan must be a JSON object (rule: " + kPlanFormat +
                           ")");
  Plan plan;
  HEXISEQ_TRY(fmt_node, rd.Field(j, "plan", "format"));
  HEXISEQ_TRY(fmt, rd.String(*fmt_node, "plan.format"));
  if (fmt != kPlanFormat)
    return InvalidArgument(source + ": plan.format = \"" + fmt + "\": must be \"" + kPlanFormat +
                           "\" (hint: regenerate the plan with this version of hexiseq)");
  plan.format = fmt;
  auto get_string = [&](const char* key, std::string* out) -> Result<void> {
    HEXISEQ_TRY(node, rd.Field(j, "plan", key, false));
    if (!node) return {};
    HEXISEQ_TRY(s, rd.String(*node, std::string("plan.") + key));
    *out = s;
    return {};
  };
  auto get_int = [&](const char* key, bool required, int64_t* out) -> Result<void> {
    HEXISEQ_TRY(node, rd.Field(j, "plan", key, required));
    if (!node) return {};
    HEXISEQ_TRY(v, rd.Int(*node, std::string("plan.") + key));
    *out = v;
    return {};
  };
  for (auto [key, out] : {std::pair{"strategy", &plan.strategy}, {"config", &plan.config},
                          {"model", &plan.model}, {"recompute", &plan.recompute},
                          {"planner", &plan.planner}, {"input_hash", &plan.input_hash}}) {
    if (auto r = get_string(key, out); !r) return std::unexpected(r.error());
  }
  int64_t seq = 0, heads = 0, kv = 0, ranks = 0, batch = 1, zero = 3;
  for (auto [key, req, out] :
       {std::tuple{"seq_len", true, &seq}, {"num_heads", true, &heads},
        {"num_kv_heads", true, &kv}, {"num_ranks", true, &ranks}, {"batch", false, &batch},
        {"zero_stage", false, &zero}}) {
    if (auto r = get_int(key, req, out); !r) return std::unexpected(r.error());
  }
  plan.seq_len = seq;
  plan.num_heads = static_cast<int>(heads);
  plan.num_kv_heads = static_cast<int>(kv);
  plan.num_ranks = static_cast<int>(ranks);
  plan.batch = static_cast<int>(batch);
  plan.zero_stage = static_cast<int>(zero);

  HEXISEQ_TRY(groups, rd.Field(j, "plan", "groups"));
  if (!groups->is_array())
    return InvalidArgument(source + ": plan.groups must be a list of groups");
  for (size_t g = 0; g < groups->size(); ++g) {
    const json& gj = (*groups)[g];
    const std::string gp = "groups[" + std::to_string(g) + "]";
    if (!gj.is_object()) return InvalidArgument(source + ": " + gp + " must be an object");
    PlanGroup group;
    HEXISEQ_TRY(granks_node, rd.Field(gj, gp, "ranks"));
    HEXISEQ_TRY(granks, rd.IntList(*granks_node, gp + ".ranks"));
    group.ranks = granks;
    HEXISEQ_TRY(gtok_node, rd.Field(gj, gp, "tokens"));
    HEXISEQ_TRY(gtok, rd.RangeList(*gtok_node, gp + ".tokens"));
    group.tokens = gtok;
    HEXISEQ_TRY(members, rd.Field(gj, gp, "members"));
    if (!members->is_array())
      return InvalidArgument(source + ": " + gp + ".members must be a list");
    for (size_t m = 0; m < members->size(); ++m) {
      const json& mj = (*members)[m];
      const std::string mp = gp + ".members[" + std::to_string(m) + "]";
      if (!mj.is_object()) return InvalidArgument(source + ": " + mp + " must be an object");
      PlanMember member;
      HEXISEQ_TRY(rank_node, rd.Field(mj, mp, "rank"));
      HEXISEQ_TRY(rank, rd.Int(*rank_node, mp + ".rank"));
      member.rank = static_cast<int>(rank);
      HEXISEQ_TRY(dev_node, rd.Field(mj, mp, "device", false));
      if (dev_node) {
        HEXISEQ_TRY(dev, rd.String(*dev_node, mp + ".device"));
        member.device = dev;
      }
      HEXISEQ_TRY(node_node, rd.Field(mj, mp, "node", false));
      if (node_node) {
        HEXISEQ_TRY(node, rd.Int(*node_node, mp + ".node"));
        member.node = static_cast<int>(node);
      }
      HEXISEQ_TRY(mtok_node, rd.Field(mj, mp, "tokens"));
      HEXISEQ_TRY(mtok, rd.RangeList(*mtok_node, mp + ".tokens"));
      member.tokens = mtok;
      HEXISEQ_TRY(heads_node, rd.Field(mj, mp, "heads"));
      HEXISEQ_TRY(mheads, rd.IntList(*heads_node, mp + ".heads"));
      member.heads = mheads;
      group.members.push_back(std::move(member));
    }
    plan.groups.push_back(std::move(group));
  }

  HEXISEQ_TRY(pred, rd.Field(j, "plan", "predicted", false));
  if (pred && pred->is_object()) {
    PlanPrediction p;
    if (auto it = pred->find("iteration_seconds"); it != pred->end()) {
      HEXISEQ_TRY(v, rd.Number(*it, "predicted.iteration_seconds"));
      p.iteration_seconds = v;
    }
    if (auto it = pred->find("tokens_per_second"); it != pred->end()) {
      HEXISEQ_TRY(v, rd.Number(*it, "predicted.tokens_per_second"));
      p.tokens_per_second = v;
    }
    if (auto it = pred->find("ranks"); it != pred->end() && it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const json& rj = (*it)[i];
        if (!rj.is_object()) continue;
        RankPrediction rp;
        rp.rank = rj.value("rank", 0);
        rp.memory_bytes = rj.value("memory_bytes", 0.0);
        rp.memory_capacity_bytes = rj.value("memory_capacity_bytes", 0.0);
        rp.compute_seconds = rj.value("compute_seconds", 0.0);
        rp.exposed_comm_seconds = rj.value("exposed_comm_seconds", 0.0);
        rp.total_comm_seconds = rj.value("total_comm_seconds", 0.0);
        p.ranks.push_back(rp);
      }
    }
    plan.predicted = p;
  }
  return plan;
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
  j["zero_stage"] = plan.zero_stage;
  j["num_heads"] = plan.num_heads;
  j["num_kv_heads"] = plan.num_kv_heads;
  j["num_ranks"] = plan.num_ranks;
  json groups = json::array();
  for (const PlanGroup& g : plan.groups) {
    json gj;
    gj["ranks"] = g.ranks;
    gj["tokens"] = RangesToJson(g.tokens);
    json members = json::array();
    for (const PlanMember& m : g.members) {
      json mj;
      mj["rank"] = m.rank;
      mj["device"] = m.device;
      mj["node"] = m.node;
      mj["tokens"] = RangesToJson(m.tokens);
      mj["heads"] = m.heads;
      members.push_back(std::move(mj));
    }
    gj["members"] = std::move(members);
    groups.push_back(std::move(gj));
  }
  j["groups"] = std::move(groups);
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
  j["provenance"] = std::move(prov);
  return j.dump(indent) + "\n";
}

Result<Plan> ParsePlanJson(const std::string& text, const std::string& source_name) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    return InvalidArgument(source_name + ": the file is empty (rule: a " + kPlanFormat +
                           " JSON object; hint: write one with `hexiseq plan --format json -o`)");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgument(source_name + ": not valid JSON: " + e.what() +
                           " (hint: plans are written by `hexiseq plan --format json`)");
  }
  // Provenance lives under "provenance" on output; accept it there or at the top level.
  auto plan = FromJson(j, source_name);
  if (plan && j.is_object()) {
    if (auto it = j.find("provenance"); it != j.end() && it->is_object()) {
      plan->planner = it->value("planner", plan->planner);
      plan->input_hash = it->value("input_hash", plan->input_hash);
    }
  }
  return plan;
}

Result<Plan> LoadPlan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return IoError(path + ": cannot open the plan file (hint: check the path; plans are written "
                          "by `hexiseq plan --format json -o FILE`)");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePlanJson(ss.str(), path);
}

Result<void> SavePlan(const Plan& plan, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out) return IoError(path + ": cannot open for writing");
  out << PlanToJson(plan);
  if (!out) return IoError(path + ": write failed");
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
  mix(static_cast<int64_t>(plan.groups.size()));
  for (const PlanGroup& g : plan.groups) {
    mix(static_cast<int64_t>(g.ranks.size()));
    for (int r : g.ranks) mix(r);
    mix(static_cast<int64_t>(g.tokens.size()));
    for (const Range& t : g.tokens) { mix(t.begin); mix(t.end); }
    mix(static_cast<int64_t>(g.members.size()));
    for (const PlanMember& m : g.members) {
      mix(m.rank);
      mix(static_cast<int64_t>(m.tokens.size()));
      for (const Range& t : m.tokens) { mix(t.begin); mix(t.end); }
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
