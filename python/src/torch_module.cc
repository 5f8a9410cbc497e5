// hexiseq._torch: the runtime's DistributedAttention for PyTorch tensors, communicating through a
// torch.distributed process group (ProcessGroupComm). Runtime binds this process to a plan
// (collective: every rank checks that all loaded the same plan and that the group has the plan's
// rank count); Attention is one DistributedAttention, which keeps one forward's state for its
// backward (hexiseq/torch.py pools them). Every collective check raises on every rank, so a bad
// input never leaves some ranks waiting for the others. Tensors are fp32 CPU, token layout.
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "comm_conformance.h"
#include "errors.h"
#include "plan/plan.h"
#include "process_group_comm.h"
#include "runtime/dist_attention.h"
#include "runtime/replicas.h"
#include "runtime/str_cat.h"

namespace hexiseq::python {
namespace py = pybind11;
using runtime::StrCat;
namespace {

constexpr size_t kStatusBytes = 480;  // room for one rank's error message in an agreement round

// Every rank contributes its local error ("" when fine); if any rank has one, every rank raises
// the same InvalidArgumentError listing them, so no rank goes on into a collective alone.
void AgreeOrRaise(runtime::Comm& comm, const std::string& local_error) {
  std::vector<char> mine(kStatusBytes, '\0');
  std::memcpy(mine.data(), local_error.data(), std::min(local_error.size(), kStatusBytes - 1));
  std::vector<char> all(kStatusBytes * comm.size());
  WithoutGil([&] { comm.Allgather(mine.data(), kStatusBytes, all.data()); });
  std::string message;
  for (int rank = 0; rank < comm.size(); ++rank) {
    const std::string text(all.data() + rank * kStatusBytes);
    if (!text.empty()) message += StrCat(message.empty() ? "" : "; ", "rank ", rank, ": ", text);
  }
  if (!message.empty()) RaiseError(Error{ErrorCode::kInvalidArgument, message});
}

// The plan and the world communicator, shared by a Runtime and its Attention objects.
struct Core {
  Plan plan;
  std::unique_ptr<runtime::Comm> world;
};

std::string ParseAndCheckSize(const std::string& plan_json, int group_size, Plan& plan) {
  auto parsed = ParsePlanJson(plan_json, "plan");
  if (!parsed) return parsed.error().message;
  plan = std::move(*parsed);
  if (plan.num_ranks != group_size) {
    return StrCat("plan: num_ranks = ", plan.num_ranks, " but the process group has ", group_size,
                  " ranks (hint: launch ", plan.num_ranks,
                  " processes, e.g. torchrun --nproc_per_node ", plan.num_ranks, ", or plan for ",
                  group_size, " ranks)");
  }
  return "";
}

std::shared_ptr<Core> MakeCore(const std::string& plan_json, const py::object& process_group) {
  auto group = py::cast<c10::intrusive_ptr<c10d::ProcessGroup>>(process_group);
  auto core = std::make_shared<Core>();
  core->world = MakeProcessGroupComm(group);
  AgreeOrRaise(*core->world, ParseAndCheckSize(plan_json, group->getSize(), core->plan));
  Unwrap(WithoutGil([&] { return runtime::CheckPlanAgreement(*core->world, core->plan); }));
  Unwrap(ValidateStructure(core->plan));  // the same plan everywhere: every rank raises or none
  return core;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t index = 0; index < shape.size(); ++index)
    text += StrCat(index ? ", " : "", shape[index]);
  return text + "]";
}

// Local checks of one attention call's shapes against the plan (empty when they fit).
std::string CheckShapes(const Plan& plan, int64_t rank_tokens, const std::vector<int64_t>& q,
                        const std::vector<int64_t>& k, const std::vector<int64_t>& v) {
  const std::string shapes = StrCat("q ", ShapeText(q), ", k ", ShapeText(k), ", v ", ShapeText(v));
  if (q.size() != 3 || k.size() != 3 || v.size() != 3) {
    return StrCat(shapes, ": must be 3-D [local_tokens, heads, head_dim] (token layout)");
  }
  if (q[1] != plan.num_heads || k[1] != plan.num_kv_heads || v[1] != plan.num_kv_heads) {
    return StrCat(shapes, ": the plan has ", plan.num_heads, " query heads and ", plan.num_kv_heads,
                  " KV heads (hint: plan for this model's heads)");
  }
  if (q[0] != rank_tokens || k[0] != rank_tokens || v[0] != rank_tokens) {
    return StrCat(shapes, ": this rank holds ", rank_tokens,
                  " tokens in the plan (hint: use ctx.shard(x, dim) to take this rank's tokens)");
  }
  if (q[2] < 1 || k[2] != q[2] || v[2] != q[2]) {
    return StrCat(shapes, ": q, k and v need the same head_dim >= 1");
  }
  return "";
}

int64_t RankTokens(const Plan& plan, int rank) {
  for (const PlanGroup& group : plan.groups)
    for (const PlanMember& member : group.members)
      if (member.rank == rank) return TotalTokens(member.tokens);
  return 0;
}

// Collective: the shapes fit the plan on every rank, and every rank uses the same head_dim.
void CheckInputs(Core& core, const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                 const std::vector<int64_t>& v) {
  const int rank = core.world->rank();
  AgreeOrRaise(*core.world, CheckShapes(core.plan, RankTokens(core.plan, rank), q, k, v));
  const int64_t mine = q[2];
  std::vector<int64_t> dims(core.world->size());
  WithoutGil([&] { core.world->Allgather(&mine, sizeof(mine), dims.data()); });
  if (std::adjacent_find(dims.begin(), dims.end(), std::not_equal_to<>()) != dims.end()) {
    std::string parts;
    for (size_t r = 0; r < dims.size(); ++r)
      parts += StrCat(r ? ", " : "", "rank ", r, ": ", dims[r]);
    RaiseError(
        Error{ErrorCode::kInvalidArgument, StrCat("head_dim differs across ranks (", parts, ")")});
  }
}

at::Tensor ToTensor(const std::vector<float>& data, std::vector<int64_t> shape) {
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  std::copy(data.begin(), data.end(), out.data_ptr<float>());
  return out;
}

std::span<const float> View(const at::Tensor& tensor) {
  TORCH_CHECK(tensor.scalar_type() == at::kFloat && tensor.is_contiguous() && tensor.is_cpu(),
              "hexiseq: expected a contiguous fp32 CPU tensor");
  return {tensor.data_ptr<float>(), static_cast<size_t>(tensor.numel())};
}

// One DistributedAttention over the core's world communicator.
class Attention {
 public:
  Attention(std::shared_ptr<Core> core, int head_dim) : core_(std::move(core)) {
    attention_ = Unwrap(WithoutGil([&] {
      return runtime::DistributedAttention::Create(core_->plan, *core_->world, head_dim);
    }));
    head_dim_ = head_dim;
  }

