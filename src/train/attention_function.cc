// DistributedAttentionOp: a torch::autograd::Function whose forward and backward call the
// distributed attention's Forward and Backward on contiguous fp32 copies of the tensors.
#include "train/attention_function.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cstring>

#include "runtime/slowdown.h"

namespace hexiseq::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::Variable;
using torch::autograd::variable_list;

std::span<const float> FloatSpan(const at::Tensor& tensor) {
  return {tensor.data_ptr<float>(), static_cast<size_t>(tensor.numel())};
}

at::Tensor FromVector(const std::vector<float>& values, at::IntArrayRef shape,
                      at::ScalarType dtype) {
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  TORCH_CHECK(static_cast<size_t>(out.numel()) == values.size(), "distributed attention returned ",
              values.size(), " values for shape ", shape);
  if (!values.empty()) std::memcpy(out.data_ptr<float>(), values.data(), values.size() * 4);
  return out.to(dtype);
}

at::Tensor AsFloat(const at::Tensor& tensor) { return tensor.to(at::kFloat).contiguous(); }

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static Variable forward(AutogradContext* ctx, const Variable& q, const Variable& k,
                          const Variable& v, AttentionLayer* layer) {
    runtime::PadComputeSinceMark();  // --slowdown: the linear work since the last attention
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["q_dtype"] = static_cast<int64_t>(q.scalar_type());
    ctx->saved_data["kv_dtype"] = static_cast<int64_t>(k.scalar_type());
    const at::Tensor q32 = AsFloat(q), k32 = AsFloat(k), v32 = AsFloat(v);
    auto out = layer->attention->Forward(FloatSpan(q32), FloatSpan(k32), FloatSpan(v32));
    TORCH_CHECK(out.has_value(), "distributed attention forward: ", out.error().message);
    layer->times.Add(layer->attention->forward_times());
    runtime::MarkComputeStart();
    return FromVector(out->o, q.sizes(), q.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    runtime::PadComputeSinceMark();
    auto* layer = reinterpret_cast<AttentionLayer*>(ctx->saved_data["layer"].toInt());
    const auto q_dtype = static_cast<at::ScalarType>(ctx->saved_data["q_dtype"].toInt());
    const auto kv_dtype = static_cast<at::ScalarType>(ctx->saved_data["kv_dtype"].toInt());
    const at::Tensor d_o = AsFloat(grad_outputs[0]);
    auto grads = layer->attention->Backward(FloatSpan(d_o));
    TORCH_CHECK(grads.has_value(), "distributed attention backward: ", grads.error().message);
    layer->times.Add(layer->attention->backward_times());
    const int64_t tokens = d_o.size(0), head_dim = d_o.size(2);
    const int64_t kv_heads = layer->attention->layout().num_kv_heads;
    runtime::MarkComputeStart();
    return {FromVector(grads->dq, d_o.sizes(), q_dtype),
            FromVector(grads->dk, {tokens, kv_heads, head_dim}, kv_dtype),
            FromVector(grads->dv, {tokens, kv_heads, head_dim}, kv_dtype), Variable()};
  }
};

}  // namespace

void AttentionTimes::Add(const runtime::PhaseTimes& times) {
  alltoall += times.alltoall;
  compute += times.compute;
  ring_wait += times.ring_wait;
  total += times.total;
}

at::Tensor DistributedAttentionOp(AttentionLayer& layer, const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v) {
  return AttentionFunction::apply(q, k, v, &layer);
}

}  // namespace hexiseq::train
