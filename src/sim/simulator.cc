#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

namespace hexiseq::sim {
namespace {

double Seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

int64_t EndOf(const std::vector<OpTiming>& timings, int op) {
  return op >= 0 ? timings[op].end_ns : 0;
}

// One pass's figures, read from its engine run before the engine is dropped.
struct PassFigures {
  Pass pass = Pass::kForward;
  double weight = 1;         // the model's passes it stands for (PassMarks::weight)
  int64_t local_in_ns = 0;   // slowest rank: head layout ready
  int64_t ring_done_ns = 0;  // slowest rank: attention (and dK/dV) done
  int64_t end_ns = 0;        // slowest rank: pass done
  int64_t selective_ns = 0;  // slowest rank's selective-recompute op
};

// Each replica's figures of one pass, read from its engine run before the engine is dropped.
// `replica_of[rank]` is the rank's replica (-1: left out).
std::vector<PassFigures> ReadPass(const std::vector<PassMarks>& marks,
                                  const std::vector<int>& replica_of, const std::vector<Op>& ops,
                                  const EngineResult& run) {
  std::vector<PassFigures> figures(marks.size());
  for (size_t replica = 0; replica < marks.size(); ++replica) {
    const PassMarks& mark = marks[replica];
    PassFigures& pass = figures[replica];
    pass.pass = mark.pass;
    pass.weight = mark.weight;
    for (size_t rank = 0; rank < mark.end.size(); ++rank) {
      pass.local_in_ns = std::max(pass.local_in_ns, EndOf(run.timings, mark.local_in[rank]));
      pass.ring_done_ns = std::max(pass.ring_done_ns, EndOf(run.timings, mark.ring_done[rank]));
      pass.end_ns = std::max(pass.end_ns, EndOf(run.timings, mark.end[rank]));
    }
  }
  for (size_t id = 0; id < ops.size(); ++id) {
    if (ops[id].label != OpLabel::kRecomputeMlp) continue;
    PassFigures& pass = figures[replica_of[ops[id].rank]];
    pass.selective_ns =
        std::max(pass.selective_ns, run.timings[id].end_ns - run.timings[id].start_ns);
  }
  return figures;
}

// One data-parallel replica as the simulator runs it: its one-replica plan (the plan itself when
// there is one replica), its sequences per iteration and its ranks.
struct ReplicaRun {
  Plan plan;
  int sequences = 0;
  std::vector<int> ranks;
};

// One replica: the whole plan with the workload's batch (as before replicas existed); several:
// ReplicaPlan(plan, r) with the replica's sequences.
std::vector<ReplicaRun> SplitReplicas(const Plan& plan, const Workload& workload) {
  std::vector<ReplicaRun> replicas;
  const int count = NumReplicas(plan);
  for (int replica = 0; replica < count; ++replica) {
    ReplicaRun run;
    run.plan = count == 1 ? plan : ReplicaPlan(plan, replica);
    run.sequences = count == 1 ? workload.batch : ReplicaSequences(plan, replica);
    run.ranks = ParticipatingRanks(run.plan);
    replicas.push_back(std::move(run));
  }
  return replicas;
}

// A rank's figures over all the model's layers, one sequence: each explicit pass's figures times
// its weight (PassMarks::weight).
struct LayersRankStats {
  double busy_seconds = 0, comm_seconds = 0, comm_exposed_seconds = 0;
};

// The explicit layers of every replica, one engine per pass holding that pass of every replica
// (LayerGraphBuilder per replica), so replicas that share a resource (a node's NIC pool) contend:
// per-rank statistics weighted over the passes, each replica's pass figures and layer time, and
// (keep_timeline) every op with its timing.
struct LayerRun {
  int64_t makespan_ns = 0;
  int64_t events = 0, messages = 0, compute_ops = 0;
  std::vector<LayersRankStats> ranks;
  std::vector<std::vector<PassFigures>> passes;  // [replica][pass]
  std::vector<int64_t> replica_makespan_ns;      // per replica: its last rank's end
  std::vector<char> active;                      // per rank: has work in some pass
  std::vector<Op> ops;                           // keep_timeline only
  std::vector<OpTiming> timings;
};

void AddRankStats(const PassMarks& marks, const EngineResult& run, LayerRun& out,
                  std::vector<int64_t>& start_ns) {
  for (size_t rank = 0; rank < marks.end.size(); ++rank) {
    if (marks.end[rank] < 0) continue;
    start_ns[rank] = run.timings[marks.end[rank]].end_ns;
    out.active[rank] = 1;
  }
}

LayerRun RunLayers(std::vector<std::unique_ptr<LayerGraphBuilder>>& builders,
                   const std::vector<int>& replica_of, const Cluster& cluster,
                   const EngineOptions& engine_options, bool keep_timeline) {
  const int num_ranks = cluster.num_ranks();
  const size_t num_replicas = builders.size();
  LayerRun out;
  out.ranks.resize(num_ranks);
  out.active.assign(num_ranks, 0);
  out.passes.resize(num_replicas);
  out.replica_makespan_ns.assign(num_replicas, 0);
  std::vector<int64_t> start_ns(num_ranks, 0);
  for (int index = 0; index < builders.front()->num_passes(); ++index) {
    Engine engine(cluster, engine_options);
    std::vector<PassMarks> marks;
    for (auto& builder : builders) marks.push_back(builder->AddPass(index, engine, start_ns));
    const EngineResult run = engine.RunOnce();
    const std::vector<PassFigures> figures = ReadPass(marks, replica_of, engine.ops(), run);
    for (size_t replica = 0; replica < num_replicas; ++replica) {
      out.passes[replica].push_back(figures[replica]);
      out.replica_makespan_ns[replica] =
          std::max(out.replica_makespan_ns[replica], figures[replica].end_ns);
    }
    out.makespan_ns = std::max(out.makespan_ns, run.makespan_ns);
    out.events += run.events;
    for (const Op& op : engine.ops()) {
      out.messages += op.kind == OpKind::kMessage ? 1 : 0;
      out.compute_ops += op.kind == OpKind::kCompute ? 1 : 0;
    }
    for (int rank = 0; rank < num_ranks; ++rank) {
      LayersRankStats& total = out.ranks[rank];
      const RankStats& pass = run.ranks[rank];
      const int replica = replica_of[rank];
      const double weight = replica >= 0 ? marks[replica].weight : 0.0;
      total.busy_seconds += weight * Seconds(pass.busy_ns);
      total.comm_seconds += weight * Seconds(pass.comm_ns);
      total.comm_exposed_seconds += weight * Seconds(pass.comm_exposed_ns);
    }
    for (const PassMarks& mark : marks) AddRankStats(mark, run, out, start_ns);
    if (keep_timeline) {
      out.ops.insert(out.ops.end(), engine.ops().begin(), engine.ops().end());
      out.timings.insert(out.timings.end(), run.timings.begin(), run.timings.end());
    }
  }
  return out;
}

// The terms of one replica's passes over all the model's layers, one sequence (each explicit
// pass times its weight): local, ring and recompute, from the slowest rank's progress marks, and
// their sum.
struct PassTerms {
  double local = 0, ring = 0, recompute = 0;
  double backward = 0;  // the recompute and backward passes (CostModel::SyncWindowSeconds)
  double forward = 0;   // the forward passes (CostModel::StageExposedSyncSeconds)
  double all_layers() const { return local + ring + recompute; }
};

PassTerms TermsOfPasses(const std::vector<PassFigures>& passes) {
  PassTerms terms;
  int64_t prev_end = 0;
  for (const PassFigures& pass : passes) {
    const double total = Seconds(std::max<int64_t>(0, pass.end_ns - prev_end));
    const double ring_part =
        std::min(total, Seconds(std::max<int64_t>(0, pass.ring_done_ns - pass.local_in_ns)));
    if (pass.pass == Pass::kBackward || pass.pass == Pass::kRecompute)
      terms.backward += pass.weight * total;
    if (pass.pass == Pass::kForward) terms.forward += pass.weight * total;
    if (pass.pass == Pass::kRecompute) {
      terms.recompute += pass.weight * total;
    } else {
      terms.ring += pass.weight * ring_part;
      terms.local += pass.weight * (total - ring_part);
    }
    // Selective recompute runs the MLP forward at the start of each backward pass: its slowest
    // rank's op is the recompute term, not part of the local phase.
    terms.recompute += pass.weight * Seconds(pass.selective_ns);
    terms.local -= pass.weight * Seconds(pass.selective_ns);
    prev_end = pass.end_ns;
  }
  return terms;
}

Result<void> CheckOptions(const SimOptions& options, const ModelSpec& model) {
  if (options.explicit_layers < 1 || options.explicit_layers > model.layers)
    return InvalidArgument(
        "simulate: explicit_layers = " + std::to_string(options.explicit_layers) +
        ": must be in 1.." + std::to_string(model.layers) + " (the model's layers)");
  if (options.nics_per_node < 0)
    return InvalidArgument("simulate: nics_per_node = " + std::to_string(options.nics_per_node) +
                           ": must be >= 0 (0 means one NIC per GPU)");
  return {};
}

// Each replica's busy time: sequences x (its weighted passes over all layers + its LM head).
void FillReplicas(const std::vector<ReplicaRun>& replicas, const LayerRun& layer_run,
                  const std::vector<double>& head_seconds, SimResult& out) {
  for (size_t replica = 0; replica < replicas.size(); ++replica) {
    SimReplica row;
    row.replica = static_cast<int>(replica);
    row.sequences = replicas[replica].sequences;
    row.ranks = replicas[replica].ranks;
    row.layer_seconds = Seconds(layer_run.replica_makespan_ns[replica]);
    const PassTerms terms = TermsOfPasses(layer_run.passes[replica]);
    row.all_layers_seconds = terms.all_layers();
    row.backward_seconds = terms.backward;
    row.forward_seconds = terms.forward;
    for (int rank : row.ranks) row.head_seconds = std::max(row.head_seconds, head_seconds[rank]);
    row.busy_seconds = row.sequences * (row.all_layers_seconds + row.head_seconds);
    if (out.replicas.empty() || row.busy_seconds > out.replicas[out.slowest_replica].busy_seconds)
      out.slowest_replica = static_cast<int>(replica);
    out.replicas.push_back(std::move(row));
  }
}

// The explicit layers of every replica, run together on one engine.
struct LayersPhase {
  std::vector<ReplicaRun> replicas;
  std::vector<int> replica_of;       // per rank: its replica (-1: left out)
  std::vector<double> head_seconds;  // per rank: LM head forward + backward, one sequence
  int segments = 0;
  LayerRun run;
};

LayersPhase SimulateLayers(const Plan& plan, const CostModel& cost, const SimOptions& options,
                           const EngineOptions& engine_options) {
  const Cluster& cluster = cost.cluster();
  LayersPhase out;
  out.replicas = SplitReplicas(plan, cost.workload());
  out.replica_of.assign(cluster.num_ranks(), -1);
  for (size_t replica = 0; replica < out.replicas.size(); ++replica)
    for (int rank : out.replicas[replica].ranks) out.replica_of[rank] = static_cast<int>(replica);
  GraphOptions graph_options;
  graph_options.explicit_layers = options.explicit_layers;
  graph_options.dkv_route = options.dkv_route;
  std::vector<std::unique_ptr<LayerGraphBuilder>> builders;
  out.head_seconds.assign(cluster.num_ranks(), 0);
  for (const ReplicaRun& replica : out.replicas) {
    builders.push_back(std::make_unique<LayerGraphBuilder>(replica.plan, cost, graph_options));
    const LayerGraph summary = builders.back()->Summary();
    for (int rank : replica.ranks) out.head_seconds[rank] = summary.head_seconds[rank];
    out.segments = std::max(out.segments, summary.num_segments);
  }
  out.run = RunLayers(builders, out.replica_of, cluster, engine_options, options.keep_timeline);
  return out;
}

// The iteration from the slowest replica's busy time and the gradient sync: one simulated pass
// of one bucket, GradSyncPasses() of them per bucket (all-gathers mirror it); the rounds and
// passes of an iteration are the cost model's (CostModel::SyncRoundsOf, SyncTotalSeconds: at
// ZeRO >= 2 one round per sequence of the replica with the most); the sync hides in the replicas'
// joint window (CostModel::ReplicasSyncWindowSeconds). The optimizer step follows (the cost model's
// CostModel::OptimizerStepSeconds: no message, one memory-bound pass). Returns the sync rounds.
double FillIteration(const CostModel& cost, const Plan& plan, const EngineResult& sync_run,
                     size_t participants, SimResult& out) {
  const SimReplica& slowest = out.replicas[out.slowest_replica];
  out.layer_seconds = slowest.layer_seconds;
  out.head_seconds = slowest.head_seconds;
  out.grad_bucket_seconds = cost.GradSyncPasses() * Seconds(sync_run.makespan_ns);
  int most_sequences = 0, total_sequences = 0;
  std::vector<double> busy, windows, forwards;
  for (const SimReplica& replica : out.replicas) {
    most_sequences = std::max(most_sequences, replica.sequences);
    total_sequences += replica.sequences;
    busy.push_back(replica.busy_seconds);
    windows.push_back(cost.SyncWindowSeconds(replica.busy_seconds, replica.backward_seconds));
    forwards.push_back(replica.forward_seconds);
  }
  const double sync_rounds = cost.SyncRoundsOf(most_sequences);
  out.grad_sync_total_seconds = cost.SyncTotalSeconds(out.grad_bucket_seconds, sync_rounds);
  out.grad_sync_exposed_seconds =
      cost.StageExposedSyncSeconds(out.grad_bucket_seconds, out.grad_sync_total_seconds,
                                   CostModel::ReplicasSyncWindowSeconds(busy, windows),
                                   CostModel::ReplicasForwardWindowSeconds(forwards), sync_rounds);
  if (participants <= 1) out.grad_sync_exposed_seconds = 0;
  out.optimizer_seconds = cost.OptimizerStepSeconds(plan);
  out.iteration_seconds =
      slowest.busy_seconds + out.grad_sync_exposed_seconds + out.optimizer_seconds;
  out.tokens_per_second =
      total_sequences * static_cast<double>(cost.workload().seq_len) / out.iteration_seconds;
  return sync_rounds;
}

// Per-rank busy (its optimizer step included), idle and communication seconds per iteration.
void FillRanks(const CostModel& cost, const Plan& plan, const LayersPhase& layers,
               const EngineResult& sync_run, double sync_rounds, SimResult& out) {
  const Cluster& cluster = cost.cluster();
  const double sync_passes =  // of one bucket, each taking a rank sync_run's comm time
      cost.SyncBuckets(sync_rounds) * cost.model().layers * cost.GradSyncPasses();
  for (int rank = 0; rank < cluster.num_ranks(); ++rank) {
    SimRank row;
    row.rank = rank;
    row.device = cluster.device(rank).name;
    row.replica = layers.replica_of[rank];
    row.idle_seconds = out.iteration_seconds;
    if (row.replica >= 0) {
      const double sequences = out.replicas[row.replica].sequences;
      row.active = layers.head_seconds[rank] > 0 || layers.run.active[rank];
      const LayersRankStats& layer_stats = layers.run.ranks[rank];
      row.busy_seconds = sequences * (layer_stats.busy_seconds + layers.head_seconds[rank]) +
                         cost.OptimizerStepSeconds(plan, rank);
      row.idle_seconds = std::max(0.0, out.iteration_seconds - row.busy_seconds);
      const double sync_comm = sync_passes * Seconds(sync_run.ranks[rank].comm_ns);
      row.comm_seconds = sequences * layer_stats.comm_seconds + sync_comm;
      row.exposed_comm_seconds = sequences * layer_stats.comm_exposed_seconds +
                                 std::min(out.grad_sync_exposed_seconds, sync_comm);
    }
    out.ranks.push_back(row);
  }
}

// The terms against the cost model's (which also charges the slowest replica's phases).
void FillTerms(const PlanCost& predicted, const LayerRun& run, SimResult& out) {
  const PassTerms terms = TermsOfPasses(run.passes[out.slowest_replica]);
  const double per_iteration = out.replicas[out.slowest_replica].sequences;
  out.terms = {
      {"local (linear + all-to-all)", predicted.local_seconds, per_iteration * terms.local},
      {"ring attention", predicted.ring_seconds, per_iteration * terms.ring},
      {"recompute", predicted.recompute_seconds, per_iteration * terms.recompute},
      {"LM head", predicted.head_seconds, per_iteration * out.head_seconds},
      {"gradient sync (exposed)", predicted.grad_sync_seconds, out.grad_sync_exposed_seconds},
      {"optimizer step", predicted.optimizer_seconds, out.optimizer_seconds},
  };
}

}  // namespace

Result<SimResult> Simulate(const Plan& plan, const Problem& problem, const SimOptions& options) {
  const CostModel cost(problem);
  if (auto valid = Validate(plan, problem.cluster, problem.model); !valid)
    return std::unexpected(valid.error());
  if (auto checked = CheckOptions(options, problem.model); !checked)
    return std::unexpected(checked.error());
  EngineOptions engine_options;
  engine_options.nics_per_node = options.nics_per_node;

  LayersPhase layers = SimulateLayers(plan, cost, options, engine_options);
  // One gradient bucket over the participating ranks.
  const std::vector<int> participants = ParticipatingRanks(plan);
  Engine sync_engine(problem.cluster, engine_options);
  BuildGradSyncGraph(cost, participants, sync_engine);
  EngineResult sync_run = sync_engine.Run();

  SimResult out;
  FillReplicas(layers.replicas, layers.run, layers.head_seconds, out);
  const double sync_rounds = FillIteration(cost, plan, sync_run, participants.size(), out);
  out.events = layers.run.events + sync_run.events;
  out.segments = layers.segments;
  out.messages = layers.run.messages;
  out.compute_ops = layers.run.compute_ops;
  for (const Op& op : sync_engine.ops())
    if (op.kind == OpKind::kMessage) ++out.messages;
  out.left_out = plan.left_out;
  const PlanCost predicted = cost.Evaluate(plan);
  out.feasible = predicted.feasible;
  out.infeasible_reason = predicted.infeasible_reason;
  FillRanks(cost, plan, layers, sync_run, sync_rounds, out);
  FillTerms(predicted, layers.run, out);

  if (options.keep_timeline) {
    out.timeline.layer_ops = std::move(layers.run.ops);
    out.timeline.layer_timings = std::move(layers.run.timings);
    out.timeline.sync_ops = sync_engine.ops();
    out.timeline.sync_timings = std::move(sync_run.timings);
    out.timeline.head_seconds = layers.head_seconds;
    out.timeline.layer_makespan_ns = layers.run.makespan_ns;
  }
  return out;
}

const SimTerm* LargestDisagreement(const SimResult& result) {
  const SimTerm* worst = nullptr;
  for (const SimTerm& term : result.terms)
    if (!worst || std::abs(term.sim_seconds - term.model_seconds) >
                      std::abs(worst->sim_seconds - worst->model_seconds))
      worst = &term;
  return worst;
}

double KendallTau(const std::vector<double>& a, const std::vector<double>& b) {
  HEXISEQ_CHECK(a.size() == b.size() && a.size() >= 2, "KendallTau needs two equal lists");
  int64_t concordant = 0, discordant = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = i + 1; j < a.size(); ++j) {
      const double da = a[i] - a[j], db = b[i] - b[j];
      if (da * db > 0) ++concordant;
      if (da * db < 0) ++discordant;
    }
  const double pairs = static_cast<double>(a.size()) * (a.size() - 1) / 2;
  return static_cast<double>(concordant - discordant) / pairs;
}