  py::tuple Forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    const int64_t tokens = attention_->num_tokens(), heads = core_->plan.num_heads;
    const auto q_view = View(q), k_view = View(k), v_view = View(v);
    runtime::AttentionOutputs result =
        Unwrap(WithoutGil([&] { return attention_->Forward(q_view, k_view, v_view); }));
    return py::make_tuple(ToTensor(result.o, {tokens, heads, head_dim_}),
                          ToTensor(result.lse, {tokens, heads}));
  }

  py::tuple Backward(const at::Tensor& d_o) {
    const int64_t tokens = attention_->num_tokens(), d = head_dim_;
    const auto d_o_view = View(d_o);
    runtime::AttentionGradients result =
        Unwrap(WithoutGil([&] { return attention_->Backward(d_o_view); }));
    return py::make_tuple(ToTensor(result.dq, {tokens, core_->plan.num_heads, d}),
                          ToTensor(result.dk, {tokens, core_->plan.num_kv_heads, d}),
                          ToTensor(result.dv, {tokens, core_->plan.num_kv_heads, d}));
  }

  py::dict Times(bool backward) const {
    const runtime::PhaseTimes& t =
        backward ? attention_->backward_times() : attention_->forward_times();
    py::dict out;
    out["alltoall"] = t.alltoall;
    out["compute"] = t.compute;
    out["ring_wait"] = t.ring_wait;
    out["total"] = t.total;
    out["ring_bytes_sent"] = t.ring_bytes_sent;
    return out;
  }

