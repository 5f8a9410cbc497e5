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
  double all_layers() const { return local + ring + recompute; }
};

PassTerms TermsOfPasses(const std::vector<PassFigures>& passes) {
  PassTerms terms;
  int64_t prev_end = 0;
  for (const PassFigures& pass : passes) {
    const double total = Seconds(std::max<int64_t>(0, pass.end_ns - prev_end));
    const double ring_part =
        std::min(total, Seconds(std::max<int64_t>(0, pass.ring_done_ns - pass.local_in_ns)));
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
    row.all_layers_seconds = TermsOfPasses(layer_run.passes[replica]).all_layers();
    for (int rank : row.ranks) row.head_seconds = std::max(row.head_seconds, head_seconds[rank]);
    row.busy_seconds = row.sequences * (row.all_layers_seconds + row.head_seconds);
    if (out.replicas.empty() || row.busy_seconds > out.replicas[out.slowest_replica].busy_seconds)
      out.slowest_replica = static_cast<int>(replica);
    out.replicas.push_back(std::move(row));
  }
}

}  // namespace

Result<SimResult> Simulate(const Plan& plan, const CostModel& cost, const SimOptions& options) {
  if (auto valid = Validate(plan, cost.cluster(), cost.model()); !valid)
    return std::unexpected(valid.error());
  const ModelSpec& model = cost.model();
  const Workload& workload = cost.workload();
  if (auto checked = CheckOptions(options, model); !checked)
    return std::unexpected(checked.error());

  const Cluster& cluster = cost.cluster();
  const int num_ranks = cluster.num_ranks();
  EngineOptions engine_options;
  engine_options.nics_per_node = options.nics_per_node;

  // The explicit layers of every replica.
  const std::vector<ReplicaRun> replicas = SplitReplicas(plan, workload);
  std::vector<int> replica_of(num_ranks, -1);
  for (size_t replica = 0; replica < replicas.size(); ++replica)
    for (int rank : replicas[replica].ranks) replica_of[rank] = static_cast<int>(replica);
  GraphOptions graph_options;
  graph_options.explicit_layers = options.explicit_layers;
  graph_options.dkv_route = options.dkv_route;
  std::vector<std::unique_ptr<LayerGraphBuilder>> builders;
  std::vector<double> head_seconds(num_ranks, 0);
  int segments = 0;
  for (const ReplicaRun& replica : replicas) {
    builders.push_back(std::make_unique<LayerGraphBuilder>(replica.plan, cost, graph_options));
    const LayerGraph summary = builders.back()->Summary();
    for (int rank : replica.ranks) head_seconds[rank] = summary.head_seconds[rank];
    segments = std::max(segments, summary.num_segments);
  }
  LayerRun layer_run =
      RunLayers(builders, replica_of, cluster, engine_options, options.keep_timeline);

  // One gradient bucket over the participating ranks.
  const std::vector<int> participants = ParticipatingRanks(plan);
  Engine sync_engine(cluster, engine_options);
  BuildGradSyncGraph(cost, participants, sync_engine);
  EngineResult sync_run = sync_engine.Run();

  SimResult out;
  FillReplicas(replicas, layer_run, head_seconds, out);
  const SimReplica& slowest = out.replicas[out.slowest_replica];
  out.layer_seconds = slowest.layer_seconds;
  out.head_seconds = slowest.head_seconds;
  const double busy = slowest.busy_seconds;
  // One simulated pass; a bucket makes GradSyncPasses() of them (all-gathers mirror it).
  const int sync_passes = cost.GradSyncPasses();
  out.grad_bucket_seconds = sync_passes * Seconds(sync_run.makespan_ns);
  // ZeRO-3 gathers weights and reduce-scatters gradients for every sequence (every participant
  // takes part in each round, so the replica with the most sequences sets the rounds); lower
  // stages accumulate locally and synchronise once per iteration (as the cost model).
  int most_sequences = 0;
  for (const SimReplica& replica : out.replicas)
    most_sequences = std::max(most_sequences, replica.sequences);
  const double sync_rounds = workload.zero_stage >= 3 ? most_sequences : 1.0;
  out.grad_sync_total_seconds = sync_rounds * model.layers * out.grad_bucket_seconds;
  out.grad_sync_exposed_seconds =
      std::max(out.grad_bucket_seconds, out.grad_sync_total_seconds - busy);
  if (participants.size() <= 1) out.grad_sync_exposed_seconds = 0;
  out.iteration_seconds = busy + out.grad_sync_exposed_seconds;
  int total_sequences = 0;
  for (const SimReplica& replica : out.replicas) total_sequences += replica.sequences;
  out.tokens_per_second =
      total_sequences * static_cast<double>(workload.seq_len) / out.iteration_seconds;
  out.events = layer_run.events + sync_run.events;
  out.segments = segments;
  out.messages = layer_run.messages;
  out.compute_ops = layer_run.compute_ops;
  for (const Op& op : sync_engine.ops())
    if (op.kind == OpKind::kMessage) ++out.messages;
  out.left_out = plan.left_out;

  const PlanCost predicted = cost.Evaluate(plan);
  out.feasible = predicted.feasible;
  out.infeasible_reason = predicted.infeasible_reason;

  for (int rank = 0; rank < num_ranks; ++rank) {
    SimRank r;
    r.rank = rank;
    r.device = cluster.device(rank).name;
    r.replica = replica_of[rank];
    r.idle_seconds = out.iteration_seconds;
    if (r.replica >= 0) {
      const double sequences = out.replicas[r.replica].sequences;
      r.active = head_seconds[rank] > 0 || layer_run.active[rank];
      const LayersRankStats& ls = layer_run.ranks[rank];
      const RankStats& ss = sync_run.ranks[rank];
      r.busy_seconds = sequences * (ls.busy_seconds + head_seconds[rank]);
      r.idle_seconds = std::max(0.0, out.iteration_seconds - r.busy_seconds);
      const double sync_comm = sync_rounds * model.layers * sync_passes * Seconds(ss.comm_ns);
      r.comm_seconds = sequences * ls.comm_seconds + sync_comm;
      r.exposed_comm_seconds =
          sequences * ls.comm_exposed_seconds + std::min(out.grad_sync_exposed_seconds, sync_comm);
    }
    out.ranks.push_back(r);
  }

  // Terms against the cost model (which also charges the slowest replica's phases).
  const PassTerms terms = TermsOfPasses(layer_run.passes[out.slowest_replica]);
  const double per_iteration = slowest.sequences;
  out.terms = {
      {"local (linear + all-to-all)", predicted.local_seconds, per_iteration * terms.local},
      {"ring attention", predicted.ring_seconds, per_iteration * terms.ring},
      {"recompute", predicted.recompute_seconds, per_iteration * terms.recompute},
      {"LM head", predicted.head_seconds, slowest.sequences * out.head_seconds},
      {"gradient sync (exposed)", predicted.grad_sync_seconds, out.grad_sync_exposed_seconds},
  };

  if (options.keep_timeline) {
    out.timeline.layer_ops = std::move(layer_run.ops);
    out.timeline.layer_timings = std::move(layer_run.timings);
    out.timeline.sync_ops = sync_engine.ops();
    out.timeline.sync_timings = std::move(sync_run.timings);
    out.timeline.head_seconds = head_seconds;
    out.timeline.layer_makespan_ns = layer_run.makespan_ns;
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
