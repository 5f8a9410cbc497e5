#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
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
  int64_t local_in_ns = 0;   // slowest rank: head layout ready
  int64_t ring_done_ns = 0;  // slowest rank: attention (and dK/dV) done
  int64_t end_ns = 0;        // slowest rank: pass done
  int64_t selective_ns = 0;  // slowest rank's selective-recompute op
};

PassFigures ReadPass(const PassMarks& marks, const std::vector<Op>& ops, const EngineResult& run) {
  PassFigures figures;
  figures.pass = marks.pass;
  for (size_t rank = 0; rank < marks.end.size(); ++rank) {
    figures.local_in_ns = std::max(figures.local_in_ns, EndOf(run.timings, marks.local_in[rank]));
    figures.ring_done_ns =
        std::max(figures.ring_done_ns, EndOf(run.timings, marks.ring_done[rank]));
    figures.end_ns = std::max(figures.end_ns, EndOf(run.timings, marks.end[rank]));
  }
  for (size_t id = 0; id < ops.size(); ++id)
    if (ops[id].label == OpLabel::kRecomputeMlp)
      figures.selective_ns =
          std::max(figures.selective_ns, run.timings[id].end_ns - run.timings[id].start_ns);
  return figures;
}

// The explicit layers, one engine per pass (LayerGraphBuilder): per-rank statistics summed over
// the passes, each pass's figures, and (keep_timeline) every op with its timing.
struct LayerRun {
  int64_t makespan_ns = 0;
  int64_t events = 0, messages = 0, compute_ops = 0;
  std::vector<RankStats> ranks;
  std::vector<PassFigures> passes;
  std::vector<char> active;  // per rank: has work in some pass
  std::vector<Op> ops;       // keep_timeline only
  std::vector<OpTiming> timings;
};

LayerRun RunLayers(LayerGraphBuilder& builder, const Cluster& cluster,
                   const EngineOptions& engine_options, bool keep_timeline) {
  const int num_ranks = cluster.num_ranks();
  LayerRun out;
  out.ranks.resize(num_ranks);
  out.active.assign(num_ranks, 0);
  std::vector<int64_t> start_ns(num_ranks, 0);
  for (int index = 0; index < builder.num_passes(); ++index) {
    Engine engine(cluster, engine_options);
    const PassMarks marks = builder.AddPass(index, engine, start_ns);
    const EngineResult run = engine.RunOnce();
    out.passes.push_back(ReadPass(marks, engine.ops(), run));
    out.makespan_ns = std::max(out.makespan_ns, run.makespan_ns);
    out.events += run.events;
    for (const Op& op : engine.ops()) {
      out.messages += op.kind == OpKind::kMessage ? 1 : 0;
      out.compute_ops += op.kind == OpKind::kCompute ? 1 : 0;
    }
    for (int rank = 0; rank < num_ranks; ++rank) {
      RankStats& total = out.ranks[rank];
      const RankStats& pass = run.ranks[rank];
      total.busy_ns += pass.busy_ns;
      total.comm_ns += pass.comm_ns;
      total.comm_exposed_ns += pass.comm_exposed_ns;
      total.last_end_ns = std::max(total.last_end_ns, pass.last_end_ns);
      if (marks.end[rank] >= 0) {
        start_ns[rank] = run.timings[marks.end[rank]].end_ns;
        out.active[rank] = 1;
      }
    }
    if (keep_timeline) {
      out.ops.insert(out.ops.end(), engine.ops().begin(), engine.ops().end());
      out.timings.insert(out.timings.end(), run.timings.begin(), run.timings.end());
    }
  }
  return out;
}

}  // namespace

