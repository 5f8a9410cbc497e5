// The replica search (replica_search.h): candidates planned replica by replica, the batch split,
// the whole plan scored on the world.
#include "sched/replica_search.h"

#include <algorithm>
#include <deque>
#include <optional>

#include "sched/parallel.h"
#include "sched/subcluster.h"
#include "spec/error.h"

namespace hexiseq::sched_internal {
namespace {

constexpr size_t kRefinedCandidates = 2;  // screened candidates re-planned by the scheduler ...
constexpr int kRefineAllUpTo = 4;         // ... all of them (each replica with the scheduler's full
                                          // search) on clusters of at most this many ranks
constexpr size_t kRunnersUp = 3;          // kept for the table of options
constexpr double kMinSequenceSeconds = 1e-12;
constexpr int64_t kReplicaTrials = 500;  // descent moves per refined replica plan
constexpr int kReplicaTopK = 2;          // group-level candidates refined per replica plan (the
                                         // same plans as 4 on the benches' cases, half the time)

// One replica's plan and its time for one sequence and for each further one.
struct ReplicaTiming {
  StrategyResult result;
  double first_sequence_seconds = 0;
  double per_sequence_seconds = 0;
};

// The screen's plan of one replica: the better of the proportional plan and the best USP
// factorisation (each one or a few evaluations).
StrategyResult ScreenPlan(const CostModel& replica) {
  StrategyResult proportional = ProportionalPlan(replica);
  StrategyResult usp = UspOneReplica(replica);
  return Better(usp, proportional) ? usp : proportional;
}

int Participants(const ReplicaPartition& partition) {
  int participants = 0;
  for (const std::vector<int>& replica : partition.replicas)
    participants += static_cast<int>(replica.size());
  return participants;
}

// Plans replicas on their sub-clusters (screen: ScreenPlan; else the one-replica scheduler
// without its rank-level search); identical make-ups (same sub-cluster, same sharding) are
// planned once.
class ReplicaPlanner {
 public:
  ReplicaPlanner(const CostModel& world, const ScheduleOptions& options, bool screen)
      : world_(world), options_(options), screen_(screen), threads_(options.threads) {
    options_.progress = nullptr;
    options_.candidates = nullptr;
    options_.scored_baselines = nullptr;
    options_.explain_infeasible = false;
    // A re-plan runs on the threads too (its baselines and refinements), beside the other
    // make-ups' re-plans (PlanAhead): the longest one no longer ends on one thread alone.
    options_.threads = screen ? 1 : options.threads;
    options_.max_trials = kReplicaTrials;
    options_.top_k = kReplicaTopK;
  }
  // A make-up PlanAhead planned (read-only: safe from several threads).
  const ReplicaTiming& Planned(const SubCluster& sub, int shard_ranks) const {
    const ReplicaTiming* cached = Cached(sub.cluster, shard_ranks);
    HEXISEQ_CHECK(cached != nullptr, "ReplicaPlanner: a replica's make-up was not planned ahead");
    return *cached;
  }
  // Plans every make-up of `which`'s replicas not planned yet, on the options' threads (the
  // largest first, so that the longest plans start first), so that Planned finds them all; none
  // once `clock` has expired (then no candidate is scored either: the clock stays expired).
  void PlanAhead(const std::vector<ReplicaPartition>& candidates, const std::vector<size_t>& which,
                 const Clock& clock) {
    std::vector<std::pair<SubCluster, int>> missing;
    for (size_t index : which) {
      const int participants = Participants(candidates[index]);
      for (const std::vector<int>& replica : candidates[index].replicas) {
        SubCluster sub = MakeSubCluster(world_.cluster(), replica);
        const bool listed = std::any_of(missing.begin(), missing.end(), [&](const auto& other) {
          return other.second == participants && other.first.cluster == sub.cluster;
        });
        if (!listed && !Cached(sub.cluster, participants))
          missing.push_back({std::move(sub), participants});
      }
    }
    std::stable_sort(missing.begin(), missing.end(), [](const auto& a, const auto& b) {
      return a.first.cluster.num_ranks() > b.first.cluster.num_ranks();
    });
    std::vector<std::optional<ReplicaTiming>> timings(missing.size());
    ParallelFor(threads_, missing.size(), [&](size_t item) {
      if (!clock.Expired()) timings[item] = Time(missing[item].first, missing[item].second);
    });
    for (size_t item = 0; item < missing.size(); ++item)
      if (timings[item])
        cache_.push_back({missing[item].first.cluster, missing[item].second, *timings[item]});
  }

