// Checkpoint save/resume and --init: tensors converted between libtorch and the safetensors
// NamedTensor, state.json via nlohmann::json, agreement across ranks on every outcome.
#include "train/checkpoint.h"

#include <ATen/core/grad_mode.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "train/safetensors.h"

namespace hexiseq::train {
namespace {

constexpr const char* kStateFormat = "hexiseq.train-state/1";
constexpr const char* kLatestFile = "latest";

NamedTensor ToNamed(const std::string& name, const at::Tensor& tensor) {
  const at::Tensor values = tensor.detach().to(at::kFloat).contiguous();
  NamedTensor named{name, DType::kF32, values.sizes().vec(), {}};
  named.data.resize(values.numel() * sizeof(float));
  if (values.numel() > 0) std::memcpy(named.data.data(), values.data_ptr(), named.data.size());
  return named;
}

Result<at::ScalarType> TorchType(const NamedTensor& tensor, const std::string& file) {
  switch (tensor.dtype) {
    case DType::kF32:
      return at::kFloat;
    case DType::kF64:
      return at::kDouble;
    case DType::kBF16:
      return at::kBFloat16;
    case DType::kF16:
      return at::kHalf;
    default:
      return InvalidArgument(file + ": tensor " + tensor.name + ": dtype " +
                             DTypeName(tensor.dtype) +
                             " is not a float type (rule: weights are F32, F64, BF16 or F16; "
                             "hint: save the weights as float32)");
  }
}

std::string ShapeText(at::IntArrayRef shape) {
  std::string text = "[";
  for (size_t index = 0; index < shape.size(); ++index) {
    text += (index ? ", " : "") + std::to_string(shape[index]);
  }
  return text + "]";
}

// Copies `tensor` into `target` after checking shape, dtype and finiteness.
Result<void> CopyInto(const NamedTensor& tensor, at::Tensor& target, const std::string& file) {
  if (at::IntArrayRef(tensor.shape) != target.sizes()) {
    return InvalidArgument(file + ": tensor " + tensor.name + ": shape " + ShapeText(tensor.shape) +
                           " but the model needs " + ShapeText(target.sizes()) +
                           " (rule: shapes follow the model file; hint: check layers, hidden, "
                           "heads, kv_heads, ffn_hidden and vocab)");
  }
  auto type = TorchType(tensor, file);
  if (!type) return std::unexpected(type.error());
  if (auto finite = CheckFinite(tensor); !finite) {
    return InvalidArgument(file + ": " + finite.error().message);
  }
  at::NoGradGuard no_grad;
  const at::Tensor source = at::from_blob(const_cast<std::byte*>(tensor.data.data()), tensor.shape,
                                          at::TensorOptions().dtype(*type));
  target.copy_(source);
  return {};
}

// Loads exactly the tensors of `targets` (by name) from `file`.
Result<void> LoadNamed(const SafetensorsFile& contents, const std::string& file,
                       std::vector<NamedTensorRef> targets) {
  std::set<std::string> expected;
  for (const NamedTensorRef& target : targets) expected.insert(target.name);
  for (const NamedTensor& tensor : contents.tensors) {
    if (!expected.contains(tensor.name)) {
      return InvalidArgument(file + ": tensor " + tensor.name +
                             ": not a parameter of this model (rule: exactly the model's "
                             "Hugging Face tensor names; hint: check the model file, e.g. "
                             "tied_embeddings and gated_mlp)");
    }
  }
  for (NamedTensorRef& target : targets) {
    const NamedTensor* tensor = FindTensor(contents, target.name);
    if (tensor == nullptr) {
      return InvalidArgument(file + ": tensor " + target.name +
                             " is missing (rule: every parameter of the model is needed; hint: "
                             "the file must come from a model with the same shape)");
    }
    if (auto copied = CopyInto(*tensor, target.tensor, file); !copied) return copied;
  }
  return {};
}

// Every parameter's moments (Trainer::GatherOptimizerState or OptimizerStateBuffers) by their
// names in the file.
std::vector<NamedTensorRef> OptimizerTensors(Trainer& trainer, std::vector<at::Tensor>& exp_avg,
                                             std::vector<at::Tensor>& exp_avg_sq) {
  std::vector<NamedTensorRef> named;
  const auto params = NamedParameters(trainer.weights());
  for (size_t index = 0; index < exp_avg.size(); ++index) {
    named.push_back({"exp_avg." + params[index].name, exp_avg[index]});
    named.push_back({"exp_avg_sq." + params[index].name, exp_avg_sq[index]});
  }
  return named;
}

nlohmann::json StateJson(Trainer& trainer) {
  const TrainOptions& options = trainer.options();
  return {{"format", kStateFormat},
          {"step", trainer.step()},
          {"data_position", trainer.step() * options.batch},
          {"seed", options.seed},
          {"optimizer", options.optimizer.kind == OptimizerKind::kSgd ? "sgd" : "adamw"},
          {"optimizer_steps", trainer.optimizer().steps_taken()},
          {"plan_hash", trainer.plan_hash()},
          {"num_ranks", trainer.world().size()},
          {"seq_len", options.seq_len},
          {"batch", options.batch},
          {"model", trainer.model().name}};
}

std::string StepDirName(int64_t step) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "step-%08lld", static_cast<long long>(step));
  return buffer;
}

