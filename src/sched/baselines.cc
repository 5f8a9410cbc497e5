#include "sched/baselines.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "sched/data_parallel.h"
#include "sched/parallel.h"

namespace hexiseq {
namespace {

std::vector<int> AllHeads(int num_heads) {
  std::vector<int> heads(num_heads);
  std::iota(heads.begin(), heads.end(), 0);
  return heads;
}

// Ring over `active` ranks in the given order: one rank per group, uniform zigzag, all heads.
Plan RingPlan(const CostModel& model, const std::vector<int>& active, const std::vector<int>& idle,
              const std::string& strategy) {
  Plan plan = EmptyPlan(model, strategy);
  const int n = static_cast<int>(active.size());
  const std::vector<Ranges> shards = UniformZigzag(model.workload().seq_len, n);
  for (int i = 0; i < n; ++i)
    AddGroup(plan, model.cluster(), {active[i]}, shards[i], {shards[i]},
             {AllHeads(model.model().heads)});
  if (!idle.empty()) AddIdleGroup(plan, model.cluster(), idle);
  return plan;
}

// USP over `active` ranks: cp groups of hp ranks; hp_in_node picks consecutive ranks per group,
// otherwise strided ranks (CP neighbours share a node).
Plan UspPlan(const CostModel& model, const std::vector<int>& active, const std::vector<int>& idle,
             int cp, int hp, bool hp_in_node, const std::string& strategy) {
  Plan plan = EmptyPlan(model, strategy);
  const std::vector<Ranges> shards = UniformZigzag(model.workload().seq_len, cp);
  const std::vector<std::vector<int>> heads =
      SplitHeads(model.model().heads, model.model().kv_heads, std::vector<double>(hp, 1.0));
  for (int g = 0; g < cp; ++g) {
    std::vector<int> ranks;
    for (int j = 0; j < hp; ++j) ranks.push_back(active[hp_in_node ? g * hp + j : j * cp + g]);
    AddGroup(plan, model.cluster(), ranks, shards[g],
             SplitTokens(shards[g], std::vector<double>(hp, 1.0)), heads);
  }
  if (!idle.empty()) AddIdleGroup(plan, model.cluster(), idle);
  return plan;
}

std::string UspConfig(int cp, int hp, bool hp_in_node) {
  return "cp=" + std::to_string(cp) + " hp=" + std::to_string(hp) +
         (hp_in_node ? " hp-in-node" : " cp-in-node");
}

// The best symmetric plan (ring, ulysses or usp) over the given ranks.
StrategyResult BestUsp(const CostModel& model, const std::vector<int>& active,
                       const std::vector<int>& idle, const std::string& strategy,
                       const Deadline& deadline) {
  const int n = static_cast<int>(active.size());
  const int heads = model.model().heads;
  StrategyResult best;
  bool have = false;
  for (int hp = 1; hp <= n; ++hp) {
    if (n % hp != 0 || heads % hp != 0) continue;
    const int cp = n / hp;
    for (bool hp_in_node : {true, false}) {
      if ((hp == 1 || cp == 1) && !hp_in_node) continue;  // placements coincide
      if (deadline.Expired()) return have ? best : NotScored(strategy, deadline);
      StrategyResult r = Score(model, UspPlan(model, active, idle, cp, hp, hp_in_node, strategy),
                               UspConfig(cp, hp, hp_in_node));
      if (!have || Better(r, best)) {
        best = std::move(r);
        have = true;
      }
    }
  }
  if (!have) {
    best.strategy = strategy;
    best.applicable = false;
    best.reason = "no factorisation cp x hp = " + std::to_string(n) + " with hp dividing " +
                  std::to_string(heads) + " heads";
  }
  return best;
}

StrategyResult NotApplicable(const std::string& strategy, const std::string& reason) {
  StrategyResult r;
  r.strategy = strategy;
  r.applicable = false;
  r.reason = reason;
  r.cost.feasible = false;
  return r;
}

std::vector<int> Iota(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// The best USP factorisation of a replica, as `strategy`, checking `deadline` before each.
OneReplicaStrategy UspWithin(const std::string& strategy, const Deadline& deadline) {
  return [strategy, &deadline](const CostModel& replica) {
    return BestUsp(replica, Iota(replica.cluster().num_ranks()), {}, strategy, deadline);
  };
}

}  // namespace

StrategyResult NotScored(const std::string& strategy, const Deadline& deadline) {
  StrategyResult result = NotApplicable(strategy, NotScoredReason(deadline));
  result.timed_out = true;
  return result;
}

StrategyResult AsSearchResult(StrategyResult baseline, const std::string& strategy) {
  baseline.config = "baseline " + baseline.strategy +
                    (baseline.config.empty() ? "" : " (" + baseline.config + ")");
  baseline.strategy = baseline.plan.strategy = strategy;
  baseline.plan.config = baseline.config;
  return baseline;
}

TrainingOption OptionOf(const StrategyResult& result) {
  TrainingOption option;
  option.name = result.config;
  option.replicas = NumReplicas(result.plan);
  option.left_out = static_cast<int>(result.plan.left_out.size());
  option.zero_stage = result.plan.zero_stage;
  option.recompute = result.plan.recompute;
  option.iteration_seconds = result.cost.iteration_seconds;
  option.feasible = result.feasible();
  return option;
}

bool BaselineUsesEveryRank(const std::string& strategy) { return strategy != "subset"; }

bool Better(const StrategyResult& a, const StrategyResult& b) {
  if (a.feasible() != b.feasible()) return a.feasible();
  if (!a.applicable) return false;
  if (!b.applicable) return true;
  if (a.cost.iteration_seconds != b.cost.iteration_seconds)
    return a.cost.iteration_seconds < b.cost.iteration_seconds;
  return a.cost.max_memory_fraction < b.cost.max_memory_fraction;
}

std::vector<int64_t> LargestRemainder(int64_t total, const std::vector<double>& weights) {
  const size_t n = weights.size();
  std::vector<int64_t> out(n, 0);
  double sum = 0;
  for (double w : weights) sum += std::max(0.0, w);
  if (n == 0 || total <= 0) return out;
  if (sum <= 0) {
    for (size_t i = 0; i < n; ++i)
      out[i] = total / static_cast<int64_t>(n) +
               (static_cast<int64_t>(i) < total % static_cast<int64_t>(n));
    return out;
  }
  thread_local std::vector<std::pair<double, size_t>> rest;  // storage kept across calls
  rest.clear();
  int64_t assigned = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = static_cast<double>(total) * std::max(0.0, weights[i]) / sum;
    out[i] = static_cast<int64_t>(std::floor(exact));
    assigned += out[i];
    if (weights[i] > 0) rest.push_back({exact - static_cast<double>(out[i]), i});
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; assigned < total; k = (k + 1) % rest.size(), ++assigned) ++out[rest[k].second];
  for (size_t i = 0; assigned > total; i = (i + 1) % n)  // floating overshoot (rare)
    if (out[i] > 0) {
      --out[i];
      --assigned;
    }
  return out;
}

std::vector<Ranges> ZigzagSplit(int64_t seq_len, const std::vector<double>& weights) {
  // A mirrored pair [a, a + x) and [S - a - y, S - a) with x == y does x (S + 1) causal work
  // wherever it sits, so equal head and tail sizes proportional to the weights balance the work.
  const int64_t front_total = seq_len / 2, back_total = seq_len - front_total;
  const std::vector<int64_t> front = LargestRemainder(front_total, weights);
  const std::vector<int64_t> back = LargestRemainder(back_total, weights);
  std::vector<Ranges> out(weights.size());
  int64_t head = 0, tail = seq_len;
  for (size_t k = 0; k < weights.size(); ++k) {
    Ranges r;
    if (front[k] > 0) r.push_back({head, head + front[k]});
    if (back[k] > 0) r.push_back({tail - back[k], tail});
    head += front[k];
    tail -= back[k];
    out[k] = Normalize(r);
  }
  return out;
}

std::vector<Ranges> UniformZigzag(int64_t seq_len, int parts) {
  return ZigzagSplit(seq_len, std::vector<double>(parts, 1.0));
}

std::vector<Ranges> SplitTokens(const Ranges& group_tokens, const std::vector<double>& weights) {
  const std::vector<int64_t> counts = LargestRemainder(TotalTokens(group_tokens), weights);
  std::vector<Ranges> out;
  int64_t offset = 0;
  for (int64_t c : counts) {
    out.push_back(SliceByOffset(group_tokens, offset, c));
    offset += c;
  }
  return out;
}

std::vector<int64_t> SplitHeadCounts(int num_heads, int num_kv_heads,
                                     const std::vector<double>& weights) {
  const size_t n = weights.size();
  const int per_kv = num_heads / num_kv_heads;
  double sum = 0;
  for (double w : weights) sum += std::max(0.0, w);
  std::vector<double> target(n);
  for (size_t i = 0; i < n; ++i)
    target[i] = sum > 0 ? num_heads * std::max(0.0, weights[i]) / sum : double(num_heads) / n;
  // KV-aligned split: whole KV groups by largest remainder. Keep it when every member is within
  // half a KV group of its share (as close as rounding allows); otherwise split single heads.
  std::vector<int64_t> counts = LargestRemainder(num_kv_heads, target);
  bool aligned_ok = true;
  for (size_t i = 0; i < n; ++i) {
    counts[i] *= per_kv;
    if (std::abs(counts[i] - target[i]) > 0.5 * per_kv + 1e-9) aligned_ok = false;
  }
  if (!aligned_ok) counts = LargestRemainder(num_heads, target);
  return counts;
}

std::vector<std::vector<int>> SplitHeads(int num_heads, int num_kv_heads,
                                         const std::vector<double>& weights) {
  const std::vector<int64_t> counts = SplitHeadCounts(num_heads, num_kv_heads, weights);
  std::vector<std::vector<int>> out(counts.size());
  int head = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    out[i].resize(counts[i]);
    std::iota(out[i].begin(), out[i].end(), head);
    head += static_cast<int>(counts[i]);
  }
  return out;
}

