#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "plan/plan.h"
#include "sched/baselines.h"
#include "sched/plan_state.h"
#include "sched/replica_search.h"
#include "sched/sched_test_util.h"
#include "sched/scheduler.h"
#include "sched/scheduler_internal.h"

namespace hexiseq {
namespace {

using sched_internal::BuildPlan;
using sched_internal::ExactDomainOptimum;
using sched_internal::ExactGrid;
using sched_internal::ExactTrainingOptimum;
using sched_internal::Layout;
using sched_internal::SnapPlanToExactDomain;

// A coarser grid than the default, so that the brute force stays at a few seconds; the test
// sequence lengths are multiples of 16 x 12.
constexpr ExactGrid kTestGrid{16, 12};

// A preset with few heads, so that the brute force below stays at a few thousand plans.
ModelSpec FewHeads(int heads, int kv_heads) {
  ModelSpec m = sched_test::Model("llama3.2-3b");
  m.name = "few-heads";
  m.heads = heads;
  m.kv_heads = kv_heads;
  return m;
}

// Every composition of `total` into `parts` parts of at least `min_part`.
void ForEachComposition(int total, int parts, int min_part,
                        const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> v(parts, 0);
  std::function<void(int, int)> rec = [&](int i, int left) {
    if (i == parts - 1) {
      if (left >= min_part) {
        v[i] = left;
        visit(v);
      }
      return;
    }
    for (int x = min_part; x + min_part * (parts - 1 - i) <= left; ++x) {
      v[i] = x;
      rec(i + 1, left - x);
    }
  };
  rec(0, total);
}

// Cuts `count` tokens starting `offset` tokens into the concatenation of `ranges`.
Ranges Slice(const Ranges& ranges, int64_t offset, int64_t count) {
  Ranges out;
  for (const Range& r : ranges) {
    const int64_t skip = std::min(offset, r.size());
    offset -= skip;
    const int64_t begin = r.begin + skip, end = std::min(r.end, begin + count);
    if (end <= begin) continue;
    out.push_back({begin, end});
    count -= end - begin;
  }
  return out;
}

struct BruteForce {
  PlanCost best;
  bool have = false;
  int64_t points = 0, infeasible = 0;
};

// One point of the brute force: groups in order (the last one idle when `idle_last`), group k
// with steps[k] chunks of S / (2 x group steps) at the front and as many at the back, members
// with member_steps[k][i] / member steps of the group's tokens and member_heads[k][i] heads.
Plan BruteForcePlan(const CostModel& model, const ExactGrid& grid,
                    const std::vector<std::vector<int>>& groups, bool idle_last,
                    const std::vector<int>& steps,
                    const std::vector<std::vector<int>>& member_steps,
                    const std::vector<std::vector<int>>& member_heads) {
  const int64_t seq = model.workload().seq_len;
  const int64_t chunk = seq / (2 * grid.group_steps);
  Plan plan = EmptyPlan(model, "brute");
  int64_t front = 0, back = seq;
  for (size_t k = 0; k < steps.size(); ++k) {
    const int64_t size = steps[k] * chunk;
    const Ranges tokens = Normalize({{front, front + size}, {back - size, back}});
    front += size;
    back -= size;
    std::vector<Ranges> member_tokens;
    std::vector<std::vector<int>> head_sets;
    int64_t offset = 0;
    int head = 0;
    for (size_t i = 0; i < groups[k].size(); ++i) {
      const int64_t count = 2 * size * member_steps[k][i] / grid.member_steps;
      member_tokens.push_back(Slice(tokens, offset, count));
      offset += count;
      std::vector<int> set(member_heads[k][i]);
      std::iota(set.begin(), set.end(), head);
      head += member_heads[k][i];
      head_sets.push_back(set);
    }
    AddGroup(plan, model.cluster(), groups[k], tokens, member_tokens, head_sets);
  }
  if (idle_last) AddIdleGroup(plan, model.cluster(), groups.back());
  return plan;
}

// Every plan of the one-replica domain over the world ranks `ranks` (every other rank left out),
// enumerated without symmetry or bounds: every permutation of the ranks cut into consecutive
// groups (members in permutation order), optionally the last group idle; group steps, member
// steps and heads as stated. REQUIRES: S a multiple of group steps x member steps (no rounding).
void ForEachDomainPlan(const CostModel& model, const ExactGrid& grid, std::vector<int> ranks,
                       const std::function<void(Plan&)>& visit) {
  const int n = static_cast<int>(ranks.size()), heads = model.model().heads;
  EXPECT_EQ(model.workload().seq_len % (grid.group_steps * grid.member_steps), 0);
  std::vector<int> left_out;
  for (int rank = 0; rank < model.cluster().num_ranks(); ++rank)
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) left_out.push_back(rank);
  std::sort(ranks.begin(), ranks.end());
  do {
    for (int cuts = 1; cuts <= n; ++cuts)
      ForEachComposition(n, cuts, 1, [&](const std::vector<int>& sizes) {
        std::vector<std::vector<int>> groups;
        int at = 0;
        for (int size : sizes) {
          groups.emplace_back(ranks.begin() + at, ranks.begin() + at + size);
          at += size;
        }
        for (int idle_last = 0; idle_last <= (cuts > 1 ? 1 : 0); ++idle_last) {
          const int active = cuts - idle_last;
          ForEachComposition(grid.group_steps, active, 1, [&](const std::vector<int>& steps) {
            std::vector<std::vector<int>> member_steps(active), member_heads(active);
            std::function<void(int)> choose = [&](int g) {  // member steps and heads per group
              if (g == active) {
                Plan plan = BruteForcePlan(model, grid, groups, idle_last, steps, member_steps,
                                           member_heads);
                plan.left_out = left_out;
                return visit(plan);
              }
              const int m = static_cast<int>(groups[g].size());
              ForEachComposition(grid.member_steps, m, 0, [&](const std::vector<int>& ms) {
                ForEachComposition(heads, m, 0, [&](const std::vector<int>& hs) {
                  member_steps[g] = ms;
                  member_heads[g] = hs;
                  choose(g + 1);
                });
              });
            };
            choose(0);
          });
        }
      });
  } while (std::next_permutation(ranks.begin(), ranks.end()));
}

// Scores one brute-force plan into `out` (validated first).
void ScoreInto(const CostModel& model, const Plan& plan, BruteForce& out) {
  auto valid = Validate(plan, model.cluster(), model.model());
  EXPECT_TRUE(valid) << (valid ? "" : valid.error().message);
  const PlanCost cost = model.Evaluate(plan);
  ++out.points;
  out.infeasible += !cost.feasible;
  if (cost.feasible && (!out.have || cost.iteration_seconds < out.best.iteration_seconds)) {
    out.best = cost;
    out.have = true;
  }
}

// The one-replica domain over every rank.
BruteForce BruteForceDomain(const CostModel& model, const ExactGrid& grid) {
  BruteForce out;
  std::vector<int> all(model.cluster().num_ranks());
  std::iota(all.begin(), all.end(), 0);
  ForEachDomainPlan(model, grid, all, [&](const Plan& plan) { ScoreInto(model, plan, out); });
  return out;
}

// Every assignment of `ranks` to replica labels 0..k-1 in restricted-growth form (a set
// partition each), with at most `max_blocks` blocks.
void ForEachReplicaPartition(
    const std::vector<int>& ranks, int max_blocks,
    const std::function<void(const std::vector<std::vector<int>>&)>& visit) {
  std::vector<std::vector<int>> blocks;
  std::function<void(size_t)> place = [&](size_t index) {
    if (index == ranks.size()) return visit(blocks);
    for (size_t block = 0; block <= blocks.size(); ++block) {
      if (block == blocks.size()) {
        if (static_cast<int>(blocks.size()) >= max_blocks) break;
        blocks.emplace_back();
      }
      blocks[block].push_back(ranks[index]);
      place(index + 1);
      blocks[block].pop_back();
      if (blocks[block].empty()) blocks.pop_back();
    }
  };
  place(0);
}

// The training domain over the joint space, scored as whole plans: every set of participating
// ranks, every partition of it into at most `batch` replicas, every split of the batch (each
// replica >= 1 sequence) and, together, every domain plan of every replica over its own ranks.
BruteForce BruteForceTraining(const CostModel& model, const ExactGrid& grid) {
  const int n = model.cluster().num_ranks(), batch = model.workload().batch;
  BruteForce out;
  for (int mask = 1; mask < (1 << n); ++mask) {
    std::vector<int> participants;
    for (int rank = 0; rank < n; ++rank)
      if (mask & (1 << rank)) participants.push_back(rank);
    ForEachReplicaPartition(participants, batch, [&](const std::vector<std::vector<int>>& blocks) {
      const int replicas = static_cast<int>(blocks.size());
      if (replicas == 1) {
        ForEachDomainPlan(model, grid, blocks[0], [&](const Plan& p) { ScoreInto(model, p, out); });
        return;
      }
      std::vector<std::vector<Plan>> options(replicas);
      for (int r = 0; r < replicas; ++r)
        ForEachDomainPlan(model, grid, blocks[r], [&](const Plan& p) { options[r].push_back(p); });
      ForEachComposition(batch, replicas, 1, [&](const std::vector<int>& split) {
        std::vector<Plan> chosen(replicas);
        std::function<void(int)> pick = [&](int r) {
          if (r == replicas) return ScoreInto(model, MergeReplicas(chosen), out);
          for (const Plan& option : options[r]) {
            chosen[r] = option;
            chosen[r].batch = split[r];
            pick(r + 1);
          }
        };
        pick(0);
      });
    });
  }
  return out;
}

// Tiny clusters: 2 and 3 ranks (two of them on one node in some), with and without memory
// binding. The exact search's domain optimum equals the brute force's, to the last digits.
TEST(ExactSearch, DomainOptimumEqualsBruteForce) {
  std::mt19937_64 rng(3);
  struct Case {
    int ranks;
    int64_t seq;
    double reserve;  // memory reserve: high values make memory bind
  };
  const Case cases[] = {{2, 24576, 0.1},  {3, 12288, 0.1}, {3, 49152, 0.1},
                        {3, 196608, 0.1}, {3, 98304, 0.6}, {2, 786432, 0.1}};
  int binding = 0, compared = 0;
  for (const Case& c : cases) {
    Cluster cluster = sched_test::RandomSmallCluster(rng, c.ranks);
    Workload w;
    w.seq_len = c.seq;
    w.memory_reserve = c.reserve;
    CostModel model(cluster, FewHeads(4, 2), w);
    const BruteForce brute = BruteForceDomain(model, kTestGrid);
    const auto exact = ExactDomainOptimum(model, {}, kTestGrid);
    ASSERT_TRUE(exact.complete);
    const bool exact_fits = exact.found && exact.cost.feasible;
    ASSERT_EQ(brute.have, exact_fits) << "seq " << c.seq << ", " << brute.points << " points";
    if (brute.infeasible > 0 && brute.have) ++binding;
    if (!brute.have) continue;
    ++compared;
    EXPECT_NEAR(exact.cost.iteration_seconds / brute.best.iteration_seconds, 1.0, 1e-12)
        << "seq " << c.seq;
    EXPECT_LT(exact.evaluated, brute.points);  // the bounds and the symmetry cut something
  }
  EXPECT_GE(compared, 3);
  EXPECT_GE(binding, 1);  // at least one case where the memory bound had work to do
}

// Two identical GPUs on one node and a third type: the symmetry between the identical pair
// (structures scored once per node pattern) loses nothing.
Cluster PairAndOne(const std::string& pair, const std::string& single) {
  Cluster c;
  c.name = "pair-and-one";
  for (auto [name, gpus] : {std::pair{pair, 2}, std::pair{single, 1}}) {
    NodeKind kind;
    kind.device = sched_test::Device(name);
    kind.count = 1;
    kind.gpus_per_node = gpus;
    kind.intra_node_bytes_per_second = 200e9;
    kind.nic_bytes_per_second = 12e9;
    kind.latency_seconds = 3e-6;
    c.kinds.push_back(kind);
  }
  c.Finalize();
  return c;
}

TEST(ExactSearch, DomainOptimumEqualsBruteForceWithIdenticalRanks) {
  for (auto [pair, single] : {std::pair{"A100-40G", "H100-SXM"}, std::pair{"L40S", "A800"}}) {
    Cluster cluster = PairAndOne(pair, single);
    Workload w;
    w.seq_len = 49152;
    CostModel model(cluster, FewHeads(4, 1), w);
    const BruteForce brute = BruteForceDomain(model, kTestGrid);
    const auto exact = ExactDomainOptimum(model, {}, kTestGrid);
    ASSERT_TRUE(brute.have);
    ASSERT_TRUE(exact.found);
    EXPECT_NEAR(exact.cost.iteration_seconds / brute.best.iteration_seconds, 1.0, 1e-12) << pair;
  }
}

// Replicas, left-out ranks and the batch split: on 2- and 3-GPU clusters at batch 2-4 under
// ZeRO-1 and ZeRO-3 (where the busiest replica's sequences set the sync rounds) and each
// recompute policy, the exact search's training optimum equals a brute force over the joint space
// (every participant set, replica partition, batch split and replica layouts together), to the
// last digits; with two identical GPUs on one node too.
TEST(ExactSearch, TrainingOptimumEqualsJointBruteForce) {
  std::mt19937_64 rng(11);
  struct Case {
    int ranks;
    int64_t seq;
    int batch, zero;
    Recompute recompute;
    double reserve;
  };
  const Case cases[] = {{2, 24576, 4, 3, Recompute::kFull, 0.1},
                        {3, 12288, 3, 3, Recompute::kNone, 0.1},
                        {3, 49152, 2, 1, Recompute::kSelective, 0.1},
                        {3, 98304, 3, 3, Recompute::kFull, 0.6},
                        {2, 196608, 3, 1, Recompute::kNone, 0.1}};
  int compared = 0, several = 0, left_out = 0;
  auto check = [&](const Cluster& cluster, const Case& c) {
    Workload w;
    w.seq_len = c.seq;
    w.batch = c.batch;
    w.zero_stage = c.zero;
    w.recompute = c.recompute;
    w.memory_reserve = c.reserve;
    CostModel model(cluster, FewHeads(4, 2), w);
    const BruteForce brute = BruteForceTraining(model, kTestGrid);
    const auto exact = sched_internal::ExactTrainingOptimum(model, {}, kTestGrid);
    ASSERT_TRUE(exact.complete);
    const bool exact_fits = exact.found && exact.best.feasible();
    ASSERT_EQ(brute.have, exact_fits) << "seq " << c.seq << ", " << brute.points << " points";
    if (!brute.have) return;
    ++compared;
    several += NumReplicas(exact.best.plan) > 1;
    left_out += !exact.best.plan.left_out.empty();
    ASSERT_TRUE(Validate(exact.best.plan, cluster, model.model()));
    EXPECT_NEAR(exact.best.cost.iteration_seconds / brute.best.iteration_seconds, 1.0, 1e-12)
        << "seq " << c.seq << " batch " << c.batch << " zero " << c.zero;
  };
  for (const Case& c : cases) check(sched_test::RandomSmallCluster(rng, c.ranks), c);
  check(PairAndOne("A100-40G", "H100-SXM"), {3, 49152, 3, 3, Recompute::kFull, 0.1});
  // Two GPUs of unequal speed under ZeRO-3, where the sync rounds (the busiest replica's
  // sequences) make the even split 2 + 2 beat the min-max split of the busy times (3 + 1, 44%
  // slower).
  check(MakeCluster({sched_test::Device("H100-SXM"), sched_test::Device("A100-SXM-80G")}, {1, 1}, 1,
                    10e9),
        {2, 12288, 4, 3, Recompute::kNone, 0.1});
  EXPECT_GE(compared, 4);
  EXPECT_GE(several, 1);   // some optimum has several replicas ...
  EXPECT_GE(left_out, 1);  // ... and some leaves a rank out
}

// The capped min-max split (the exact search's split for busy times linear in the sequences)
// against every split: the smallest slowest-replica time among the splits with every replica at
// most `cap` sequences.
TEST(ExactSearch, CappedMinMaxSplitIsTheBestSplitUnderTheCap) {
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<double> seconds(0.5, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int replicas = 1 + static_cast<int>(rng() % 3);
    const int batch = replicas + static_cast<int>(rng() % 7);
    const int cap = (batch + replicas - 1) / replicas + static_cast<int>(rng() % 3);
    std::vector<double> per_sequence(replicas);
    for (double& t : per_sequence) t = seconds(rng);
    auto slowest = [&](const std::vector<int>& split) {
      double worst = 0;
      for (int r = 0; r < replicas; ++r) worst = std::max(worst, split[r] * per_sequence[r]);
      return worst;
    };
    double best = std::numeric_limits<double>::infinity();
    ForEachComposition(batch, replicas, 1, [&](const std::vector<int>& split) {
      if (*std::max_element(split.begin(), split.end()) <= cap)
        best = std::min(best, slowest(split));
    });
    const std::vector<int> split =
        sched_internal::MinMaxBatchSplit(batch, per_sequence, per_sequence, cap);
    EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), batch);
    EXPECT_LE(*std::max_element(split.begin(), split.end()), cap);
    EXPECT_DOUBLE_EQ(slowest(split), best) << "trial " << trial;
  }
}

