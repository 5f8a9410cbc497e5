// Checkpoints: a run resumed from step k gives bit-identical losses and weights to an
// uninterrupted run (same plan and rank count); a save interrupted before `latest` is updated
// leaves the previous checkpoint loadable; resuming with other flags is an error; --init loads
// HF-named weights and rejects missing, extra, wrongly shaped, NaN, truncated and garbage files.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>

#include "runtime/comm.h"
#include "runtime/plan_gen_util.h"
#include "train/safetensors.h"
#include "train/train_test_util.h"

namespace hexiseq::train {
namespace {

namespace fs = std::filesystem;
using hexiseq::testing::TinyLlama;
using hexiseq::testing::UspPlan;
using hexiseq::testing::WithBatch;

TrainOptions Options() {
  TrainOptions options;
  options.seed = 11;
  options.batch = 2;
  options.optimizer.lr = 3e-3;
  options.optimizer.warmup_steps = 2;
  options.optimizer.total_steps = 8;
  options.optimizer.weight_decay = 0.01;
  return options;
}

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("hexiseq_ckpt_" + name);
  fs::remove_all(dir);
  return dir.string();
}

struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;  // rank 0, NamedParameters order
  std::string error;
};

std::vector<std::vector<float>> Snapshot(Trainer& trainer) {
  std::vector<std::vector<float>> out;
  for (const NamedTensorRef& param : NamedParameters(trainer.weights())) {
    const at::Tensor flat = param.tensor.detach().contiguous().view(-1);
    out.emplace_back(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  }
  return out;
}

// Runs `steps` steps on a 4-rank USP plan: optionally resuming from `resume`, saving to `save`
// after step `save_after` (number of steps done).
Outcome RunSteps(int steps, const std::string& resume, const std::string& save, int save_after) {
  const Plan plan = UspPlan(2, 2, 64, 8, 2);
  Outcome outcome;
  std::mutex mu;
  runtime::RunInProcess(plan.num_ranks, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(WithBatch(plan, Options().batch), TinyLlama(), Options(), comm);
    auto fail = [&](const std::string& message) {
      std::lock_guard lock(mu);
      if (outcome.error.empty()) outcome.error = message;
    };
    if (!trainer) return fail(trainer.error().message);
    if (!resume.empty()) {
      if (auto loaded = LoadCheckpoint(**trainer, resume); !loaded) {
        return fail(loaded.error().message);
      }
    }
    while ((*trainer)->step() < steps) {
      auto report = (*trainer)->Step();
      if (!report) return fail(report.error().message);
      if (comm.rank() == 0) outcome.losses.push_back(report->loss);
      if (!save.empty() && (*trainer)->step() == save_after) {
        if (auto saved = SaveCheckpoint(**trainer, save); !saved) {
          return fail(saved.error().message);
        }
      }
    }
    if (comm.rank() == 0) outcome.weights = Snapshot(**trainer);
  });
  return outcome;
}

TEST(Checkpoint, ResumeIsBitIdentical) {
  const std::string dir = TempDir("resume");
  const Outcome full = RunSteps(6, "", dir, 3);
  ASSERT_EQ(full.error, "");
  const Outcome resumed = RunSteps(6, dir, "", 0);
  ASSERT_EQ(resumed.error, "");
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t step = 0; step < 3; ++step) {
    EXPECT_EQ(resumed.losses[step], full.losses[step + 3]) << "step " << step + 3;
  }
  ASSERT_EQ(resumed.weights.size(), full.weights.size());
  for (size_t index = 0; index < full.weights.size(); ++index) {
    EXPECT_EQ(std::memcmp(resumed.weights[index].data(), full.weights[index].data(),
                          full.weights[index].size() * sizeof(float)),
              0)
        << "parameter " << index;
  }
  // HF names in the weights file.
  auto file = ReadSafetensors(dir + "/step-00000003/model.safetensors");
  ASSERT_TRUE(file) << file.error().message;
  EXPECT_NE(FindTensor(*file, "model.layers.1.self_attn.k_proj.weight"), nullptr);
  EXPECT_NE(FindTensor(*file, "lm_head.weight"), nullptr);
}

TEST(Checkpoint, InterruptedSaveLeavesThePreviousOneLoadable) {
  const std::string dir = TempDir("interrupted");
  const Outcome full = RunSteps(4, "", dir, 2);
  ASSERT_EQ(full.error, "");
  // A save killed after writing part of step 4's weights: `latest` still names step 2.
  fs::create_directories(dir + "/step-00000004");
  std::ofstream(dir + "/step-00000004/model.safetensors", std::ios::binary) << "\x10\x00";
  std::ofstream(dir + "/step-00000004/.model.safetensors.tmp", std::ios::binary) << "partial";
  const Outcome resumed = RunSteps(4, dir, "", 0);
  ASSERT_EQ(resumed.error, "");
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.losses[0], full.losses[2]);
}