Result<SimResult> Simulate(const Plan& plan, const CostModel& cost, const SimOptions& options) {
  if (auto valid = Validate(plan, cost.cluster(), cost.model()); !valid)
    return std::unexpected(valid.error());
  const ModelSpec& model = cost.model();
  const Workload& workload = cost.workload();
  if (options.explicit_layers < 1 || options.explicit_layers > model.layers)
    return InvalidArgument(
        "simulate: explicit_layers = " + std::to_string(options.explicit_layers) +
        ": must be in 1.." + std::to_string(model.layers) + " (the model's layers)");
  if (options.nics_per_node < 0)
    return InvalidArgument("simulate: nics_per_node = " + std::to_string(options.nics_per_node) +
                           ": must be >= 0 (0 means one NIC per GPU)");

  const Cluster& cluster = cost.cluster();
  const int num_ranks = cluster.num_ranks();
  EngineOptions engine_options;
  engine_options.nics_per_node = options.nics_per_node;

  // The explicit layers.
  GraphOptions graph_options;
  graph_options.explicit_layers = options.explicit_layers;
  graph_options.dkv_route = options.dkv_route;
  LayerGraphBuilder builder(plan, cost, graph_options);
  const LayerGraph graph = builder.Summary();
  LayerRun layer_run = RunLayers(builder, cluster, engine_options, options.keep_timeline);

  // One gradient bucket.
  Engine sync_engine(cluster, engine_options);
  BuildGradSyncGraph(cost, sync_engine);
  EngineResult sync_run = sync_engine.Run();

  SimResult out;
  const double scale = static_cast<double>(model.layers) / options.explicit_layers;
  const double batch = workload.batch;
  out.layer_seconds = Seconds(layer_run.makespan_ns);
  for (double h : graph.head_seconds) out.head_seconds = std::max(out.head_seconds, h);
  const double busy = batch * (scale * out.layer_seconds + out.head_seconds);
  // One simulated pass; a bucket makes GradSyncPasses() of them (all-gathers mirror it).
  const int sync_passes = cost.GradSyncPasses();
  out.grad_bucket_seconds = sync_passes * Seconds(sync_run.makespan_ns);
  // ZeRO-3 gathers weights and reduce-scatters gradients for every sequence of the batch; lower
  // stages accumulate locally and synchronise once per iteration (as the cost model).
  const double sync_rounds = workload.zero_stage >= 3 ? batch : 1.0;
  out.grad_sync_total_seconds = sync_rounds * model.layers * out.grad_bucket_seconds;
  out.grad_sync_exposed_seconds =
      std::max(out.grad_bucket_seconds, out.grad_sync_total_seconds - busy);
  if (num_ranks <= 1) out.grad_sync_exposed_seconds = 0;
  out.iteration_seconds = busy + out.grad_sync_exposed_seconds;
  out.tokens_per_second = batch * static_cast<double>(workload.seq_len) / out.iteration_seconds;
  out.events = layer_run.events + sync_run.events;
  out.segments = graph.num_segments;
  out.messages = layer_run.messages;
  out.compute_ops = layer_run.compute_ops;
  for (const Op& op : sync_engine.ops())
    if (op.kind == OpKind::kMessage) ++out.messages;

  const PlanCost predicted = cost.Evaluate(plan);
  out.feasible = predicted.feasible;
  out.infeasible_reason = predicted.infeasible_reason;

  for (int rank = 0; rank < num_ranks; ++rank) {
    SimRank r;
    r.rank = rank;
    r.device = cluster.device(rank).name;
    r.active = graph.head_seconds[rank] > 0 || layer_run.active[rank];
    const RankStats& ls = layer_run.ranks[rank];
    const RankStats& ss = sync_run.ranks[rank];
    r.busy_seconds = batch * (scale * Seconds(ls.busy_ns) + graph.head_seconds[rank]);
    r.idle_seconds = std::max(0.0, out.iteration_seconds - r.busy_seconds);
    const double sync_comm = sync_rounds * model.layers * sync_passes * Seconds(ss.comm_ns);
    r.comm_seconds = batch * scale * Seconds(ls.comm_ns) + sync_comm;
    r.exposed_comm_seconds = batch * scale * Seconds(ls.comm_exposed_ns) +
                             std::min(out.grad_sync_exposed_seconds, sync_comm);
    out.ranks.push_back(r);
  }

  // Terms against the cost model: per pass, the slowest rank's progress marks.
  double local = 0, ring = 0, recompute = 0;
  int64_t prev_end = 0;
  for (const PassFigures& pass : layer_run.passes) {
    const double total = Seconds(std::max<int64_t>(0, pass.end_ns - prev_end));
    const double ring_part =
        std::min(total, Seconds(std::max<int64_t>(0, pass.ring_done_ns - pass.local_in_ns)));
    if (pass.pass == Pass::kRecompute) {
      recompute += total;
    } else {
      ring += ring_part;
      local += total - ring_part;
    }
    // Selective recompute runs the MLP forward at the start of each backward pass: its slowest
    // rank's op is the recompute term, not part of the local phase.
    recompute += Seconds(pass.selective_ns);
    local -= Seconds(pass.selective_ns);
    prev_end = pass.end_ns;
  }
  const double per_iteration = batch * scale;
  out.terms = {
      {"local (linear + all-to-all)", predicted.local_seconds, per_iteration * local},
      {"ring attention", predicted.ring_seconds, per_iteration * ring},
      {"recompute", predicted.recompute_seconds, per_iteration * recompute},
      {"LM head", predicted.head_seconds, batch * out.head_seconds},
      {"gradient sync (exposed)", predicted.grad_sync_seconds, out.grad_sync_exposed_seconds},
  };

  if (options.keep_timeline) {
    out.timeline.layer_ops = std::move(layer_run.ops);
    out.timeline.layer_timings = std::move(layer_run.timings);
    out.timeline.sync_ops = sync_engine.ops();
    out.timeline.sync_timings = std::move(sync_run.timings);
    out.timeline.head_seconds = graph.head_seconds;
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
    row["busy_seconds"] = r.busy_seconds;
    row["idle_seconds"] = r.idle_seconds;
    row["comm_seconds"] = r.comm_seconds;
    row["exposed_comm_seconds"] = r.exposed_comm_seconds;
    ranks.push_back(row);
  }
  j["ranks"] = ranks;
  nlohmann::ordered_json terms = nlohmann::ordered_json::array();
  for (const SimTerm& t : result.terms)
    terms.push_back(
        {{"term", t.name}, {"model_seconds", t.model_seconds}, {"sim_seconds", t.sim_seconds}});
  j["terms"] = terms;
  return j.dump(2) + "\n";
}

}  // namespace hexiseq::sim