// Member 0 of group 0: memory >= (its tokens, no heads) + (no tokens, heads 0..h-1) - (neither),
// the exact search's memory bound.
void ExpectMemoryBound(const CostModel& model, const Plan& plan) {
  const PlanMember& real = plan.groups[0].members[0];
  auto memory_with = [&](int64_t tokens, int heads) {
    Plan probe = plan;
    PlanMember& member = probe.groups[0].members[0];
    member.tokens = tokens > 0 ? Ranges{{0, tokens}} : Ranges{};
    member.heads.resize(heads);
    std::iota(member.heads.begin(), member.heads.end(), 0);
    return model.Evaluate(probe).ranks[member.rank].memory_bytes;
  };
  const int64_t tokens = TotalTokens(real.tokens);
  const int heads = static_cast<int>(real.heads.size());
  const double bound = memory_with(tokens, 0) + memory_with(0, heads) - memory_with(0, 0);
  EXPECT_GE(model.Evaluate(plan).ranks[real.rank].memory_bytes, bound * (1 - 1e-12));
}

// The bounds rest on three properties of the cost model, checked here on random plans of the
// domain: the busy time (the iteration without the exposed sync) is no less than any rank's
// compute; for fixed group ranges a rank's linear seconds are proportional to its tokens and its
// attention seconds to its heads; its memory is model state + a token part + a head part
// (additive).
TEST(ExactSearch, CostModelPropertiesTheBoundsRelyOn) {
  std::mt19937_64 rng(9);
  Cluster cluster = sched_test::RandomSmallCluster(rng, 3);
  Workload w;
  w.seq_len = 131072;
  CostModel model(cluster, sched_test::Model("llama3-8b"), w);
  const auto structures = sched_internal::ExactStructures(cluster);
  const int heads = model.model().heads;
  int checked = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const auto& s = structures[rng() % structures.size()];
    const int k = static_cast<int>(s.groups.size());
    std::vector<int> steps(k, 1);
    for (int i = k; i < kTestGrid.group_steps; ++i) ++steps[rng() % k];
    std::vector<std::vector<int>> member(k), head(k);
    for (int g = 0; g < k; ++g) {
      const size_t m = s.groups[g].size();
      member[g].assign(m, 0);
      head[g].assign(m, 0);
      for (int i = 0; i < kTestGrid.member_steps; ++i) ++member[g][rng() % m];
      for (int i = 0; i < heads; ++i) ++head[g][rng() % m];
    }
    const Layout layout = sched_internal::ExactLayout(s, steps, w.seq_len, member, head);
    const Plan plan = BuildPlan(model, layout, "t", "");
    ASSERT_TRUE(Validate(plan, cluster, model.model()));
    const PlanCost cost = model.Evaluate(plan);
    // Same group ranges, member 0 of group 0 with other tokens and heads.
    Layout other = layout;
    auto& g0 = other[0];
    if (g0.ranks.size() < 2) continue;
    ++checked;
    const int64_t moved = g0.tokens[0] / 2;
    g0.tokens[0] -= moved;
    g0.tokens[1] += moved;
    const int moved_heads = g0.heads[0] / 2;
    g0.heads[0] -= moved_heads;
    g0.heads[1] += moved_heads;
    const PlanCost cost2 = model.Evaluate(BuildPlan(model, other, "t", ""));
    for (const RankCost& rc : cost.ranks)
      EXPECT_LE(rc.compute_seconds(), sched_internal::BusySeconds(cost) * (1 + 1e-12));
    ExpectMemoryBound(model, plan);
    const int rank = g0.ranks[0];
    const RankCost &a = cost.ranks[rank], &b = cost2.ranks[rank];
    if (layout[0].tokens[0] > 0 && g0.tokens[0] > 0) {
      EXPECT_NEAR(a.linear_seconds / layout[0].tokens[0], b.linear_seconds / g0.tokens[0],
                  1e-12 * a.linear_seconds / layout[0].tokens[0]);
    }
    if (layout[0].heads[0] > 0 && g0.heads[0] > 0) {
      EXPECT_NEAR(a.attention_seconds / layout[0].heads[0], b.attention_seconds / g0.heads[0],
                  1e-12 * a.attention_seconds / layout[0].heads[0]);
    }
  }
  EXPECT_GE(checked, 50);
}