 private:
  const ReplicaTiming* Cached(const Cluster& cluster, int shard_ranks) const {
    for (const Entry& entry : cache_)
      if (entry.shard_ranks == shard_ranks && entry.cluster == cluster) return &entry.timing;
    return nullptr;
  }
  ReplicaTiming Time(const SubCluster& sub, int shard_ranks) const {
    const CostModel one = ReplicaCostModel(world_, sub, 1, shard_ranks);
    ReplicaTiming timing;
    timing.result = screen_ ? ScreenPlan(one) : Replan(one);
    timing.first_sequence_seconds = timing.result.cost.iteration_seconds;
    hexiseq::Plan two_sequences = timing.result.plan;
    two_sequences.batch = 2;
    const double two =
        ReplicaCostModel(world_, sub, 2, shard_ranks).Evaluate(two_sequences).iteration_seconds;
    timing.per_sequence_seconds =
        std::max(kMinSequenceSeconds, two - timing.first_sequence_seconds);
    return timing;
  }
  // The one-replica scheduler; within a tiny world with its rank-level search and full descent.
  StrategyResult Replan(const CostModel& one) const {
    if (world_.cluster().num_ranks() > kRefineAllUpTo)
      return RunScheduler(one, options_, false, false).best;
    ScheduleOptions tiny = options_;
    tiny.max_trials = 0;
    return RunScheduler(one, tiny, false, true).best;
  }
  struct Entry {
    Cluster cluster;
    int shard_ranks = 0;
    ReplicaTiming timing;
  };
  const CostModel& world_;
  ScheduleOptions options_;  // for each replica's own search: one thread
  bool screen_;
  int threads_;              // for PlanAhead
  std::deque<Entry> cache_;  // stable references
};

// A replica's busy time for `sequences` sequences, one after another.
double FinishSeconds(double first_sequence_seconds, double per_sequence_seconds, int sequences) {
  return first_sequence_seconds + (sequences - 1) * per_sequence_seconds;
}

// The slowest replica's busy time at the min-max split of the batch.
double BusySeconds(int batch, const std::vector<double>& first,
                   const std::vector<double>& per_sequence) {
  const std::vector<int> split = MinMaxBatchSplit(batch, first, per_sequence);
  double busy = 0;
  for (size_t replica = 0; replica < split.size(); ++replica)
    busy = std::max(busy, FinishSeconds(first[replica], per_sequence[replica], split[replica]));
  return busy;
}

// The candidate planned and scored on the world; nullopt when a replica does not fit (then
// `unfit_seconds` is lowered to its BusySeconds).
std::optional<StrategyResult> EvaluateCandidate(const CostModel& world,
                                                const ReplicaPartition& partition,
                                                const ReplicaPlanner& planner,
                                                double& unfit_seconds) {
  const int participants = Participants(partition);
  std::vector<SubCluster> subs;
  std::vector<const ReplicaTiming*> timings;
  std::vector<double> first, per_sequence;
  bool fits = true;
  for (const std::vector<int>& replica : partition.replicas) {
    subs.push_back(MakeSubCluster(world.cluster(), replica));
    const ReplicaTiming& timing = planner.Planned(subs.back(), participants);
    fits = fits && timing.result.feasible();
    timings.push_back(&timing);
    first.push_back(timing.first_sequence_seconds);
    per_sequence.push_back(timing.per_sequence_seconds);
  }
  if (!fits) {
    unfit_seconds =
        std::min(unfit_seconds, BusySeconds(world.workload().batch, first, per_sequence));
    return std::nullopt;
  }
  std::optional<StrategyResult> best;
  for (const std::vector<int>& split :
       CandidateBatchSplits(world.workload().batch, first, per_sequence, world.SyncsEverySequence(),
                            world.cluster().num_ranks() <= kRefineAllUpTo)) {
    std::vector<ReplicaPart> parts;
    for (size_t replica = 0; replica < subs.size(); ++replica)
      parts.push_back({&subs[replica], timings[replica]->result.plan, split[replica]});
    StrategyResult result = Score(world, AssembleReplicas(world, parts, "hexiseq"), partition.name);
    if (!best || Better(result, *best)) best = std::move(result);
  }
  return best;
}

struct Scored {
  size_t candidate = 0;
  StrategyResult result;
};

// Every candidate through `planner`, best first (by Better), until the clock runs out; those that
// do not fit lower `unfit_seconds` (EvaluateCandidate). The replicas are planned first
// (PlanAhead), then the candidates are scored on `threads`; the result does not depend on them.
std::vector<Scored> ScoreAll(const CostModel& world,
                             const std::vector<ReplicaPartition>& candidates,
                             const std::vector<size_t>& which, ReplicaPlanner& planner,
                             const Clock& clock, int threads, double& unfit_seconds) {
  planner.PlanAhead(candidates, which, clock);
  std::vector<std::optional<StrategyResult>> results(which.size());
  std::vector<double> unfit(which.size(), unfit_seconds);
  ParallelFor(threads, which.size(), [&](size_t item) {
    if (!clock.Expired())
      results[item] = EvaluateCandidate(world, candidates[which[item]], planner, unfit[item]);
  });
  std::vector<Scored> scored;
  for (size_t item = 0; item < which.size(); ++item) {
    unfit_seconds = std::min(unfit_seconds, unfit[item]);
    if (results[item]) scored.push_back({which[item], std::move(*results[item])});
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const Scored& a, const Scored& b) { return Better(a.result, b.result); });
  return scored;
}

}  // namespace

