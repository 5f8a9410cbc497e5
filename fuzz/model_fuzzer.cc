// Fuzzes the model file reader (ParseModel): any input is either a clear error naming the file,
// or a model inside the stated bounds whose parameter counts are finite and positive.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_checks.h"
#include "spec/limits.h"
#include "spec/model.h"

namespace hexiseq::fuzz {
namespace {

constexpr const char* kSource = "fuzz-model.yaml";

void RequireBetween(int64_t value, int64_t min, int64_t max, const std::string& field) {
  Require(value >= min && value <= max,
          field + " in [" + std::to_string(min) + ", " + std::to_string(max) + "]",
          std::to_string(value));
}

void CheckModel(const ModelSpec& model) {
  RequireBetween(model.layers, 1, kMaxModelWidth, "layers");
  RequireBetween(model.hidden, 1, kMaxModelWidth, "hidden");
  RequireBetween(model.heads, 1, kMaxHeads, "heads");
  RequireBetween(model.kv_heads, 1, model.heads, "kv_heads");
  Require(model.heads % model.kv_heads == 0, "heads % kv_heads == 0");
  RequireBetween(model.head_dim, 1, kMaxHeadDim, "head_dim");
  RequireBetween(model.ffn_hidden, 1, kMaxModelWidth, "ffn_hidden");
  RequireBetween(model.vocab, 1, kMaxModelWidth, "vocab");
  Require(std::isfinite(model.rope_theta) && model.rope_theta > 0, "rope_theta positive");
  Require(std::isfinite(model.norm_eps) && model.norm_eps > 0, "norm_eps positive");
  for (double params :
       {model.LayerGemmParams(), model.QkvParams(), model.MlpParams(), model.TotalParams()})
    Require(std::isfinite(params) && params > 0, "parameter counts finite and positive");
}

}  // namespace
}  // namespace hexiseq::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hexiseq;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<ModelSpec> model = ParseModel(text, fuzz::kSource);
  if (!model) {
    fuzz::CheckError(model.error(), fuzz::kSource, fuzz::kMaxReaderMessageBytes);
    return 0;
  }
  fuzz::CheckModel(*model);
  return 0;
}