// The scheduler's plan rounded onto a grid replica by replica, as a point of the domain.
PlanCost SnappedScheduler(const CostModel& model, const Plan& scheduled, const ExactGrid& grid) {
  const std::optional<Plan> snapped = SnapPlanToExactDomain(model, scheduled, grid);
  EXPECT_TRUE(snapped.has_value());
  if (!snapped) return PlanCost{};
  EXPECT_EQ(snapped->left_out, scheduled.left_out);
  EXPECT_EQ(NumReplicas(*snapped), NumReplicas(scheduled));
  EXPECT_TRUE(Validate(*snapped, model.cluster(), model.model()));
  return model.Evaluate(*snapped);
}

// Random small clusters, real models, batch 1-4 and random ZeRO stages: the scheduler's plan
// (replicas and left-out ranks included), rounded onto the (test) grid, is never better than the
// domain optimum over that grid.
TEST(ExactSearch, SchedulerOnTheGridNeverBeatsTheDomainOptimum) {
  std::mt19937_64 rng(17);
  const char* models[] = {"llama3.2-3b", "llama3-8b", "gpt-3b", "llama2-7b"};
  int compared = 0, several = 0;
  for (int c = 0; c < 12; ++c) {
    const int ranks = 2 + static_cast<int>(rng() % (kExactMaxRanks - 1));
    Cluster cluster = sched_test::RandomSmallCluster(rng, ranks);
    Workload w;
    w.seq_len = int64_t{1} << (14 + rng() % 3);
    w.batch = 1 + static_cast<int>(rng() % 4);
    w.zero_stage = 1 + static_cast<int>(rng() % 3);
    CostModel model(cluster, sched_test::Model(models[rng() % 4]), w);
    auto scheduled = Schedule(model.problem());
    const auto domain = ExactTrainingOptimum(model, {}, kTestGrid);
    if (!scheduled || !domain.found || !domain.best.feasible()) continue;
    const PlanCost snapped = SnappedScheduler(model, scheduled->plan, kTestGrid);
    if (!snapped.feasible) continue;
    ++compared;
    several += NumReplicas(scheduled->plan) > 1 || !scheduled->plan.left_out.empty();
    EXPECT_GE(snapped.iteration_seconds, domain.best.cost.iteration_seconds * (1 - 1e-12))
        << "case " << c;
  }
  EXPECT_GE(compared, 5);
  EXPECT_GE(several, 1);  // some scheduled plan has replicas or left-out ranks
}