Plan EmptyPlan(const CostModel& model, const std::string& strategy) {
  Plan plan;
  plan.strategy = strategy;
  plan.model = model.model().name;
  plan.seq_len = model.workload().seq_len;
  plan.batch = model.workload().batch;
  plan.recompute = RecomputeName(model.workload().recompute);
  plan.dtype = DtypeName(model.workload().bytes_per_element);
  plan.zero_stage = model.workload().zero_stage;
  plan.num_heads = model.model().heads;
  plan.num_kv_heads = model.model().kv_heads;
  plan.num_ranks = model.cluster().num_ranks();
  plan.planner = "hexiseq 0.1.0";
  plan.input_hash = model.InputHash();
  return plan;
}

void AddGroup(Plan& plan, const Cluster& cluster, const std::vector<int>& ranks,
              const Ranges& group_tokens, const std::vector<Ranges>& member_tokens,
              const std::vector<std::vector<int>>& member_heads) {
  PlanGroup group;
  group.ranks = ranks;
  group.tokens = Normalize(group_tokens);
  const bool idle = group.tokens.empty();  // a group without tokens holds no heads
  for (size_t i = 0; i < ranks.size(); ++i) {
    PlanMember m;
    m.rank = ranks[i];
    m.device = cluster.device(ranks[i]).name;
    m.node = cluster.ranks[ranks[i]].node;
    m.tokens = i < member_tokens.size() ? Normalize(member_tokens[i]) : Ranges{};
    if (!idle && i < member_heads.size()) m.heads = member_heads[i];
    std::sort(m.heads.begin(), m.heads.end());
    group.members.push_back(std::move(m));
  }
  plan.groups.push_back(std::move(group));
}

