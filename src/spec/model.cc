// Model presets (published shapes, each with its source), model YAML files, and the workload
// checks. Parameter counts follow the published totals within about 1%: they count Q/K/V/O and
// MLP matrices, two norm vectors per layer, the final norm and the embedding/output matrices,
// and ignore biases and learned position embeddings (GPT-3; long-context runs use RoPE).
#include "spec/model.h"

#include <cstdio>
#include <filesystem>

#include "spec/limits.h"
#include "spec/spec_input.h"

namespace hexiseq {
namespace {

using spec_internal::FieldMessage;
using spec_internal::JoinList;
using spec_internal::Lower;
using spec_internal::Quote;

constexpr const char* kGpt3Source =
    "GPT-3 paper (Brown et al. 2020, arXiv:2005.14165) Table 2.1; GPT-2 BPE vocabulary 50257, "
    "tied embeddings, GELU MLP with ffn = 4 x hidden";

constexpr double kLlama3RopeTheta = 500000.0;

ModelSpec Preset(const char* name, int layers, int hidden, int heads, int kv_heads, int head_dim,
                 int ffn_hidden, int vocab, bool gated, bool tied, std::string source) {
  ModelSpec spec;
  spec.name = name;
  spec.layers = layers;
  spec.hidden = hidden;
  spec.heads = heads;
  spec.kv_heads = kv_heads;
  spec.head_dim = head_dim;
  spec.ffn_hidden = ffn_hidden;
  spec.vocab = vocab;
  spec.gated_mlp = gated;
  spec.tied_embeddings = tied;
  spec.source = std::move(source);
  return spec;
}

std::vector<ModelSpec> MakePresets() {
  std::vector<ModelSpec> presets = {
      Preset("gpt-3b", 32, 2560, 32, 32, 80, 10240, 50257, false, true,
             std::string(kGpt3Source) + " (GPT-3 2.7B: 32 layers, d_model 2560, 32 heads of 80)"),
      Preset("gpt-7b", 32, 4096, 32, 32, 128, 16384, 50257, false, true,
             std::string(kGpt3Source) + " (GPT-3 6.7B: 32 layers, d_model 4096, 32 heads of 128)"),
      Preset("gpt-13b", 40, 5120, 40, 40, 128, 20480, 50257, false, true,
             std::string(kGpt3Source) +
                 " (GPT-3 13B: 40 layers, 40 heads of 128; the table's d_model 5140 is rounded "
                 "to 5120 = 40 x 128 as in Megatron-LM's GPT 13B configuration)"),
      Preset("llama3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, true, true,
             "Hugging Face meta-llama/Llama-3.2-3B config.json (28 layers, hidden 3072, 24 heads, "
             "8 KV heads, head_dim 128, intermediate 8192, vocab 128256, tie_word_embeddings); "
             "3.21B parameters"),
      Preset("llama2-7b", 32, 4096, 32, 32, 128, 11008, 32000, true, false,
             "Llama 2 paper (Touvron et al. 2023, arXiv:2307.09288) and Hugging Face "
             "meta-llama/Llama-2-7b-hf config.json (32 layers, hidden 4096, 32 heads, MHA, "
             "intermediate 11008, vocab 32000); 6.74B parameters"),
      Preset("llama3-8b", 32, 4096, 32, 8, 128, 14336, 128256, true, false,
             "Llama 3 paper (Dubey et al. 2024, arXiv:2407.21783) Table 3 and Hugging Face "
             "meta-llama/Meta-Llama-3-8B config.json (32 layers, hidden 4096, 32 heads, 8 KV "
             "heads, intermediate 14336, vocab 128256); 8.03B parameters"),
      Preset("llama2-13b", 40, 5120, 40, 40, 128, 13824, 32000, true, false,
             "Llama 2 paper (Touvron et al. 2023, arXiv:2307.09288) and Hugging Face "
             "meta-llama/Llama-2-13b-hf config.json (40 layers, hidden 5120, 40 heads, MHA, "
             "intermediate 13824, vocab 32000); 13.0B parameters"),
      Preset("llama3-70b", 80, 8192, 64, 8, 128, 28672, 128256, true, false,
             "Llama 3 paper (Dubey et al. 2024, arXiv:2407.21783) Table 3 and Hugging Face "
             "meta-llama/Meta-Llama-3-70B config.json (80 layers, hidden 8192, 64 heads, 8 KV "
             "heads, intermediate 28672, vocab 128256); 70.6B parameters"),
  };
  // Llama 3 configs publish rope_theta 500000 (config.json); rms_norm_eps is 1e-5 for all the
  // Llama presets (the defaults). Llama 3.2's rope_scaling is not modelled.
  for (ModelSpec& spec : presets) {
    if (spec.name.starts_with("llama3")) spec.rope_theta = kLlama3RopeTheta;
  }
  return presets;
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const ModelSpec& spec : ModelPresets()) names.push_back(spec.name);
  return names;
}

bool LooksLikePath(const std::string& text) {
  const std::string lower = Lower(text);
  auto ends_with = [&lower](const std::string& suffix) {
    return lower.size() >= suffix.size() &&
           lower.compare(lower.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return text.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml") ||
         ends_with(".json");
}

const std::vector<std::string> kModelKeys = {
    "name",  "layers",    "hidden",          "heads",  "kv_heads",   "head_dim", "ffn_hidden",
    "vocab", "gated_mlp", "tied_embeddings", "source", "rope_theta", "norm_eps"};

// rope_theta and norm_eps: optional, each a finite number > 0.
Result<void> ReadTrainingReals(const std::vector<std::pair<std::string, YAML::Node>>& entries,
                               const std::string& file, ModelSpec& spec) {
  if (YAML::Node node = spec_internal::Get(entries, "rope_theta"); node.IsDefined()) {
    auto value = spec_internal::ReadPositive(node, file + ": rope_theta", false,
                                             "the RoPE base, a number > 0 (default 10000)",
                                             "write rope_theta: 500000 for Llama 3");
    if (!value) return std::unexpected(value.error());
    spec.rope_theta = *value;
  }
  if (YAML::Node node = spec_internal::Get(entries, "norm_eps"); node.IsDefined()) {
    auto value = spec_internal::ReadPositive(node, file + ": norm_eps", false,
                                             "the RMSNorm epsilon, a number > 0 (default 1e-5)",
                                             "write norm_eps: 1e-5");
    if (!value) return std::unexpected(value.error());
    spec.norm_eps = *value;
  }
  return {};
}

using Entries = std::vector<std::pair<std::string, YAML::Node>>;

// layers, hidden, heads, kv_heads, ffn_hidden and vocab: present, whole, within bounds.
Result<void> ReadRequiredInts(const Entries& entries, const std::string& file, ModelSpec& spec) {
  const std::string required_rule =
      "a model file gives layers, hidden, heads, kv_heads, ffn_hidden and vocab, each a whole "
      "number >= 1";
  const std::string example = "see examples/models/tiny.yaml";
  struct IntField {
    const char* key;
    int* target;
    const char* hint;
    int64_t max;
  };
  for (IntField required : {
           IntField{"layers", &spec.layers, "write layers: 32", kMaxModelWidth},
           IntField{"hidden", &spec.hidden, "write hidden: 4096", kMaxModelWidth},
           IntField{"heads", &spec.heads, "write heads: 32", kMaxHeads},
           IntField{"kv_heads", &spec.kv_heads,
                    "write kv_heads: 8 (for multi-head attention, kv_heads = heads)", kMaxHeads},
           IntField{"ffn_hidden", &spec.ffn_hidden, "write ffn_hidden: 14336", kMaxModelWidth},
           IntField{"vocab", &spec.vocab, "write vocab: 128256", kMaxModelWidth},
       }) {
    const std::string where = file + ": " + required.key;
    const YAML::Node node = spec_internal::Get(entries, required.key);
    if (!node.IsDefined()) {
      return InvalidArgument(FieldMessage(where, "", "missing", required_rule,
                                          std::string(required.hint) + "; " + example));
    }
    auto value = spec_internal::ReadInt(node, where, 1, required.max,
                                        required_rule + " (bounds: docs/limits.md)", required.hint);
    if (!value) return std::unexpected(value.error());
    *required.target = static_cast<int>(*value);
  }
  return {};
}

// head_dim as given, else hidden / heads (which must divide and stay within kMaxHeadDim).
Result<void> ResolveHeadDim(const Entries& entries, const std::string& file, ModelSpec& spec) {
  if (YAML::Node node = spec_internal::Get(entries, "head_dim"); node.IsDefined()) {
    auto value = spec_internal::ReadInt(node, file + ": head_dim", 1, kMaxHeadDim,
                                        "head_dim is a whole number >= 1", "write head_dim: 128");
    if (!value) return std::unexpected(value.error());
    spec.head_dim = static_cast<int>(*value);
    return {};
  }
  if (spec.hidden % spec.heads != 0) {
    return InvalidArgument(file + ": hidden = " + std::to_string(spec.hidden) +
                           ", heads = " + std::to_string(spec.heads) +
                           ": hidden is not divisible by heads and head_dim is not given "
                           "(rule: head_dim defaults to hidden / heads; hint: set head_dim)");
  }
  if (spec.hidden / spec.heads > kMaxHeadDim) {
    return InvalidArgument(file + ": hidden = " + std::to_string(spec.hidden) +
                           ", heads = " + std::to_string(spec.heads) + ": head_dim = hidden / " +
                           "heads = " + std::to_string(spec.hidden / spec.heads) + " is above " +
                           std::to_string(kMaxHeadDim) +
                           " (rule: head_dim defaults to hidden / heads and is at most " +
                           std::to_string(kMaxHeadDim) +
                           ", docs/limits.md; hint: check hidden and heads, or set head_dim)");
  }
  spec.head_dim = spec.hidden / spec.heads;
  return {};
}

Result<void> CheckKvHeadsDivide(const std::string& file, const ModelSpec& spec) {
  if (spec.heads % spec.kv_heads == 0) return {};
  std::vector<std::string> divisors;
  for (int candidate = 1; candidate <= spec.heads; ++candidate) {
    if (spec.heads % candidate == 0) divisors.push_back(std::to_string(candidate));
  }
  return InvalidArgument(file + ": heads = " + std::to_string(spec.heads) +
                         ", kv_heads = " + std::to_string(spec.kv_heads) +
                         ": heads must be divisible by kv_heads (rule: grouped-query "
                         "attention shares each KV head among heads / kv_heads query heads; "
                         "hint: kv_heads must divide " +
                         std::to_string(spec.heads) + ": use " + JoinList(divisors, "or") + ")");
}

// gated_mlp and tied_embeddings, where given.
Result<void> ReadMlpFlags(const Entries& entries, const std::string& file, ModelSpec& spec) {
  if (YAML::Node node = spec_internal::Get(entries, "gated_mlp"); node.IsDefined()) {
    auto value = spec_internal::ReadBool(node, file + ": gated_mlp",
                                         "true for a SwiGLU MLP (3 matrices), false for GELU (2)");
    if (!value) return std::unexpected(value.error());
    spec.gated_mlp = *value;
  }
  if (YAML::Node node = spec_internal::Get(entries, "tied_embeddings"); node.IsDefined()) {
    auto value = spec_internal::ReadBool(node, file + ": tied_embeddings",
                                         "true when the output head shares the input embedding");
    if (!value) return std::unexpected(value.error());
    spec.tied_embeddings = *value;
  }
  return {};
}

// name and source, where given (free text).
Result<void> ReadNameAndSource(const Entries& entries, const std::string& file, ModelSpec& spec) {
  for (const char* key : {"name", "source"}) {
    const YAML::Node node = spec_internal::Get(entries, key);
    if (!node.IsDefined()) continue;
    auto text = spec_internal::ScalarText(node, file + ": " + key, "free text", "quote it");
    if (!text) return std::unexpected(text.error());
    (std::string(key) == "name" ? spec.name : spec.source) = *text;
  }
  return {};
}

Result<ModelSpec> ParseModelRoot(const YAML::Node& root, const std::string& file) {
  auto entries = spec_internal::CheckedEntries(root, file + ":", kModelKeys, "a model file");
  if (!entries) return std::unexpected(entries.error());
  ModelSpec spec;
  spec.name = spec_internal::FileStem(file);
  spec.source = file;
  if (auto step = ReadRequiredInts(*entries, file, spec); !step)
    return std::unexpected(step.error());
  if (auto step = ResolveHeadDim(*entries, file, spec); !step) return std::unexpected(step.error());
  if (auto step = CheckKvHeadsDivide(file, spec); !step) return std::unexpected(step.error());
  if (auto step = ReadMlpFlags(*entries, file, spec); !step) return std::unexpected(step.error());
  if (auto step = ReadTrainingReals(*entries, file, spec); !step)
    return std::unexpected(step.error());
  if (auto step = ReadNameAndSource(*entries, file, spec); !step)
    return std::unexpected(step.error());
  return spec;
}

}  // namespace

double ModelSpec::QkvParams() const {
  const double q_width = static_cast<double>(heads) * head_dim;
  const double kv_width = static_cast<double>(kv_heads) * head_dim;
  return static_cast<double>(hidden) * (q_width + 2 * kv_width);
}

double ModelSpec::MlpParams() const {
  constexpr double kGatedMatrices = 3, kPlainMatrices = 2;
  return (gated_mlp ? kGatedMatrices : kPlainMatrices) * hidden * static_cast<double>(ffn_hidden);
}

double ModelSpec::LayerGemmParams() const {
  const double output_projection = static_cast<double>(heads) * head_dim * hidden;
  return QkvParams() + output_projection + MlpParams();
}

double ModelSpec::TotalParams() const {
  const double h = hidden;
  const double embeddings = (tied_embeddings ? 1.0 : 2.0) * vocab * h;
  return layers * (LayerGemmParams() + 2 * h) + embeddings + h;
}

double ModelSpec::GradBucketParams() const { return TotalParams() / layers; }

const std::vector<ModelSpec>& ModelPresets() {
  static const std::vector<ModelSpec> presets = MakePresets();
  return presets;
}

Result<ModelSpec> ParseModel(const std::string& text, const std::string& source_name) {
  auto root = spec_internal::ParseYamlDocument(
      text, source_name, "model file",
      "see examples/models/tiny.yaml (layers, hidden, heads, kv_heads, ffn_hidden, vocab)", false);
  if (!root) return std::unexpected(root.error());
  try {
    return ParseModelRoot(*root, source_name);
  } catch (const std::exception& e) {
    return InvalidArgument(source_name + ": cannot read the model file: " + e.what() +
                           " (rule: a YAML mapping; hint: see examples/models/tiny.yaml)");
  }
}

Result<ModelSpec> LoadModel(const std::string& name_or_path) {
  const std::string lower = Lower(name_or_path);
  for (const ModelSpec& spec : ModelPresets()) {
    if (Lower(spec.name) == lower) return spec;
  }
  std::error_code fs_error;
  const bool exists = std::filesystem::exists(name_or_path, fs_error);
  if (exists || LooksLikePath(name_or_path)) {
    auto text = spec_internal::ReadTextFile(name_or_path, "model file");
    if (!text) return std::unexpected(text.error());
    return ParseModel(*text, name_or_path);
  }
  const auto closest = spec_internal::ClosestNames(name_or_path, PresetNames(), 1);
  return InvalidArgument("unknown model '" + name_or_path +
                         "' (rule: a preset name or a YAML file; hint: " +
                         (closest.empty() ? "" : "did you mean " + closest[0] + "? ") +
                         "presets are " + JoinList(PresetNames(), "and") + ")");
}

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "full";
}

Result<Recompute> ParseRecompute(const std::string& text) {
  const std::string lower = Lower(spec_internal::Trim(text));
  if (lower == "none") return Recompute::kNone;
  if (lower == "selective") return Recompute::kSelective;
  if (lower == "full") return Recompute::kFull;
  return InvalidArgument(FieldMessage("--recompute", Quote(text), "not a recompute policy",
                                      "one of full, selective, none",
                                      "full is the norm for long context"));
}

const char* DtypeName(int bytes_per_element) {
  constexpr int kFp8Bytes = 1, kFp32Bytes = 4;
  return bytes_per_element == kFp32Bytes ? "fp32" : bytes_per_element == kFp8Bytes ? "fp8" : "bf16";
}

Result<int> ParseDtype(const std::string& text) {
  const std::string lower = Lower(spec_internal::Trim(text));
  if (lower == "bf16") return 2;
  if (lower == "fp32") return 4;
  return InvalidArgument(FieldMessage("--dtype", Quote(text), "not a precision", "bf16 or fp32",
                                      "bf16 as GPU training runs; fp32 as hexiseq train runs"));
}

Result<void> ValidateWorkload(const Workload& w) {
  if (w.seq_len < 1 || w.seq_len > kMaxSeqLen) {
    return InvalidArgument(
        FieldMessage("--seq", std::to_string(w.seq_len),
                     w.seq_len < 1 ? "must be >= 1" : "must be <= " + std::to_string(kMaxSeqLen),
                     "a whole number of tokens >= 1, optionally with suffix "
                     "K (x1024) or M (x1048576)",
                     "write 256K or 1M"));
  }
  if (w.batch < 1 || w.batch > kMaxBatch) {
    return InvalidArgument(
        FieldMessage("--batch", std::to_string(w.batch),
                     w.batch < 1 ? "must be >= 1" : "must be <= " + std::to_string(kMaxBatch),
                     "sequences per iteration, a whole number >= 1", "write --batch 1"));
  }
  if (w.zero_stage < 0 || w.zero_stage > 3) {
    return InvalidArgument(FieldMessage("--zero", std::to_string(w.zero_stage),
                                        "must be 0, 1, 2 or 3", "a ZeRO stage",
                                        "3 shards weights, gradients and Adam state"));
  }
  if (!(w.memory_reserve >= 0 && w.memory_reserve < 1)) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%g", w.memory_reserve);
    return InvalidArgument(FieldMessage("--memory-reserve", buf, "must be in [0, 1)",
                                        "the fraction of each device's memory kept free",
                                        "write --memory-reserve 0.1"));
  }
  if (w.bytes_per_element != 1 && w.bytes_per_element != 2 && w.bytes_per_element != 4) {
    return InvalidArgument(FieldMessage("bytes_per_element", std::to_string(w.bytes_per_element),
                                        "must be 1, 2 or 4", "bytes of one activation element",
                                        "bf16 is 2"));
  }
  return {};
}

}  // namespace hexiseq
