// The exact search (strategy "exact") over training shapes: which ranks take part (the others are
// left out: no state, no gradient sync), how they are cut into data-parallel replicas and how the
// batch is split among them; each replica laid out by the one-replica domain optimum of its
// sub-cluster (exact_search.cc), then refined outside the grid.
//
// Why per-replica optima compose. With the participants and their partition fixed:
//  - a replica's busy time with b sequences is b times its busy time with one, and its memory does
//    not depend on b (sequences run one after another); the rest of the plan reaches it only
//    through the number of participants ZeRO shards over (ReplicaCostModel);
//  - the iteration is the slowest replica's busy time X plus the exposed gradient sync, which
//    depends on the participants, X, (ZeRO >= 2) the sequences M of the busiest replica and (ZeRO
//    0-2) when the last replica starts its last backward (ReplicasSyncWindowSeconds) and (ZeRO
//    1-2) the shortest forward (ReplicasForwardWindowSeconds); the
//    iteration never falls when X or M grows; the optimizer step after it depends on the
//    participants only (CostModel::OptimizerStepSeconds). Under ZeRO-3, or where the window hides
//    the sync, that is all; at ZeRO 0-2 with the sync exposed, a replica layout with a longer busy
//    time but a shorter backward opening or (ZeRO 1-2, the all-gather's window) a longer forward
//    could expose less of it, and is not looked for.
// So each replica's layout minimises its one-sequence busy time, and for each bound M on a
// replica's sequences the capped min-max split (MinMaxBatchSplit) minimises X: every M is tried
// at ZeRO >= 2 (CandidateBatchSplits), only M = batch otherwise. tests/sched/exact_search_test.cc
// checks the result against a brute force over the joint space (every left-out set, replica
// partition, batch split and every replica's domain points together, scored as whole plans).
//
// Identical sub-clusters (same devices, links and sharding) are searched once. Refinement: the
// replicas of every feasible shape (each sub-cluster once) are refined by the class-level
// sequence search and the 1-token descent from their domain optimum, its runners-up, every
// structure balanced off the grid (StructureStarts) and each baseline of the sub-cluster (kept
// only where the busy time falls); then the baseline plans themselves (data-parallel ones
// included) compete, so the result is never worse than the domain optimum nor than any baseline.
// A one-replica shape's whole plan is then descended on the world model (DescendWholePlan).
// Refining only the shapes near the best one missed plans that the grid's mirrored chunks make
// slow and that are fastest off the grid (docs/performance.md, "Optimality").
#include <algorithm>
#include <deque>
#include <limits>
#include <optional>

#include "sched/replica_search.h"
#include "sched/scheduler.h"
#include "sched/subcluster.h"

namespace hexiseq {
namespace sched_internal {
namespace {

constexpr int64_t kExactDescentTrials = 20000;   // refinement outside the domain, per start
constexpr int kExactClassEvaluations = 200;      // class-level sequence search before each descent
constexpr int64_t kStructureStartTrials = 1000;  // short descent of each structure start
constexpr int kBalanceRounds = 2;                // re-fits of BalanceTokens' time model

// One replica's optimum: a sub-cluster searched at one sharding, one sequence.
struct ReplicaOptimum {
  Cluster cluster;  // the sub-cluster (ranks 0..n-1)
  int shard_ranks = 0;
  CostModel model;  // ReplicaCostModel: one sequence, ZeRO over shard_ranks
  ExactDomainResult domain;
  Layout layout;  // the best found: the domain optimum, refined once `refined`
  PlanCost cost;  // of `layout` on `model`
  bool refined = false;
};

// The replica optima, each searched once per distinct (sub-cluster, sharding).
class ReplicaOptima {
 public:
  ReplicaOptima(const CostModel& world, const ScheduleOptions& options, const ExactGrid& grid)
      : world_(world), options_(options), grid_(grid) {}