std::vector<int> MinMaxBatchSplit(int batch, const std::vector<double>& first_sequence_seconds,
                                  const std::vector<double>& per_sequence_seconds, int cap) {
  const size_t replicas = first_sequence_seconds.size();
  std::vector<int> split(replicas, 1);
  auto finish = [&](size_t replica, int sequences) {
    return FinishSeconds(first_sequence_seconds[replica], per_sequence_seconds[replica], sequences);
  };
  for (int given = static_cast<int>(replicas); given < batch; ++given) {
    size_t target = replicas;
    for (size_t replica = 0; replica < replicas; ++replica)
      if (split[replica] < cap && (target == replicas || finish(replica, split[replica] + 1) <
                                                             finish(target, split[target] + 1)))
        target = replica;
    ++split[target];
  }
  return split;
}

std::vector<std::vector<int>> CandidateBatchSplits(
    int batch, const std::vector<double>& first_sequence_seconds,
    const std::vector<double>& per_sequence_seconds, bool rounds_per_sequence, bool every_cap) {
  const int replicas = static_cast<int>(first_sequence_seconds.size());
  std::vector<std::vector<int>> splits = {
      MinMaxBatchSplit(batch, first_sequence_seconds, per_sequence_seconds)};
  if (!rounds_per_sequence) return splits;
  const int even = (batch + replicas - 1) / replicas;
  const int widest = every_cap ? batch - replicas : even;
  for (int cap = even; cap <= widest; ++cap) {
    std::vector<int> split =
        MinMaxBatchSplit(batch, first_sequence_seconds, per_sequence_seconds, cap);
    if (std::find(splits.begin(), splits.end(), split) == splits.end())
      splits.push_back(std::move(split));
  }
  return splits;
}

ReplicaOutcome SearchReplicas(const CostModel& model, const ScheduleOptions& options,
                              const Clock& clock) {
  const std::vector<ReplicaPartition> candidates =
      ReplicaCandidates(model.cluster(), model.workload().batch);
  std::vector<size_t> all(candidates.size());
  for (size_t index = 0; index < all.size(); ++index) all[index] = index;
  ReplicaOutcome outcome;
  ReplicaPlanner screen(model, options, true);
  std::vector<Scored> screened = ScoreAll(model, candidates, all, screen, clock, options.threads,
                                          outcome.fastest_unfit_seconds);
  std::vector<size_t> best_few;
  for (size_t rank = 0; rank < std::min(kRefinedCandidates, screened.size()); ++rank) {
    best_few.push_back(screened[rank].candidate);
    outcome.screened_best.push_back(screened[rank].result);
  }
  // Tiny clusters: every candidate, also those whose screen plan does not fit memory.
  if (model.cluster().num_ranks() <= kRefineAllUpTo) best_few = all;
  ReplicaPlanner full(model, options, false);
  std::vector<Scored> refined = ScoreAll(model, candidates, best_few, full, clock, options.threads,
                                         outcome.fastest_unfit_seconds);
  refined.insert(refined.end(), screened.begin(), screened.end());
  std::stable_sort(refined.begin(), refined.end(),
                   [](const Scored& a, const Scored& b) { return Better(a.result, b.result); });
  if (refined.empty()) return outcome;
  outcome.found = true;
  outcome.best = refined.front().result;
  for (size_t rank = 1; rank < refined.size() && outcome.runner_up.size() < kRunnersUp; ++rank)
    if (refined[rank].candidate != refined.front().candidate)
      outcome.runner_up.push_back(refined[rank].result);
  for (const Scored& scored : refined)
    if (scored.result.plan.left_out.empty() && scored.result.feasible()) {
      outcome.best_all_ranks = scored.result;
      break;
    }
  return outcome;
}

bool WorthRefining(const ReplicaOutcome& replicas, const StrategyResult& rival) {
  const size_t ahead =
      std::count_if(replicas.screened_best.begin(), replicas.screened_best.end(),
                    [&](const StrategyResult& screened) { return Better(screened, rival); });
  return ahead < kRefinedCandidates;
}

StrategyResult ChooseWithReplicas(const SearchOutcome& one_replica,
                                  const ReplicaOutcome& replicas) {
  std::vector<StrategyResult> results = {one_replica.best};
  if (replicas.found) {
    results.push_back(replicas.best);
    results.insert(results.end(), replicas.runner_up.begin(), replicas.runner_up.end());
  }
  const auto leaves_none = [](const StrategyResult& result) {
    return result.plan.left_out.empty();
  };
  for (const auto& all_ranks : {one_replica.best_all_ranks, replicas.best_all_ranks})
    if (all_ranks && std::none_of(results.begin(), results.end(), leaves_none))
      results.push_back(*all_ranks);
  std::stable_sort(results.begin(), results.end(), Better);
  StrategyResult best = results.front();
  best.strategy = best.plan.strategy = "hexiseq";
  best.options_considered.clear();
  for (const StrategyResult& result : results) best.options_considered.push_back(OptionOf(result));
  return best;
}

}  // namespace hexiseq::sched_internal
