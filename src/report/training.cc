// A plan's training configuration in words (see training.h).
#include "report/training.h"

#include <algorithm>

#include "report/svg.h"

namespace hexiseq::report {
namespace {

constexpr size_t kMaxCellRanksChars = 24;  // a left-out list longer than this is cut with "..."
constexpr int kMaxSplitListed = 8;         // more replicas: the batch split as a range

std::string Plural(int count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

std::string Seconds(double seconds) { return Fmt("%.3f s", seconds); }

// Appends `item` to `list`, with `separator` before every item but the first.
void AppendItem(std::string& list, const std::string& separator, const std::string& item) {
  if (!list.empty()) list += separator;
  list += item;
}

// One run of consecutive ranks on nodes of one device type.
struct DeviceRun {
  std::string device;
  int count = 0, first_node = 0, last_node = 0;
};

std::string RunText(const DeviceRun& run) {
  const std::string nodes =
      run.first_node == run.last_node
          ? "node " + std::to_string(run.first_node)
          : "nodes " + std::to_string(run.first_node) + "-" + std::to_string(run.last_node);
  return std::to_string(run.count) + " x " + run.device + " on " + nodes;
}

// The best feasible option that leaves nobody out, or nullptr.
const TrainingOption* BestWithEveryRank(const std::vector<TrainingOption>& options) {
  for (const TrainingOption& option : options)
    if (option.feasible && option.left_out == 0) return &option;
  return nullptr;
}

std::string LeftOutGainLine(const std::vector<TrainingOption>& options) {
  const TrainingOption& chosen = options.front();
  if (chosen.left_out == 0) return "left out: nobody (the chosen configuration uses every rank)";
  const std::string leaving = "leaving " + Plural(chosen.left_out, "rank") +
                              " out: " + Seconds(chosen.iteration_seconds) + "/iteration";
  const TrainingOption* every = BestWithEveryRank(options);
  if (!every) return leaving + "; no configuration weighed with every rank fits";
  return leaving + " vs " + Seconds(every->iteration_seconds) + " for the best with every rank (" +
         every->name + "), " + Fmt("%.3fx", every->iteration_seconds / chosen.iteration_seconds) +
         " faster";
}

std::string RunnerUpLine(const std::vector<TrainingOption>& options) {
  if (options.size() < 2) return "runner-up: none (one configuration weighed)";
  const TrainingOption& chosen = options.front();
  const TrainingOption& runner_up = options[1];
  if (!runner_up.feasible) return "runner-up: " + runner_up.name + ": does not fit";
  return "runner-up: " + runner_up.name + ": " + Seconds(runner_up.iteration_seconds) +
         "/iteration" +
         (chosen.iteration_seconds > 0
              ? Fmt(" (%+.1f%%)",
                    100 * (runner_up.iteration_seconds / chosen.iteration_seconds - 1))
              : "");
}

}  // namespace

std::string RanksWord(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + IdRanges(ranks);
}

std::string IdRanges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t begin = 0; begin < ranks.size();) {
    size_t end = begin + 1;
    while (end < ranks.size() && ranks[end] == ranks[end - 1] + 1) ++end;
    std::string run = std::to_string(ranks[begin]);
    if (end - begin > 1) run += "-" + std::to_string(ranks[end - 1]);
    AppendItem(out, ",", run);
    begin = end;
  }
  return out.empty() ? "-" : out;
}

std::string DevicesInWords(const std::vector<int>& ranks, const Cluster& cluster) {
  std::vector<DeviceRun> runs;
  for (const int rank : ranks) {
    const std::string& device = cluster.device(rank).name;
    const int node = cluster.ranks[rank].node;
    if (runs.empty() || runs.back().device != device || node < runs.back().last_node ||
        node > runs.back().last_node + 1) {
      runs.push_back({device, 0, node, node});
    }
    ++runs.back().count;
    runs.back().last_node = node;
  }
  std::string out;
  for (const DeviceRun& run : runs) AppendItem(out, " + ", RunText(run));
  return out.empty() ? "no ranks" : out;
}

std::string ReplicasInWords(const Plan& plan) {
  const int replicas = NumReplicas(plan);
  if (replicas == 1)
    return "1 data-parallel replica, the whole batch of " + Plural(plan.batch, "sequence");
  std::string split;
  for (int replica = 0; replica < replicas; ++replica)
    AppendItem(split, " + ", std::to_string(ReplicaSequences(plan, replica)));
  return Plural(replicas, "data-parallel replica") + ", batch " + std::to_string(plan.batch) +
         " split " + split;
}