void AddIdleGroup(Plan& plan, const Cluster& cluster, const std::vector<int>& ranks) {
  AddGroup(plan, cluster, ranks, {}, {}, {});
}

StrategyResult Score(const CostModel& model, Plan plan, const std::string& config) {
  StrategyResult r;
  r.strategy = plan.strategy;
  r.config = config;
  plan.config = config;
  r.cost = model.Evaluate(plan);
  AttachPrediction(plan, r.cost);
  r.plan = std::move(plan);
  if (!r.cost.feasible) r.reason = "infeasible: " + r.cost.infeasible_reason;
  return r;
}

StrategyResult RingOneReplica(const CostModel& model) {
  const int n = model.cluster().num_ranks();
  // Rank order keeps each node's ranks adjacent, so the ring crosses the slow links least; the
  // alternative interleaves nodes. Keep the better.
  StrategyResult best =
      Score(model, RingPlan(model, Iota(n), {}, "ring"), "cp=" + std::to_string(n));
  std::vector<int> by_local;
  const Cluster& c = model.cluster();
  for (int local = 0;; ++local) {
    bool any = false;
    for (const NodeInfo& node : c.nodes)
      if (local < node.num_ranks) {
        by_local.push_back(node.first_rank + local);
        any = true;
      }
    if (!any) break;
  }
  if (c.nodes.size() > 1) {
    StrategyResult alt = Score(model, RingPlan(model, by_local, {}, "ring"),
                               "cp=" + std::to_string(n) + " interleaved");
    if (Better(alt, best)) best = std::move(alt);
  }
  return best;
}