  ReplicaOptimum& Get(const SubCluster& sub, int shard_ranks) {
    for (ReplicaOptimum& entry : cache_)
      if (entry.shard_ranks == shard_ranks && entry.cluster == sub.cluster) return entry;
    CostModel model = ReplicaCostModel(world_, sub, 1, shard_ranks);
    ExactDomainResult domain = ExactDomainOptimum(model, options_, grid_);
    evaluated_ += domain.evaluated;
    complete_ = complete_ && domain.complete;
    Layout layout = domain.layout;
    const PlanCost cost = domain.cost;
    cache_.push_back(
        {sub.cluster, shard_ranks, std::move(model), std::move(domain), std::move(layout), cost});
    return cache_.back();
  }
  int64_t evaluated() const { return evaluated_; }
  bool complete() const { return complete_; }

 private:
  const CostModel& world_;
  const ScheduleOptions& options_;
  const ExactGrid grid_;
  std::deque<ReplicaOptimum> cache_;  // stable references
  int64_t evaluated_ = 0;
  bool complete_ = true;
};

// A training shape: the world ranks of each replica (sorted); the other ranks are left out.
struct Shape {
  std::vector<SubCluster> subs;
  std::vector<ReplicaOptimum*> optima;
  StrategyResult result;  // the shape at its best batch split, scored on the world
};

std::string RankList(const std::vector<int>& ranks) {
  std::string text = "[";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i > 0 ? "," : "") + std::to_string(ranks[i]);
  return text + "]";
}

// The whole plan of `shape` with `split`, scored on the world.
StrategyResult ScoreSplit(const CostModel& world, const Shape& shape, const std::vector<int>& split,
                          const std::string& config) {
  std::vector<ReplicaPart> parts;
  for (size_t replica = 0; replica < shape.subs.size(); ++replica) {
    const ReplicaOptimum& optimum = *shape.optima[replica];
    parts.push_back({&shape.subs[replica], BuildPlan(optimum.model, optimum.layout, "exact", ""),
                     split[replica]});
  }
  return Score(world, AssembleReplicas(world, parts, "exact"), config);
}

// The shape at its best batch split (see the file comment); its result stays infeasible when a
// replica has no plan that fits.
void ScoreShape(const CostModel& world, Shape& shape, const std::string& config) {
  const int batch = world.workload().batch;
  std::vector<double> per_sequence;
  for (const ReplicaOptimum* optimum : shape.optima)
    per_sequence.push_back(BusySeconds(optimum->cost));
  bool have = false;
  for (const std::vector<int>& split :
       CandidateBatchSplits(batch, per_sequence, per_sequence, world.SyncsEverySequence(), true)) {
    StrategyResult result = ScoreSplit(world, shape, split, config);
    if (!have || Better(result, shape.result)) shape.result = std::move(result);
    have = true;
  }
}

std::string ShapeName(const Cluster& world, const std::vector<std::vector<int>>& replicas) {
  std::string name;
  std::vector<bool> in(world.num_ranks(), false);
  for (const std::vector<int>& replica : replicas) {
    name += RankList(replica);
    for (int rank : replica) in[rank] = true;
  }
  std::vector<int> left_out;
  for (int rank = 0; rank < world.num_ranks(); ++rank)
    if (!in[rank]) left_out.push_back(rank);
  return "replicas " + name + (left_out.empty() ? "" : " left out " + RankList(left_out));
}

// Starts off the grid for structures whose grid points are all far from the optimum (where
// memory binds, the grid's mirrored chunks and 1/24 member steps can miss by 20%): every
// structure of the domain with its tokens balanced by the fitted group rates (BalanceTokens from
// the compute-proportional split), after a short descent; best first.
std::vector<Layout> StructureStarts(const CostModel& model, const Clock& clock) {
  std::vector<std::pair<PlanCost, Layout>> scored;
  const int64_t seq = model.workload().seq_len;
  for (const Structure& structure : ExactStructures(model.cluster())) {
    if (clock.Expired()) break;
    const std::vector<int64_t> tokens = BalanceTokens(
        model, structure, LargestRemainder(seq, RateWeights(model, structure)), kBalanceRounds);
    PlanState state(model, MakeLayout(model, structure, tokens));
    Descend(state, kStructureStartTrials, [&] { return clock.Expired(); });
    scored.emplace_back(model.Evaluate(BuildPlan(model, state.layout(), "exact", "")),
                        state.layout());
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return BusyBetter(a.first, b.first); });
  std::vector<Layout> starts;
  for (auto& [cost, layout] : scored) starts.push_back(std::move(layout));
  return starts;
}

// Descent outside the grid from every start; the replica keeps the layout with the least busy
// time (full re-score; the descent's own objective is the replica's iteration).
void RefineReplica(ReplicaOptimum& optimum, const Clock& clock) {
  if (optimum.refined) return;
  optimum.refined = true;
  const CostModel& model = optimum.model;
  std::vector<Layout> starts = {optimum.domain.layout};
  starts.insert(starts.end(), optimum.domain.runners_up.begin(), optimum.domain.runners_up.end());
  for (Layout& start : StructureStarts(model, clock)) starts.push_back(std::move(start));
  for (const StrategyResult& baseline : AllBaselines(model.problem(), clock)) {
    Layout layout;
    if (baseline.applicable && LayoutFromPlan(baseline.plan, layout))
      starts.push_back(std::move(layout));
  }
  for (Layout& start : starts) {
    if (clock.Expired()) break;
    PlanState state(model, ClassSearch(model, std::move(start), kExactClassEvaluations, clock));
    Descend(state, kExactDescentTrials, [&] { return clock.Expired(); });
    const PlanCost cost = model.Evaluate(BuildPlan(model, state.layout(), "exact", ""));
    if (BusyBetter(cost, optimum.cost)) {
      optimum.cost = cost;
      optimum.layout = state.layout();
    }
  }
}

// A one-replica shape's plan is the whole plan: descended once more on the world model, whose
// objective is the iteration itself (a replica is laid out by its busy time, which leaves out
// how much of the gradient sync its backward and forward hide); kept where it is better.
void DescendWholePlan(const CostModel& world, Shape& shape, const Clock& clock) {
  Layout layout;
  if (shape.subs.size() != 1 || !shape.result.feasible() ||
      !LayoutFromPlan(shape.result.plan, layout))
    return;
  PlanState state(world, ClassSearch(world, std::move(layout), kExactClassEvaluations, clock));
  Descend(state, kExactDescentTrials, [&] { return clock.Expired(); });
  StrategyResult result = Score(world, BuildPlan(world, state.layout(), "exact", ""),
                                shape.result.config + " + whole-plan descent");
  if (Better(result, shape.result)) shape.result = std::move(result);
}

// Every shape scored at its best split (Enumerate), then every feasible one refined (Refine).
class TrainingSearch {
 public:
  TrainingSearch(const CostModel& world, const ScheduleOptions& options, const ExactGrid& grid)
      : world_(world), optima_(world, options, grid) {}