// --strategy exact on the default domain: its plan validates, is no worse than the scheduler's
// plan rounded onto the grid (a domain point) nor than the best baseline, and is byte-identical
// between runs.
TEST(ExactSearch, ExactPlanValidatesAndIsDeterministic) {
  std::mt19937_64 rng(23);
  int compared = 0;
  for (int ranks : {2, 3, 3}) {
    Cluster cluster = sched_test::RandomSmallCluster(rng, ranks);
    Workload w;
    w.seq_len = 65536;
    w.batch = ranks;
    CostModel model(cluster, sched_test::Model("llama3.2-3b"), w);
    auto exact = ExactSearch(model.problem());
    auto scheduled = Schedule(model.problem());
    ASSERT_EQ(exact.has_value(), scheduled.has_value()) << ranks << " ranks";
    if (!exact) continue;
    ++compared;
    ASSERT_TRUE(Validate(exact->plan, cluster, model.model()));
    EXPECT_EQ(exact->strategy, "exact");
    const PlanCost snapped = SnappedScheduler(model, scheduled->plan, {});
    if (snapped.feasible) {
      EXPECT_LE(exact->cost.iteration_seconds, snapped.iteration_seconds);
    }
    double best_baseline = std::numeric_limits<double>::infinity();
    for (const StrategyResult& b : AllBaselines(model.problem()))
      if (b.feasible()) best_baseline = std::min(best_baseline, b.cost.iteration_seconds);
    EXPECT_LE(exact->cost.iteration_seconds, best_baseline * (1 + 1e-12));
    auto again = ExactSearch(model.problem());
    ASSERT_TRUE(again);
    EXPECT_EQ(PlanToJson(exact->plan), PlanToJson(again->plan)) << ranks << " ranks";
  }
  EXPECT_GE(compared, 2);
}