StrategyResult UlyssesOneReplica(const CostModel& model) {
  const int n = model.cluster().num_ranks();
  const int heads = model.model().heads;
  if (heads % n != 0)
    return NotApplicable("ulysses", std::to_string(heads) + " heads do not divide over " +
                                        std::to_string(n) + " ranks");
  Plan plan = UspPlan(model, Iota(n), {}, 1, n, true, "ulysses");
  std::string config = "hp=" + std::to_string(n);
  if (n > model.model().kv_heads) config += " kv-replicated";
  return Score(model, std::move(plan), config);
}

StrategyResult UspOneReplica(const CostModel& model) {
  return BestUsp(model, Iota(model.cluster().num_ranks()), {}, "usp", Deadline{});
}

StrategyResult RingBaseline(const Problem& problem, const Deadline& deadline) {
  const CostModel model(problem);
  return BestDataParallel(model, Iota(model.cluster().num_ranks()), "ring", RingOneReplica,
                          deadline);
}

StrategyResult UlyssesBaseline(const Problem& problem, const Deadline& deadline) {
  const CostModel model(problem);
  return BestDataParallel(model, Iota(model.cluster().num_ranks()), "ulysses", UlyssesOneReplica,
                          deadline);
}

StrategyResult UspBaseline(const Problem& problem, const Deadline& deadline) {
  const CostModel model(problem);
  return BestDataParallel(model, Iota(model.cluster().num_ranks()), "usp",
                          UspWithin("usp", deadline), deadline);
}

namespace {

// Re-splits of hetero-ring by the rates at each rank's shard (rate curves only).
constexpr int kRateCurveRounds = 3;

bool HasRateCurves(const Cluster& cluster) {
  return std::any_of(cluster.kinds.begin(), cluster.kinds.end(),
                     [](const NodeKind& kind) { return !kind.device.rate_curve.empty(); });
}

}  // namespace

StrategyResult HeteroRingBaseline(const Problem& problem, const Deadline& deadline) {
  const CostModel model(problem);
  const Cluster& c = model.cluster();
  const int n = c.num_ranks();
  std::vector<double> weights(n);
  for (int r = 0; r < n; ++r) weights[r] = c.device(r).AttentionFlops();
  auto build = [&](const std::vector<double>& w) {
    Plan plan = EmptyPlan(model, "hetero-ring");
    const std::vector<Ranges> shards = ZigzagSplit(model.workload().seq_len, w);
    for (int r = 0; r < n; ++r)
      AddGroup(plan, c, {r}, shards[r], {shards[r]}, {AllHeads(model.model().heads)});
    return plan;
  };
  StrategyResult best = Score(model, build(weights), "speed-proportional");
  // With calibrated rate curves a rank's speed depends on its shard: split again by each rank's
  // rate at the shard the last split gave it, a few rounds, keeping the fastest plan.
  std::vector<double> rated = weights;
  const int rate_curve_rounds = HasRateCurves(c) ? kRateCurveRounds : 0;
  for (int round = 0; round < rate_curve_rounds && !deadline.Expired(); ++round) {
    const std::vector<Ranges> shards = ZigzagSplit(model.workload().seq_len, rated);
    for (int r = 0; r < n; ++r) rated[r] = model.AttentionRate(r, TotalTokens(shards[r]));
    StrategyResult next = Score(model, build(rated), "speed-proportional at each rank's shard");
    if (next.cost.feasible && next.cost.iteration_seconds < best.cost.iteration_seconds) {
      best = std::move(next);
      weights = rated;
    }
  }
  // Memory cap: shrink the shards of ranks over capacity (activations grow with tokens) and
  // hand the rest to the others; a few rounds converge.
  for (int round = 0; round < 8 && !best.cost.feasible && !deadline.Expired(); ++round) {
    bool changed = false;
    for (int r = 0; r < n; ++r) {
      const RankCost& rc = best.cost.ranks[r];
      if (rc.memory_bytes <= rc.memory_capacity_bytes) continue;
      const MemoryBreakdown& m = rc.memory;
      const double fixed = m.weights + m.gradients + m.optimizer + m.logits;
      const double variable = rc.memory_bytes - fixed;
      const double room = rc.memory_capacity_bytes - fixed;
      weights[r] *= room > 0 && variable > 0 ? std::max(0.0, 0.97 * room / variable) : 0.0;
      changed = true;
    }
    if (!changed) break;
    if (std::all_of(weights.begin(), weights.end(), [](double w) { return w <= 0; })) break;
    StrategyResult next = Score(model, build(weights), "speed-proportional memory-capped");
    best = std::move(next);
  }
  return best;
}