  void Enumerate(const Clock& clock) {
    const Cluster& cluster = world_.cluster();
    for (auto& replicas : ReplicaShapes(cluster.num_ranks(), world_.workload().batch)) {
      if (clock.Expired()) {
        complete_ = false;
        break;
      }
      int participants = 0;
      for (const std::vector<int>& replica : replicas)
        participants += static_cast<int>(replica.size());
      Shape shape;
      bool found = true;
      for (const std::vector<int>& replica : replicas) {
        shape.subs.push_back(MakeSubCluster(cluster, replica));
        shape.optima.push_back(&optima_.Get(shape.subs.back(), participants));
        found = found && shape.optima.back()->domain.found;
      }
      if (!found) continue;  // the memory bound cut every point of a replica
      names_.push_back(ShapeName(cluster, replicas));
      ScoreShape(world_, shape, "exhaustive, " + names_.back());
      shapes_.push_back(std::move(shape));
    }
    Sort();
  }

  // Refines the replicas of every feasible shape and re-scores every shape they appear in.
  void Refine(const Clock& clock) {
    for (const Shape& shape : shapes_) {
      if (!shape.result.feasible()) break;  // sorted: the infeasible ones come last
      for (ReplicaOptimum* optimum : shape.optima) RefineReplica(*optimum, clock);
    }
    for (size_t index = 0; index < shapes_.size(); ++index)
      if (std::any_of(shapes_[index].optima.begin(), shapes_[index].optima.end(),
                      [](const ReplicaOptimum* optimum) { return optimum->refined; }))
        ScoreShape(world_, shapes_[index], shapes_[index].result.config + " + descent");
    for (Shape& shape : shapes_) DescendWholePlan(world_, shape, clock);
    Sort();
  }