TEST(ExactSearch, RefusesClustersAboveItsDomain) {
  Cluster cluster = MakeCluster({sched_test::Device("H100-SXM")}, {1}, kExactMaxRanks + 1, 25e9);
  Workload w;
  w.seq_len = 65536;
  CostModel model(cluster, sched_test::Model("llama3-8b"), w);
  auto r = ExactSearch(model.problem());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotSupported);
  const std::string ranks = std::to_string(kExactMaxRanks + 1) + " ranks";
  EXPECT_NE(r.error().message.find(ranks), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("at most " + std::to_string(kExactMaxRanks)), std::string::npos)
      << r.error().message;
  EXPECT_NE(r.error().message.find("--strategy hexiseq"), std::string::npos) << r.error().message;
}

// Two cases of bench/sched/sched_optimality (700 1: cases 147 and 454) where the best plan puts
// ranks of different nodes in one group and leaves the third rank to another replica. The
// scheduler's topology-aligned candidates missed that membership (5.4% and 2.5% slower than the
// exact search); on clusters this small it now refines every membership and matches the exact
// search.
TEST(ExactSearch, SchedulerFindsCrossNodeMembershipsOnTinyClusters) {
  struct Case {
    const char* first_type;
    int first_count, first_per_node;
    double first_intra, first_nic;
    const char* second_type;
    int second_count, second_per_node;
    double second_intra, second_nic;
    const char* model;
    int64_t seq_len;
    int batch;
    Recompute recompute;
  };
  const Case cases[] = {
      {"L40S", 1, 1, 285.08e9, 22.23e9, "H20", 1, 2, 329.36e9, 21.72e9, "llama3-8b", 32768, 2,
       Recompute::kFull},
      {"H20", 2, 1, 269.38e9, 21.70e9, "L4", 1, 1, 326.44e9, 44.32e9, "gpt-3b", 65536, 3,
       Recompute::kSelective},
  };
  for (const Case& test_case : cases) {
    Cluster cluster;
    cluster.name = "tiny";
    for (int kind = 0; kind < 2; ++kind) {
      NodeKind node;
      node.device = sched_test::Device(kind == 0 ? test_case.first_type : test_case.second_type);
      node.count = kind == 0 ? test_case.first_count : test_case.second_count;
      node.gpus_per_node = kind == 0 ? test_case.first_per_node : test_case.second_per_node;
      node.intra_node_bytes_per_second = kind == 0 ? test_case.first_intra : test_case.second_intra;
      node.nic_bytes_per_second = kind == 0 ? test_case.first_nic : test_case.second_nic;
      node.latency_seconds = 3e-6;
      cluster.kinds.push_back(node);
    }
    cluster.Finalize();
    Workload workload;
    workload.seq_len = test_case.seq_len;
    workload.batch = test_case.batch;
    workload.zero_stage = 3;
    workload.recompute = test_case.recompute;
    const CostModel model(cluster, sched_test::Model(test_case.model), workload);
    auto scheduled = Schedule(model.problem());
    ScheduleOptions exact_options;
    exact_options.explain_infeasible = false;
    auto exact = ExactSearch(model.problem(), exact_options);
    ASSERT_TRUE(scheduled && exact) << test_case.model;
    ASSERT_TRUE(scheduled->feasible() && exact->feasible()) << test_case.model;
    EXPECT_LE(scheduled->cost.iteration_seconds, exact->cost.iteration_seconds * 1.001)
        << test_case.model << ": " << scheduled->config;
  }
}

