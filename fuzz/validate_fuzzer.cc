// Fuzzes plan validation: the input is read as a plan (ParsePlanJson) and validated against the
// example cluster with as many ranks (else a one-node cluster of that size, up to
// kMaxGeneratedRanks) and the model it names (a preset or examples/models/tiny.yaml; else one with
// its head counts). Validate must judge every plan without crashing, with a readable message, and
// a plan it accepts must pass ValidateStructure too (the runtime's check).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "fuzz_checks.h"
#include "plan/plan.h"
#include "spec/cluster.h"
#include "spec/model.h"

#ifndef HEXISEQ_SOURCE_DIR
#error "HEXISEQ_SOURCE_DIR must name the repository root (the example clusters and models)"
#endif

namespace hexiseq::fuzz {
namespace {

constexpr const char* kSource = "fuzz-plan.json";
constexpr int kMaxGeneratedRanks = 64;
constexpr double kGeneratedNicBytesPerSecond = 25e9;

std::string Example(const std::string& relative) {
  return std::string(HEXISEQ_SOURCE_DIR) + "/examples/" + relative;
}

template <class T>
const T& OrDie(const Result<T>& result, const std::string& what) {
  if (!result) Fail("the harness's inputs load (" + what + ")", result.error().message);
  return *result;
}

struct Presets {
  std::vector<Cluster> clusters;
  std::vector<ModelSpec> models;
};

const Presets& LoadPresets() {
  static const Presets presets = [] {
    Presets loaded;
    const DeviceCatalog catalog;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(Example("clusters")))
      files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& file : files)
      loaded.clusters.push_back(OrDie(LoadCluster(file.string(), catalog), file.string()));
    loaded.models = ModelPresets();
    loaded.models.push_back(OrDie(LoadModel(Example("models/tiny.yaml")), "tiny.yaml"));
    return loaded;
  }();
  return presets;
}

// The example cluster with the plan's rank count, else a one-node cluster of that many GPUs
// (made once per size).
const Cluster& ClusterFor(const Plan& plan) {
  for (const Cluster& cluster : LoadPresets().clusters)
    if (cluster.num_ranks() == plan.num_ranks) return cluster;
  static std::map<int, Cluster> generated;
  const int ranks = std::clamp(plan.num_ranks, 1, kMaxGeneratedRanks);
  auto [it, inserted] = generated.try_emplace(ranks);
  if (inserted)
    it->second = MakeCluster({BuiltinDevices().front()}, {1}, ranks, kGeneratedNicBytesPerSecond);
  return it->second;
}

// The model the plan names, else one with its head counts, else the last (tiny).
const ModelSpec& ModelFor(const Plan& plan) {
  const std::vector<ModelSpec>& models = LoadPresets().models;
  for (const ModelSpec& model : models)
    if (model.name == plan.model) return model;
  for (const ModelSpec& model : models)
    if (model.heads == plan.num_heads && model.kv_heads == plan.num_kv_heads) return model;
  return models.back();
}

}  // namespace
}  // namespace hexiseq::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hexiseq;
  const std::string text(reinterpret_cast<const char*>(data), size);
  Result<Plan> plan = ParsePlanJson(text, fuzz::kSource);
  if (!plan) return 0;  // the plan reader's own fuzzer checks its errors
  Result<void> valid = Validate(*plan, fuzz::ClusterFor(*plan), fuzz::ModelFor(*plan));
  if (!valid) {
    fuzz::CheckError(valid.error(), "", fuzz::kMaxValidateMessageBytes);
    return 0;
  }
  Result<void> structure = ValidateStructure(*plan);
  fuzz::Require(structure.has_value(), "a plan that validates passes ValidateStructure",
                structure ? "" : structure.error().message);
  return 0;
}