  ExactTrainingResult Result() const {
    ExactTrainingResult out;
    out.found = !shapes_.empty();
    out.complete = complete_ && optima_.complete();
    if (out.found) out.best = shapes_.front().result;
    out.shapes = static_cast<int64_t>(shapes_.size());
    out.evaluated = optima_.evaluated();
    return out;
  }

 private:
  void Sort() {
    std::stable_sort(shapes_.begin(), shapes_.end(),
                     [](const Shape& a, const Shape& b) { return Better(a.result, b.result); });
  }

  const CostModel& world_;
  ReplicaOptima optima_;
  std::vector<Shape> shapes_;
  std::vector<std::string> names_;
  bool complete_ = true;
};

}  // namespace

std::optional<Plan> SnapPlanToExactDomain(const CostModel& model, const Plan& plan,
                                          const ExactGrid& grid) {
  std::vector<Plan> replicas;
  for (int replica = 0; replica < NumReplicas(plan); ++replica) {
    const Plan own = ReplicaPlan(plan, replica);
    Layout layout;
    if (!LayoutFromPlan(own, layout)) return std::nullopt;
    if (!own.left_out.empty()) layout.pop_back();  // LayoutFromPlan's idle group of left_out
    Plan snapped =
        BuildPlan(model, SnapToExactDomain(layout, model.workload().seq_len, grid), "snapped", "");
    snapped.left_out = own.left_out;
    snapped.batch = own.batch;
    replicas.push_back(std::move(snapped));
  }
  Plan out = MergeReplicas(replicas);
  if (replicas.size() == 1) out.replica_sequences.clear();
  return out;
}

ExactTrainingResult ExactTrainingOptimum(const CostModel& model, const ScheduleOptions& options,
                                         const ExactGrid& grid) {
  const Clock& clock = options.deadline;
  TrainingSearch search(model, options, grid);
  search.Enumerate(clock);
  return search.Result();
}

}  // namespace sched_internal

Result<StrategyResult> ExactSearch(const Problem& problem, const ScheduleOptions& options) {
  const CostModel model(problem);
  using namespace sched_internal;
  const int n = model.cluster().num_ranks();
  if (n > kExactMaxRanks)
    return NotSupported("--strategy exact: the cluster has " + std::to_string(n) +
                        " ranks; the exhaustive search supports at most " +
                        std::to_string(kExactMaxRanks) + " (hint: use --strategy hexiseq)");
  const Clock& clock = options.deadline;
  TrainingSearch search(model, options, ExactGrid{});
  search.Enumerate(clock);
  search.Refine(clock);
  const ExactTrainingResult training = search.Result();
  std::optional<StrategyResult> best;
  if (training.found) best = training.best;
  for (const StrategyResult& baseline :
       AllBaselines(problem, clock))  // ... and the baselines' own plans
    if (baseline.applicable && baseline.feasible() && (!best || Better(baseline, *best))) {
      best = baseline;
      best->config = "baseline " + baseline.strategy +
                     (baseline.config.empty() ? "" : " (" + baseline.config + ")");
    }
  if (options.progress) options.progress(1);
  if (!best && clock.CutShort()) return NotScored("exact", clock);
  if (!best || !best->feasible())
    return Infeasible(options.explain_infeasible
                          ? ExplainInfeasible(problem, clock)
                          : "no plan of the exact search's domain fits memory" +
                                (best ? ": " + best->cost.infeasible_reason : std::string()));
  if (!training.complete) best->config += " (time limit reached)";
  best->strategy = best->plan.strategy = "exact";
  best->plan.config = best->config;
  return *best;
}

}  // namespace hexiseq