// Case 722 of bench/sched/sched_optimality (770 1): an L40S and an MI300X, one GPU per node,
// llama3.2-3b at 64K, batch 3, ZeRO-3, no recompute. Nothing fits on either GPU alone; in one
// group both fit only in a narrow band where the L40S holds many heads and few tokens (12 heads
// and 256 tokens, 10 heads and 2032 tokens). From the speed-proportional start the descent
// lowers the L40S's tokens until both GPUs are equally full, above capacity; there every single
// move raises one of them, and only heads one way with tokens the other way goes on.
CostModel Case722() {
  Cluster cluster;
  cluster.name = "case-722";
  const std::pair<const char*, std::pair<double, double>> kinds[] = {{"L40S", {348e9, 46e9}},
                                                                     {"MI300X", {18.6e9, 19.8e9}}};
  for (const auto& [type, links] : kinds) {
    NodeKind node;
    node.device = sched_test::Device(type);
    node.count = node.gpus_per_node = 1;
    node.intra_node_bytes_per_second = links.first;
    node.nic_bytes_per_second = links.second;
    node.latency_seconds = 3e-6;
    cluster.kinds.push_back(node);
  }
  cluster.Finalize();
  Workload workload;
  workload.seq_len = 65536;
  workload.batch = 3;
  workload.zero_stage = 3;
  workload.recompute = Recompute::kNone;
  return CostModel(cluster, sched_test::Model("llama3.2-3b"), workload);
}