TEST(Checkpoint, ResumeWithOtherSeedIsAnError) {
  const std::string dir = TempDir("mismatch");
  ASSERT_EQ(RunSteps(1, "", dir, 1).error, "");
  const Plan plan = UspPlan(2, 2, 64, 8, 2);
  std::string error;
  std::mutex mu;
  runtime::RunInProcess(4, [&](runtime::Comm& comm) {
    TrainOptions options = Options();
    options.seed = 12;
    auto trainer = Trainer::Create(WithBatch(plan, options.batch), TinyLlama(), options, comm);
    ASSERT_TRUE(trainer);
    auto loaded = LoadCheckpoint(**trainer, dir);
    std::lock_guard lock(mu);
    if (!loaded && comm.rank() == 0) error = loaded.error().message;
  });
  EXPECT_NE(error.find("seed = 11 but this run has 12"), std::string::npos) << error;
}

// --init on one rank with a file built from `edit` applied to the model's own weights.
std::string InitError(const std::function<void(std::vector<NamedTensor>&)>& edit,
                      const std::string& raw = "") {
  const std::string path = TempDir("init") + ".safetensors";
  const Plan plan = UspPlan(1, 1, 32, 8, 2);
  std::string error = "no error";
  runtime::RunInProcess(1, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(WithBatch(plan, Options().batch), TinyLlama(), Options(), comm);
    ASSERT_TRUE(trainer);
    if (raw.empty()) {
      std::vector<NamedTensor> tensors;
      for (const NamedTensorRef& param : NamedParameters((*trainer)->weights())) {
        const at::Tensor t = param.tensor.detach().contiguous();
        NamedTensor named{param.name, DType::kF32, t.sizes().vec(), {}};
        named.data.resize(t.numel() * 4);
        std::memcpy(named.data.data(), t.data_ptr(), named.data.size());
        tensors.push_back(std::move(named));
      }
      edit(tensors);
      ASSERT_TRUE(WriteSafetensors(path, tensors));
    } else {
      std::ofstream(path, std::ios::binary) << raw;
    }
    auto loaded = LoadInitWeights(**trainer, path);
    if (!loaded) error = loaded.error().message;
  });
  return error;
}

TEST(InitWeights, LoadsAndRejectsBadFiles) {
  EXPECT_EQ(InitError([](auto&) {}), "no error");
  EXPECT_NE(InitError([](auto& t) {
              t.erase(t.begin() + 2);
            }).find("model.layers.0.self_attn.k_proj.weight is missing"),
            std::string::npos);
  EXPECT_NE(
      InitError([](auto& t) {
        t.push_back(
            {"model.layers.9.mlp.up_proj.weight", DType::kF32, {1}, std::vector<std::byte>(4)});
      }).find("model.layers.9.mlp.up_proj.weight: not a parameter of this model"),
      std::string::npos);
  EXPECT_NE(InitError([](auto& t) {
              t[0].shape = {128, 128};
            }).find("model.embed_tokens.weight: shape [128, 128] but the model needs [256, 64]"),
            std::string::npos);
  const std::string nan_error = InitError([](auto& t) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(t[1].data.data() + 8, &nan, 4);
  });
  EXPECT_NE(nan_error.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos)
      << nan_error;
  EXPECT_NE(InitError({}, std::string("\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":", 13)), "no error");
  EXPECT_NE(InitError({}, "garbage"), "no error");
}

TEST(NonFiniteLoss, StopsNamingTheStepBeforeUpdating) {
  const std::string dir = TempDir("nonfinite");
  const Plan plan = UspPlan(2, 1, 32, 8, 2);
  std::string error;
  std::mutex mu;
  runtime::RunInProcess(2, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(WithBatch(plan, Options().batch), TinyLlama(), Options(), comm);
    ASSERT_TRUE(trainer);
    ASSERT_TRUE((*trainer)->Step());
    ASSERT_TRUE(SaveCheckpoint(**trainer, dir));
    {
      at::NoGradGuard no_grad;
      (*trainer)->weights().layers[0].up_proj.fill_(std::numeric_limits<float>::infinity());
    }
    const std::vector<std::vector<float>> before = Snapshot(**trainer);
    auto report = (*trainer)->Step();
    ASSERT_FALSE(report);
    EXPECT_EQ((*trainer)->step(), 1);
    (*trainer)->GatherWeights();  // ZeRO 3 (the plan's): the step released the others' weights
    const std::vector<std::vector<float>> after = Snapshot(**trainer);
    for (size_t index = 0; index < before.size(); ++index) {
      EXPECT_EQ(std::memcmp(before[index].data(), after[index].data(), before[index].size() * 4),
                0);
    }
    std::lock_guard lock(mu);
    if (comm.rank() == 0) error = report.error().message;
  });
  EXPECT_NE(error.find("step 1: loss = "), std::string::npos) << error;
  EXPECT_NE(error.find("not finite, training stopped before updating"), std::string::npos);
  // The checkpoint of step 1 is still the latest.
  std::ifstream latest(dir + "/latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-00000001");
}

}  // namespace
}  // namespace hexiseq::train