std::vector<ReplicaSummary> SummarizeReplicas(const Plan& plan, const PlanCost& cost) {
  std::vector<ReplicaSummary> replicas(NumReplicas(plan));
  for (int replica = 0; replica < NumReplicas(plan); ++replica) {
    replicas[replica].replica = replica;
    replicas[replica].sequences = ReplicaSequences(plan, replica);
    if (static_cast<size_t>(replica) < cost.replica_busy_seconds.size())
      replicas[replica].busy_seconds = cost.replica_busy_seconds[replica];
  }
  for (const PlanGroup& group : plan.groups) {
    ReplicaSummary& summary = replicas[group.replica];
    ++summary.groups;
    summary.ranks.insert(summary.ranks.end(), group.ranks.begin(), group.ranks.end());
  }
  for (ReplicaSummary& summary : replicas) std::sort(summary.ranks.begin(), summary.ranks.end());
  return replicas;
}

std::string ReplicasCell(const Plan& plan) {
  const int replicas = NumReplicas(plan);
  std::string out = "dp " + std::to_string(replicas);
  if (replicas == 1) return out;
  std::vector<int> sequences;
  for (int replica = 0; replica < replicas; ++replica)
    sequences.push_back(ReplicaSequences(plan, replica));
  const auto [fewest, most] = std::minmax_element(sequences.begin(), sequences.end());
  if (*fewest == *most) return out + " (" + std::to_string(*most) + " each)";
  if (replicas > kMaxSplitListed)
    return out + " (" + std::to_string(*fewest) + "-" + std::to_string(*most) + " each)";
  std::string split;
  for (const int count : sequences) AppendItem(split, "+", std::to_string(count));
  return out + " (" + split + ")";
}

std::string LeftOutCell(const Plan& plan) {
  if (plan.left_out.empty()) return "-";
  std::string ranks = IdRanges(plan.left_out);
  if (ranks.size() > kMaxCellRanksChars) ranks = ranks.substr(0, kMaxCellRanksChars - 3) + "...";
  if (plan.left_out.size() == 1) return RanksWord(plan.left_out);
  return Plural(static_cast<int>(plan.left_out.size()), "rank") + ": " + ranks;
}

std::string TrainingCell(const Plan& plan) {
  return "zero " + std::to_string(plan.zero_stage) + ", " + plan.recompute;
}

std::vector<std::string> DecisionLines(const std::vector<TrainingOption>& options) {
  if (options.empty()) return {};
  return {"chosen: " + options.front().name + ": " + Seconds(options.front().iteration_seconds) +
              "/iteration (" + Plural(static_cast<int>(options.size()), "configuration") +
              " weighed)",
          LeftOutGainLine(options), RunnerUpLine(options)};
}

std::string TrainingText(const Plan& plan, const PlanCost& cost, const Cluster& cluster,
                         int shard_ranks, const std::vector<TrainingOption>& options,
                         bool options_recorded) {
  const std::vector<ReplicaSummary> replicas = SummarizeReplicas(plan, cost);
  std::string out = "training: " + ReplicasInWords(plan) + "; ZeRO " +
                    std::to_string(plan.zero_stage) + " sharded over " +
                    Plural(shard_ranks, "rank") + "; recompute " + plan.recompute + "\n";
  for (const ReplicaSummary& replica : replicas)
    out += "  replica " + std::to_string(replica.replica) + ": " + RanksWord(replica.ranks) + " (" +
           DevicesInWords(replica.ranks, cluster) + "), " + Plural(replica.groups, "group") + ", " +
           Plural(replica.sequences, "sequence") + ", busy " + Seconds(replica.busy_seconds) + "\n";
  out += plan.left_out.empty()
             ? std::string("left out: none\n")
             : "left out: " + RanksWord(plan.left_out) + " (" +
                   DevicesInWords(plan.left_out, cluster) + "): no model state, no gradient sync\n";
  for (const std::string& line : DecisionLines(options)) out += line + "\n";
  if (!options_recorded)
    out += "configurations weighed: not recorded in a plan file (hexiseq plan prints them)\n";
  else if (options.empty())
    out +=
        "configurations weighed: none (this strategy takes the training configuration as "
        "given)\n";
  return out;
}

}  // namespace hexiseq::report