TEST(ExactSearch, DescentTradesHeadsForTokensWhereOnlyABalancedSplitFits) {
  const CostModel model = Case722();
  const int64_t seq = model.workload().seq_len, l40s_tokens = 4096;
  const int heads = model.model().heads, l40s_heads = 4;
  const Layout start = {{{0, 1},
                         seq / 2,
                         seq - seq / 2,
                         {l40s_tokens, seq - l40s_tokens},
                         {l40s_heads, heads - l40s_heads}}};
  sched_internal::PlanState state(model, start);
  ASSERT_FALSE(state.score().feasible);
  sched_internal::Descend(state, 5000, nullptr);
  EXPECT_TRUE(state.score().feasible) << "max memory fraction " << state.score().primary;
  EXPECT_TRUE(model.Evaluate(state.plan()).feasible);
}

TEST(ExactSearch, SchedulerFitsWhereOnlyABalancedSplitFits) {
  const CostModel model = Case722();
  auto scheduled = Schedule(model.problem());
  ScheduleOptions exact_options;
  exact_options.explain_infeasible = false;
  auto exact = ExactSearch(model.problem(), exact_options);
  ASSERT_TRUE(exact && exact->feasible());
  ASSERT_TRUE(scheduled) << scheduled.error().message;
  EXPECT_LE(scheduled->cost.iteration_seconds, exact->cost.iteration_seconds * 1.001)
      << scheduled->config;
}