StrategyResult SubsetBaseline(const Problem& problem, const Deadline& deadline) {
  const CostModel model(problem);
  const Cluster& c = model.cluster();
  // Device types by effective speed, fastest first.
  std::map<std::string, double> speed;
  for (int r = 0; r < c.num_ranks(); ++r)
    speed[c.device(r).name] = c.device(r).GemmFlops() + c.device(r).AttentionFlops();
  std::vector<std::pair<double, std::string>> types;
  for (const auto& [name, s] : speed) types.push_back({-s, name});
  std::sort(types.begin(), types.end());
  if (types.size() < 2)
    return NotApplicable("subset", "one device type: the subset is the whole cluster");
  const OneReplicaStrategy usp = UspWithin("subset", deadline);
  StrategyResult best;
  bool have = false;
  for (size_t keep = 1; keep < types.size() && !deadline.Expired(); ++keep) {
    std::vector<int> active;  // the kept types; the rest are left out
    for (int r = 0; r < c.num_ranks(); ++r)
      for (size_t t = 0; t < keep; ++t)
        if (c.device(r).name == types[t].second) active.push_back(r);
    std::sort(active.begin(), active.end());
    std::string types_text;
    for (size_t t = 0; t < keep; ++t) types_text += (t ? "+" : "") + types[t].second;
    std::vector<int> rest;  // the other types
    for (int rank = 0; rank < c.num_ranks(); ++rank)
      if (!std::binary_search(active.begin(), active.end(), rank)) rest.push_back(rank);
    // With the rest left out (no state, no sync; replicas possible) or, one replica, with the
    // rest idle: they then hold a share of the ZeRO-sharded state and take part in the sync.
    std::vector<StrategyResult> candidates = {
        BestDataParallel(model, active, "subset", usp, deadline),
        BestUsp(model, active, rest, "subset", deadline)};
    candidates.back().config += " rest-idle";
    for (StrategyResult& r : candidates) {
      if (!r.applicable) continue;
      r.config = types_text + " " + r.config;
      r.plan.config = r.config;
      if (!have || Better(r, best)) {
        best = std::move(r);
        have = true;
      }
    }
  }
  if (!have && deadline.CutShort()) return NotScored("subset", deadline);
  if (!have) return NotApplicable("subset", "no symmetric plan fits the heads on any subset");
  return best;
}

StrategyResult ProportionalPlan(const CostModel& model) {
  const Cluster& c = model.cluster();
  Plan plan = EmptyPlan(model, "hexiseq");
  std::vector<double> group_weights;
  for (const NodeInfo& node : c.nodes) {
    double w = 0;
    for (int r = node.first_rank; r < node.first_rank + node.num_ranks; ++r)
      w += c.device(r).AttentionFlops();
    group_weights.push_back(w);
  }
  const std::vector<Ranges> shards = ZigzagSplit(model.workload().seq_len, group_weights);
  for (size_t g = 0; g < c.nodes.size(); ++g) {
    const NodeInfo& node = c.nodes[g];
    std::vector<int> ranks;
    std::vector<double> gemm, attn;
    for (int r = node.first_rank; r < node.first_rank + node.num_ranks; ++r) {
      ranks.push_back(r);
      gemm.push_back(c.device(r).GemmFlops());
      attn.push_back(c.device(r).AttentionFlops());
    }
    AddGroup(plan, c, ranks, shards[g], SplitTokens(shards[g], gemm),
             SplitHeads(model.model().heads, model.model().kv_heads, attn));
  }
  return Score(model, std::move(plan), "groups=nodes proportional");
}

std::vector<StrategyResult> AllBaselines(const Problem& problem, const Deadline& deadline,
                                         int threads) {
  using Baseline = StrategyResult (*)(const Problem&, const Deadline&);
  const std::pair<const char*, Baseline> baselines[] = {{"ring", RingBaseline},
                                                        {"ulysses", UlyssesBaseline},
                                                        {"usp", UspBaseline},
                                                        {"hetero-ring", HeteroRingBaseline},
                                                        {"subset", SubsetBaseline}};
  // Started longest first (subset, then the data-parallel ones), so that threads finish together.
  constexpr size_t kStartOrder[] = {4, 0, 2, 1, 3};
  static_assert(std::size(kStartOrder) == std::size(baselines));
  std::vector<StrategyResult> out(std::size(baselines));
  ParallelFor(threads, out.size(), [&](size_t item) {
    const size_t index = kStartOrder[item];
    const auto& [name, baseline] = baselines[index];
    out[index] = deadline.Expired() ? NotScored(name, deadline) : baseline(problem, deadline);
  });
  return out;
}

}  // namespace hexiseq