std::string SimResultToJson(const SimResult& result) {
  nlohmann::ordered_json j;
  j["iteration_seconds"] = result.iteration_seconds;
  j["tokens_per_second"] = result.tokens_per_second;
  j["feasible"] = result.feasible;
  if (!result.feasible) j["infeasible_reason"] = result.infeasible_reason;
  j["layer_seconds"] = result.layer_seconds;
  j["lm_head_seconds"] = result.head_seconds;
  j["grad_sync_exposed_seconds"] = result.grad_sync_exposed_seconds;
  j["grad_sync_total_seconds"] = result.grad_sync_total_seconds;
  j["events"] = result.events;
  j["messages"] = result.messages;
  j["compute_ops"] = result.compute_ops;
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const SimRank& r : result.ranks) {
    nlohmann::ordered_json row;
    row["rank"] = r.rank;
    row["device"] = r.device;
    if (r.replica >= 0)
      row["replica"] = r.replica;
    else
      row["replica"] = "left out";
    row["active"] = r.active;
    row["busy_seconds"] = r.busy_seconds;
    row["idle_seconds"] = r.idle_seconds;
    row["comm_seconds"] = r.comm_seconds;
    row["exposed_comm_seconds"] = r.exposed_comm_seconds;
    ranks.push_back(row);
  }
  j["ranks"] = ranks;
  nlohmann::ordered_json replicas = nlohmann::ordered_json::array();
  for (const SimReplica& replica : result.replicas)
    replicas.push_back({{"replica", replica.replica},
                        {"sequences", replica.sequences},
                        {"ranks", replica.ranks},
                        {"layer_seconds", replica.layer_seconds},
                        {"all_layers_seconds", replica.all_layers_seconds},
                        {"lm_head_seconds", replica.head_seconds},
                        {"busy_seconds", replica.busy_seconds}});
  j["replicas"] = replicas;
  j["slowest_replica"] = result.slowest_replica;
  j["left_out"] = result.left_out;
  nlohmann::ordered_json terms = nlohmann::ordered_json::array();
  for (const SimTerm& t : result.terms)
    terms.push_back(
        {{"term", t.name}, {"model_seconds", t.model_seconds}, {"sim_seconds", t.sim_seconds}});
  j["terms"] = terms;
  return j.dump(2) + "\n";
}

}  // namespace hexiseq::sim