 private:
  std::shared_ptr<Core> core_;
  std::unique_ptr<runtime::DistributedAttention> attention_;
  int64_t head_dim_ = 0;
};

class Runtime {
 public:
  Runtime(const std::string& plan_json, const py::object& process_group)
      : core_(MakeCore(plan_json, process_group)) {}
  int rank() const { return core_->world->rank(); }
  int size() const { return core_->world->size(); }
  void Check(const std::vector<int64_t>& q, const std::vector<int64_t>& k,
             const std::vector<int64_t>& v) {
    CheckInputs(*core_, q, k, v);
  }
  std::unique_ptr<Attention> CreateAttention(int head_dim) {
    return std::make_unique<Attention>(core_, head_dim);
  }

 private:
  std::shared_ptr<Core> core_;
};

// Collective over the process group: every rank parsed the same plan, with the group's size.
void AgreeOnPlan(const std::string& plan_json, const py::object& process_group) {
  auto group = py::cast<c10::intrusive_ptr<c10d::ProcessGroup>>(process_group);
  std::unique_ptr<runtime::Comm> comm = MakeProcessGroupComm(group);
  Plan plan;
  AgreeOrRaise(*comm, ParseAndCheckSize(plan_json, group->getSize(), plan));
  Unwrap(WithoutGil([&] { return runtime::CheckPlanAgreement(*comm, plan); }));
  Unwrap(ValidateStructure(plan));
}

// (replica of each plan rank, -1 when left out; per replica, its local plan JSON and its plan
// ranks in local-rank order).
py::tuple Replicas(const std::string& plan_json) {
  const Plan plan = Unwrap(ParsePlanJson(plan_json, "plan"));
  Unwrap(ValidateStructure(plan));
  std::vector<int> replica_of(plan.num_ranks);
  for (int rank = 0; rank < plan.num_ranks; ++rank) {
    replica_of[rank] = runtime::ReplicaOf(plan, rank);
  }
  py::list locals;
  for (int replica = 0; replica < NumReplicas(plan); ++replica) {
    const runtime::LocalReplica local = runtime::MakeLocalReplica(plan, replica);
    locals.append(py::make_tuple(PlanToJson(local.plan), local.world_ranks));
  }
  return py::make_tuple(replica_of, locals);
}

}  // namespace
}  // namespace hexiseq::python

PYBIND11_MODULE(_torch, m) {
  namespace py = pybind11;
  using namespace hexiseq::python;
  m.doc() = "HexiSeq distributed attention over a torch.distributed process group";
  py::class_<Runtime>(m, "Runtime")
      .def(py::init<const std::string&, const py::object&>(), py::arg("plan_json"),
           py::arg("process_group"))
      .def_property_readonly("rank", &Runtime::rank)
      .def_property_readonly("size", &Runtime::size)
      .def("check_inputs", &Runtime::Check, py::arg("q_shape"), py::arg("k_shape"),
           py::arg("v_shape"))
      .def("create_attention", &Runtime::CreateAttention, py::arg("head_dim"));
  py::class_<Attention>(m, "Attention")
      .def("forward", &Attention::Forward, py::arg("q"), py::arg("k"), py::arg("v"))
      .def("backward", &Attention::Backward, py::arg("d_o"))
      .def("times", &Attention::Times, py::arg("backward") = false);
  m.def("agree_on_plan", &AgreeOnPlan, py::arg("plan_json"), py::arg("process_group"),
        "Collective: every rank holds the same valid plan, made for the group's size; raises "
        "InvalidArgumentError on every rank otherwise.");
  m.def("replicas", &Replicas, py::arg("plan_json"),
        "(replica of each plan rank or -1 when left out, [(local plan JSON, plan ranks)] per "
        "replica): each replica as a plan of its own, ranks renumbered in ascending order.");
  m.def(
      "_comm_conformance",
      [](const py::object& process_group) {
        auto comm =
            MakeProcessGroupComm(py::cast<c10::intrusive_ptr<c10d::ProcessGroup>>(process_group));
        return WithoutGil([&] { return CheckCommConformance(*comm); });
      },
      py::arg("process_group"),
      "Runs the Comm conformance checks over the process group (collective); returns failures.");
}
