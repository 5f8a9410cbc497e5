// hexiseq._core: the planning API for Python (clusters, models, plans, compare, simulate,
// validate) over the same library functions the CLI calls, so results equal the CLI's JSON.
// Returns library value types as Python objects; JSON documents (compare rows, simulation
// results) are returned as the CLI's JSON parsed into dicts. Errors raise hexiseq.Error classes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "cost/cost_model.h"
#include "errors.h"
#include "plan/plan.h"
#include "sched/strategies.h"
#include "sim/simulator.h"
#include "spec/cluster.h"
#include "spec/model.h"
#include "spec/units.h"

namespace hexiseq::python {
namespace py = pybind11;
namespace {

constexpr double kDefaultMemoryReserve = 0.1;  // the CLI's --memory-reserve default

// A path argument: str or os.PathLike.
std::string PathText(const py::object& path) {
  return py::str(py::module_::import("os").attr("fspath")(path));
}

py::object JsonToPython(const std::string& text) {
  return py::module_::import("json").attr("loads")(text);
}

Cluster LoadClusterArg(const py::object& path, const py::object& device_table) {
  DeviceCatalog catalog;
  if (!device_table.is_none()) Unwrap(catalog.MergeFile(PathText(device_table)));
  return Unwrap(LoadCluster(PathText(path), catalog));
}

// `cluster` is a Cluster or a path to a cluster file; `model` a ModelSpec, preset name or path.
Cluster ClusterArg(const py::object& cluster) {
  if (py::isinstance<Cluster>(cluster)) return cluster.cast<Cluster>();
  return LoadClusterArg(cluster, py::none());
}
ModelSpec ModelArg(const py::object& model) {
  if (py::isinstance<ModelSpec>(model)) return model.cast<ModelSpec>();
  return Unwrap(LoadModel(PathText(model)));
}

// Sequence length as an int or text with a K/M suffix ("128K").
int64_t SeqArg(const py::object& seq) {
  if (py::isinstance<py::int_>(seq)) {
    Workload check;
    check.seq_len = seq.cast<int64_t>();
    Unwrap(ValidateWorkload(check));
    return check.seq_len;
  }
  return Unwrap(ParseTokenCount(py::str(seq), "seq"));
}

struct WorkloadArgs {
  int batch = 1;
  std::string recompute = "full";  // or "auto" (planning only: the planner chooses)
  int zero = 3;                    // kZeroAuto: the planner chooses
  double memory_reserve = kDefaultMemoryReserve;
};

constexpr int kZeroAuto = -1;

// zero= "auto" or a stage 0..3 (the range is checked with the workload).
int ZeroArg(const py::object& zero) {
  if (py::isinstance<py::str>(zero)) {
    if (zero.cast<std::string>() == "auto") return kZeroAuto;
    RaiseError(Error{ErrorCode::kInvalidArgument, "zero = \"" + zero.cast<std::string>() +
                                                      "\": must be \"auto\" or a ZeRO stage 0..3"});
  }
  return zero.cast<int>();
}

Problem MakeProblem(const py::object& cluster, const py::object& model, int64_t seq_len,
                    const WorkloadArgs& args) {
  Workload workload;
  workload.seq_len = seq_len;
  workload.batch = args.batch;
  // "auto" plans start from the settings that need the least memory; the planner chooses.
  workload.recompute =
      Unwrap(ParseRecompute(args.recompute == "auto" ? std::string("full") : args.recompute));
  workload.zero_stage = args.zero == kZeroAuto ? 3 : args.zero;
  workload.memory_reserve = args.memory_reserve;
  Problem problem{ClusterArg(cluster), ModelArg(model), workload};
  Unwrap(ValidateProblem(problem));
  return problem;
}

// A plan is scored with its own workload (as `hexiseq simulate/validate --plan` do).
Problem PlanProblem(const Plan& plan, const py::object& cluster, const py::object& model,
                    double memory_reserve) {
  WorkloadArgs args{plan.batch, plan.recompute, plan.zero_stage, memory_reserve};
  Problem problem = MakeProblem(cluster, model, plan.seq_len, args);
  Unwrap(Validate(plan, problem.cluster, problem.model));
  return problem;
}

ScheduleOptions MakeOptions(double time_limit, int threads, const WorkloadArgs& args) {
  ScheduleOptions options;
  options.deadline = Unwrap(Deadline::FromTimeLimit(time_limit, "time_limit"));
  options.threads = threads;
  options.zero_auto = args.zero == kZeroAuto;
  options.recompute_auto = args.recompute == "auto";
  return options;
}

Plan PlanFor(const py::object& cluster, const py::object& model, const py::object& seq,
             const std::string& strategy, const WorkloadArgs& args, double time_limit,
             int threads) {
  const Problem problem = MakeProblem(cluster, model, SeqArg(seq), args);
  auto result = WithoutGil(
      [&] { return PlanStrategy(problem, strategy, MakeOptions(time_limit, threads, args)); });
  return Unwrap(std::move(result)).plan;
}

py::object Compare(const py::object& cluster, const py::object& model, const py::object& seq,
                   const WorkloadArgs& args, double time_limit, int threads) {
  const Problem problem = MakeProblem(cluster, model, SeqArg(seq), args);
  auto comparison = WithoutGil(
      [&] { return CompareStrategies(problem, MakeOptions(time_limit, threads, args)); });
  if (!comparison) RaiseError(comparison.error());
  return JsonToPython(ComparisonToJson(*comparison))["strategies"];
}

py::object SimulatePlan(const Plan& plan, const py::object& cluster, const py::object& model,
                        int explicit_layers, int nics_per_node, double memory_reserve) {
  const Problem problem = PlanProblem(plan, cluster, model, memory_reserve);
  sim::SimOptions options;
  options.explicit_layers = explicit_layers;
  options.nics_per_node = nics_per_node;
  auto result = WithoutGil([&] { return sim::Simulate(plan, problem, options); });
  return JsonToPython(sim::SimResultToJson(Unwrap(std::move(result))));
}

// Checks the invariants and that the plan fits memory; returns the cost model's prediction.
py::dict ValidatePlan(const Plan& plan, const py::object& cluster, const py::object& model,
                      double memory_reserve) {
  const PlanCost cost = Evaluate(PlanProblem(plan, cluster, model, memory_reserve), plan);
  if (!cost.feasible)
    RaiseError(Error{ErrorCode::kInfeasible, "infeasible: " + cost.infeasible_reason});
  py::dict out;
  out["iteration_seconds"] = cost.iteration_seconds;
  out["tokens_per_second"] = cost.tokens_per_second;
  out["max_memory_fraction"] = cost.max_memory_fraction;
  return out;
}

py::list RangesToList(const Ranges& ranges) {
  py::list out;
  for (const Range& range : ranges) out.append(py::make_tuple(range.begin, range.end));
  return out;
}

py::object PredictionToPython(const std::optional<PlanPrediction>& predicted) {
  if (!predicted) return py::none();
  py::dict out;
  out["iteration_seconds"] = predicted->iteration_seconds;
  out["tokens_per_second"] = predicted->tokens_per_second;
  py::list ranks;
  for (const RankPrediction& rank : predicted->ranks) {
    py::dict row;
    row["rank"] = rank.rank;
    row["memory_bytes"] = rank.memory_bytes;
    row["memory_capacity_bytes"] = rank.memory_capacity_bytes;
    row["compute_seconds"] = rank.compute_seconds;
    row["exposed_comm_seconds"] = rank.exposed_comm_seconds;
    row["total_comm_seconds"] = rank.total_comm_seconds;
    ranks.append(row);
  }
  out["ranks"] = ranks;
  return out;
}

// The member entry of `rank`, or an InvalidArgumentError naming the plan's rank count.
const PlanMember& MemberOf(const Plan& plan, int rank) {
  for (const PlanGroup& group : plan.groups) {
    for (const PlanMember& member : group.members) {
      if (member.rank == rank) return member;
    }
  }
  RaiseError(Error{ErrorCode::kInvalidArgument, "rank = " + std::to_string(rank) +
                                                    ": not in the plan (rule: 0 <= rank < " +
                                                    std::to_string(plan.num_ranks) + ")"});
}

void BindSpecs(py::module_& m) {
  py::class_<Cluster>(m, "Cluster", "A cluster: ranks, devices and links (load_cluster)")
      .def_readonly("name", &Cluster::name)
      .def_property_readonly("num_ranks", &Cluster::num_ranks)
      .def_property_readonly("devices",
                             [](const Cluster& c) {
                               py::list names;
                               for (int rank = 0; rank < c.num_ranks(); ++rank)
                                 names.append(c.device(rank).name);
                               return names;
                             })
      .def("__repr__", [](const Cluster& c) {
        return "<hexiseq.Cluster " + c.name + ": " + std::to_string(c.num_ranks()) + " ranks>";
      });
  py::class_<ModelSpec>(m, "Model", "Transformer shapes (hexiseq.model)")
      .def_readonly("name", &ModelSpec::name)
      .def_readonly("layers", &ModelSpec::layers)
      .def_readonly("hidden", &ModelSpec::hidden)
      .def_readonly("heads", &ModelSpec::heads)
      .def_readonly("kv_heads", &ModelSpec::kv_heads)
      .def_readonly("head_dim", &ModelSpec::head_dim)
      .def_readonly("ffn_hidden", &ModelSpec::ffn_hidden)
      .def_readonly("vocab", &ModelSpec::vocab)
      .def("__repr__", [](const ModelSpec& s) { return "<hexiseq.Model " + s.name + ">"; });
  m.def("load_cluster", &LoadClusterArg, py::arg("path"), py::arg("device_table") = py::none(),
        "Loads a cluster file (YAML or JSON), optionally with a device table overriding the "
        "catalog.");
  m.def("model", &ModelArg, py::arg("preset_or_path"),
        "A model preset by name (e.g. 'llama3-8b') or a model YAML file.");
}

void BindPlanParts(py::module_& m) {
  py::class_<PlanMember>(m, "PlanMember")
      .def_readonly("rank", &PlanMember::rank)
      .def_readonly("device", &PlanMember::device)
      .def_readonly("node", &PlanMember::node)
      .def_property_readonly("tokens", [](const PlanMember& x) { return RangesToList(x.tokens); })
      .def_readonly("heads", &PlanMember::heads)
      .def_property_readonly("num_tokens",
                             [](const PlanMember& x) { return TotalTokens(x.tokens); });
  py::class_<PlanGroup>(m, "PlanGroup")
      .def_readonly("ranks", &PlanGroup::ranks)
      .def_property_readonly("tokens", [](const PlanGroup& x) { return RangesToList(x.tokens); })
      .def_readonly("members", &PlanGroup::members)
      .def_readonly("replica", &PlanGroup::replica);
}

void BindPlan(py::module_& m) {
  BindPlanParts(m);
  py::class_<Plan>(m, "Plan",
                   "A plan (format hexiseq.plan/2): replicas and their sequences, left-out "
                   "ranks, groups, members, tokens, heads")
      .def_readonly("strategy", &Plan::strategy)
      .def_readonly("config", &Plan::config)
      .def_readonly("model", &Plan::model)
      .def_readonly("seq_len", &Plan::seq_len)
      .def_readonly("batch", &Plan::batch)
      .def_readonly("num_heads", &Plan::num_heads)
      .def_readonly("num_kv_heads", &Plan::num_kv_heads)
      .def_readonly("num_ranks", &Plan::num_ranks)
      .def_readonly("groups", &Plan::groups)
      .def_readonly("zero_stage", &Plan::zero_stage)
      .def_readonly("recompute", &Plan::recompute)
      .def_readonly("left_out", &Plan::left_out)
      .def_property_readonly("replica_sequences",
                             [](const Plan& p) {
                               std::vector<int> sequences;
                               for (int r = 0; r < NumReplicas(p); ++r)
                                 sequences.push_back(ReplicaSequences(p, r));
                               return sequences;
                             })
      .def_property_readonly("predicted",
                             [](const Plan& p) { return PredictionToPython(p.predicted); })
      .def_property_readonly("hash", &PlanHash)
      .def("member", &MemberOf, py::arg("rank"), py::return_value_policy::copy)
      .def("to_json", [](const Plan& p) { return PlanToJson(p); })
      .def_static(
          "from_json",
          [](const std::string& text) { return Unwrap(ParsePlanJson(text, "plan JSON")); },
          py::arg("text"))
      .def_static(
          "load", [](const py::object& path) { return Unwrap(LoadPlan(PathText(path))); },
          py::arg("path"))
      .def(
          "save",
          [](const Plan& p, const py::object& path) { Unwrap(SavePlan(p, PathText(path))); },
          py::arg("path"))
      .def("__eq__", [](const Plan& a, const Plan& b) { return a == b; })
      .def("__repr__", [](const Plan& p) {
        return "<hexiseq.Plan " + p.strategy + " (" + p.config +
               "): " + std::to_string(p.groups.size()) + " groups, " + std::to_string(p.num_ranks) +
               " ranks, " + std::to_string(p.seq_len) + " tokens>";
      });
}

void BindPlanning(py::module_& m) {
  m.def(
      "plan",
      [](const py::object& cluster, const py::object& model, const py::object& seq,
         const std::string& strategy, int batch, const std::string& recompute,
         const py::object& zero, double memory_reserve, double time_limit, int threads) {
        return PlanFor(cluster, model, seq, strategy,
                       WorkloadArgs{batch, recompute, ZeroArg(zero), memory_reserve}, time_limit,
                       threads);
      },
      py::arg("cluster"), py::arg("model"), py::arg("seq"), py::arg("strategy") = "hexiseq",
      py::arg("batch") = 1, py::arg("recompute") = "auto", py::arg("zero") = "auto",
      py::arg("memory_reserve") = kDefaultMemoryReserve, py::arg("time_limit") = 0.0,
      py::arg("threads") = 1);
  m.def(
      "compare",
      [](const py::object& cluster, const py::object& model, const py::object& seq, int batch,
         const std::string& recompute, const py::object& zero, double memory_reserve,
         double time_limit, int threads) {
        return Compare(cluster, model, seq,
                       WorkloadArgs{batch, recompute, ZeroArg(zero), memory_reserve}, time_limit,
                       threads);
      },
      py::arg("cluster"), py::arg("model"), py::arg("seq"), py::arg("batch") = 1,
      py::arg("recompute") = "auto", py::arg("zero") = "auto",
      py::arg("memory_reserve") = kDefaultMemoryReserve, py::arg("time_limit") = 0.0,
      py::arg("threads") = 1);
  m.def("simulate", &SimulatePlan, py::arg("plan"), py::arg("cluster"), py::arg("model"),
        py::arg("explicit_layers") = 1, py::arg("nics_per_node") = 0,
        py::arg("memory_reserve") = kDefaultMemoryReserve);
  m.def("validate", &ValidatePlan, py::arg("plan"), py::arg("cluster"), py::arg("model"),
        py::arg("memory_reserve") = kDefaultMemoryReserve);
  m.def("strategies", &StrategyNames);
}

}  // namespace
}  // namespace hexiseq::python

PYBIND11_MODULE(_core, m) {
  using namespace hexiseq::python;
  m.doc() = "HexiSeq planning: clusters, models, plans, compare, simulate, validate";
  RegisterErrors(m);
  BindSpecs(m);
  BindPlan(m);
  BindPlanning(m);
}