// Same input, same plan, byte for byte: two runs, and one and two threads, of the scheduler on
// small heterogeneous clusters (the exact search's determinism is checked above).
TEST(Determinism, ScheduleGivesByteIdenticalPlans) {
  std::mt19937_64 rng(5);
  for (int c = 0; c < 3; ++c) {
    Cluster cluster = sched_test::RandomSmallCluster(rng, 3 + c);
    Workload w;
    w.seq_len = 65536;
    CostModel model(cluster, sched_test::Model("llama3-8b"), w);
    ScheduleOptions one, two;
    two.threads = 2;
    auto a = Schedule(model.problem(), one);
    auto b = Schedule(model.problem(), one);
    auto t = Schedule(model.problem(), two);
    ASSERT_EQ(a.has_value(), b.has_value());
    ASSERT_EQ(a.has_value(), t.has_value());
    if (!a) continue;
    EXPECT_EQ(PlanToJson(a->plan), PlanToJson(b->plan)) << "case " << c;
    EXPECT_EQ(PlanToJson(a->plan), PlanToJson(t->plan)) << "case " << c << ", 2 threads";
  }
}

// Cases 450 and 610 of bench/sched/sched_optimality (770 1), where the scheduler's plan beat
// `--strategy exact` off the grid. 450 (an A100-SXM-80G, an A800 and an H100, gpt-3b at 16K,
// batch 2, ZeRO-3, full recompute): one replica of three singleton groups whose front and back
// chunks differ, a shape the grid makes 108% slower, so it was never refined (7.9% before every
// feasible shape was). 610 (an H100, an A800 and an L40S, gpt-7b at 16K, batch 4, ZeRO-2,
// selective): a layout whose forward hides more of the exposed weight all-gather, which a
// replica laid out by busy time misses (6.6% before one-replica plans were descended whole).
// The cases are the bench's draws (sched_test::DrawSmallCase), replayed. Since ZeRO 2 charges a
// reduce-scatter per sequence, in case 610 the two searches stop at neighbouring 1-token optima
// 0.008% apart, the scheduler the faster (4 tokens moved; docs/performance.md, "Optimality"), as
// in the other off-grid cases; without the whole-plan descent the gap is 2.2% (1.3% and 1.9% at
// batch 2 and 3). So 610 is held to kNeighbourOptima, 450 to rounding.
TEST(ExactSearch, ExactSearchIsNoSlowerThanTheSchedulerOnBenchCases450And610) {
  constexpr double kRounding = 1e-6, kNeighbourOptima = 1e-3;
  struct Settings {
    int batch, zero_stage;
    Recompute recompute;
    double tolerance;
  };
  const std::pair<int, Settings> cases[] = {{450, {2, 3, Recompute::kFull, kRounding}},
                                            {610, {4, 2, Recompute::kSelective, kNeighbourOptima}}};
  std::mt19937_64 rng(1);
  int next = 0;
  for (const auto& [number, settings] : cases) {
    sched_test::SmallCase drawn;
    for (; next <= number; ++next) drawn = sched_test::DrawSmallCase(rng, kExactMaxRanks);
    ASSERT_EQ(drawn.cluster.num_ranks(), 3) << number;
    Workload workload;
    workload.seq_len = drawn.seq_len;
    workload.batch = settings.batch;
    workload.zero_stage = settings.zero_stage;
    workload.recompute = settings.recompute;
    const CostModel model(drawn.cluster, drawn.model, workload);
    auto scheduled = Schedule(model.problem());
    ScheduleOptions exact_options;
    exact_options.explain_infeasible = false;
    auto exact = ExactSearch(model.problem(), exact_options);
    ASSERT_TRUE(scheduled && exact) << number;
    ASSERT_TRUE(scheduled->feasible() && exact->feasible()) << number;
    EXPECT_LE(exact->cost.iteration_seconds,
              scheduled->cost.iteration_seconds * (1 + settings.tolerance))
        << "case " << number << " (" << drawn.model.name << " at " << drawn.seq_len
        << "): the scheduler's " << scheduled->config << " against " << exact->config;
  }
}

}  // namespace
}  // namespace hexiseq