Result<void> WriteCheckpointFiles(Trainer& trainer, const std::string& dir,
                                  std::vector<at::Tensor>& exp_avg,
                                  std::vector<at::Tensor>& exp_avg_sq) {
  namespace fs = std::filesystem;
  const std::string name = StepDirName(trainer.step());
  const fs::path step_dir = fs::path(dir) / name;
  std::error_code error;
  fs::create_directories(step_dir, error);
  if (error) {
    return IoError("--save " + dir + ": cannot create " + step_dir.string() + ": " +
                   error.message() + " (hint: check the path and permissions)");
  }
  std::vector<NamedTensor> weights, moments;
  for (const NamedTensorRef& param : NamedParameters(trainer.weights())) {
    weights.push_back(ToNamed(param.name, param.tensor));
  }
  for (const NamedTensorRef& moment : OptimizerTensors(trainer, exp_avg, exp_avg_sq)) {
    moments.push_back(ToNamed(moment.name, moment.tensor));
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (auto w = WriteSafetensors((step_dir / "model.safetensors").string(), weights, metadata); !w) {
    return w;
  }
  if (auto m = WriteSafetensors((step_dir / "optimizer.safetensors").string(), moments); !m) {
    return m;
  }
  if (auto s = WriteFileAtomic((step_dir / "state.json").string(), StateJson(trainer).dump(2));
      !s) {
    return s;
  }
  return WriteFileAtomic((fs::path(dir) / kLatestFile).string(), name + "\n");
}

Result<void> Agree(Trainer& trainer, Result<void> local) {
  runtime::Comm& participants = trainer.participants();
  const int ok = local.has_value() ? 1 : 0;
  std::vector<int> all(participants.size());
  participants.Allgather(&ok, sizeof ok, all.data());
  for (int rank = 0; rank < participants.size(); ++rank) {
    if (all[rank]) continue;
    if (!local) return local;
    return IoError("checkpoint: failed on participating rank " + std::to_string(rank) +
                   " (see its message)");
  }
  return {};
}

Result<std::string> ReadText(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) {
    return IoError("--resume: cannot read " + path + " (rule: " + what +
                   "; hint: resume from a directory written by --save)");
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Checks one state.json field against the running configuration.
Result<void> Expect(const nlohmann::json& state, const char* key, const nlohmann::json& value,
                    const std::string& path) {
  if (!state.contains(key) || state[key] != value) {
    return InvalidArgument(path + ": " + key + " = " +
                           (state.contains(key) ? state[key].dump() : "missing") +
                           " but this run has " + value.dump() +
                           " (rule: a resumed run uses the same plan, process count, --seq, "
                           "--batch, --seed and --optimizer as the saved one; hint: pass the "
                           "same flags)");
  }
  return {};
}

Result<void> ApplyState(Trainer& trainer, const nlohmann::json& state, const std::string& path) {
  const nlohmann::json current = StateJson(trainer);
  for (const char* key :
       {"format", "plan_hash", "num_ranks", "seq_len", "batch", "seed", "optimizer"}) {
    if (auto same = Expect(state, key, current[key], path); !same) return same;
  }
  if (!state.contains("step") || !state["step"].is_number_integer() ||
      !state.contains("optimizer_steps") || !state["optimizer_steps"].is_number_integer()) {
    return InvalidArgument(path +
                           ": step or optimizer_steps missing or not a whole number "
                           "(rule: written by --save; hint: the file was edited)");
  }
  trainer.set_step(state["step"].get<int64_t>());
  trainer.optimizer().set_steps_taken(state["optimizer_steps"].get<int64_t>());
  return {};
}

Result<void> ReadCheckpointFiles(Trainer& trainer, const std::string& dir) {
  namespace fs = std::filesystem;
  auto latest = ReadText((fs::path(dir) / kLatestFile).string(),
                         "DIR/latest names the newest "
                         "checkpoint");
  if (!latest) return std::unexpected(latest.error());
  std::string name = *latest;
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  const fs::path step_dir = fs::path(dir) / name;
  const std::string state_path = (step_dir / "state.json").string();
  auto text = ReadText(state_path, "each checkpoint has a state.json");
  if (!text) return std::unexpected(text.error());
  const nlohmann::json state = nlohmann::json::parse(*text, nullptr, false);
  if (state.is_discarded() || !state.is_object()) {
    return InvalidArgument(state_path +
                           ": not a JSON object (rule: written by --save; hint: "
                           "the file is damaged)");
  }
  if (auto applied = ApplyState(trainer, state, state_path); !applied) return applied;
  const std::string model_path = (step_dir / "model.safetensors").string();
  auto model = ReadSafetensors(model_path);
  if (!model) return std::unexpected(model.error());
  if (auto w = LoadNamed(*model, model_path, NamedParameters(trainer.weights())); !w) return w;
  const std::string optimizer_path = (step_dir / "optimizer.safetensors").string();
  auto moments = ReadSafetensors(optimizer_path);
  if (!moments) return std::unexpected(moments.error());
  std::vector<at::Tensor> exp_avg, exp_avg_sq;
  trainer.OptimizerStateBuffers(exp_avg, exp_avg_sq);
  if (auto loaded =
          LoadNamed(*moments, optimizer_path, OptimizerTensors(trainer, exp_avg, exp_avg_sq));
      !loaded) {
    return loaded;
  }
  trainer.optimizer().SetMoments(std::move(exp_avg), std::move(exp_avg_sq));
  return {};
}

}  // namespace

Result<void> SaveCheckpoint(Trainer& trainer, const std::string& dir) {
  Result<void> local;
  // Every participant holds the same weights and optimizer state (gathered from their owners
  // where the plan shards them): the first one writes them.
  std::vector<at::Tensor> exp_avg, exp_avg_sq;
  trainer.GatherOptimizerState(exp_avg, exp_avg_sq);
  trainer.GatherWeights();
  if (trainer.participants().rank() == 0) {
    local = WriteCheckpointFiles(trainer, dir, exp_avg, exp_avg_sq);
  }
  return Agree(trainer, local);
}

Result<void> LoadCheckpoint(Trainer& trainer, const std::string& dir) {
  return Agree(trainer, ReadCheckpointFiles(trainer, dir));
}

Result<void> LoadInitWeights(Trainer& trainer, const std::string& path) {
  Result<void> local;
  auto contents = ReadSafetensors(path);
  if (contents) {
    local = LoadNamed(*contents, path, NamedParameters(trainer.weights()));
  } else {
    local = std::unexpected(contents.error());
  }
  return Agree(trainer, local);
}

}  // namespace hexiseq::train
