// The 1-rank trainer against an independent PyTorch reference (tests/train/reference_llama.py,
// torch.nn.functional, Debian python3-torch): the same safetensors weights and tokens give the
// same loss and every parameter gradient within 1e-5 relative. Skipped with a message where
// python3 or its torch module is missing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "runtime/comm.h"
#include "runtime/plan_gen_util.h"
#include "train/safetensors.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace hexiseq::train {
namespace {

namespace fs = std::filesystem;
constexpr double kTolerance = 1e-5;
constexpr int64_t kSeq = 64;
constexpr int kBatch = 2;
constexpr const char* kPython = "/usr/bin/python3";

std::string SourceDir() {
  const char* dir = std::getenv("HEXISEQ_SOURCE_DIR");
  return dir ? dir : HEXISEQ_TRAIN_TEST_SOURCE_DIR;
}

NamedTensor ToNamed(const std::string& name, const at::Tensor& tensor) {
  const at::Tensor t = tensor.detach().to(at::kFloat).contiguous();
  NamedTensor named{name, DType::kF32, t.sizes().vec(), {}};
  named.data.resize(t.numel() * sizeof(float));
  std::memcpy(named.data.data(), t.data_ptr(), named.data.size());
  return named;
}

std::vector<float> Floats(const NamedTensor& tensor) {
  std::vector<float> values(tensor.data.size() / sizeof(float));
  std::memcpy(values.data(), tensor.data.data(), tensor.data.size());
  return values;
}

TEST(PyTorchReference, LossAndGradientsMatch) {
  const std::string script = SourceDir() + "/tests/train/reference_llama.py";
  if (!fs::exists(script)) GTEST_SKIP() << "reference script " << script << " not found";
  if (std::system((std::string(kPython) + " -c 'import torch' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "python3-torch is not installed (scripts/setup installs it); the PyTorch "
                    "reference comparison is skipped";
  }
  const fs::path dir = fs::path(::testing::TempDir()) / "hexiseq_reference";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const ModelSpec model = testing::TinyLlama();
  {
    std::ofstream yaml(dir / "model.yaml");
    yaml << "layers: 2\nhidden: 64\nheads: 8\nkv_heads: 2\nhead_dim: 8\nffn_hidden: 128\n"
            "vocab: 256\nrope_theta: 10000\nnorm_eps: 1e-5\n";
  }
  TrainOptions options;
  options.batch = kBatch;
  options.seed = 21;
  LossReport report;
  std::vector<NamedTensor> weights, grads;
  std::string error;
  runtime::RunInProcess(1, [&](runtime::Comm& comm) {
    auto trainer = Trainer::Create(
        testing::WithBatch(testing::RingPlan(1, kSeq, 8, 2, false), kBatch), model, options, comm);
    if (!trainer) return void(error = trainer.error().message);
    std::vector<Sequence> sequences;
    std::ofstream tokens(dir / "tokens.bin", std::ios::binary);
    for (int index = 0; index < kBatch; ++index) {
      sequences.push_back((*trainer)->data().Get(index));
      tokens.write(reinterpret_cast<const char*>(sequences.back().tokens.data()),
                   (kSeq + 1) * sizeof(int64_t));
    }
    auto loss = (*trainer)->ComputeGradients(sequences);
    if (!loss) return void(error = loss.error().message);
    report = *loss;
    for (const NamedTensorRef& param : NamedParameters((*trainer)->weights())) {
      weights.push_back(ToNamed(param.name, param.tensor));
      grads.push_back(ToNamed(param.name, param.tensor.grad()));
    }
  });
  ASSERT_EQ(error, "");
  ASSERT_TRUE(WriteSafetensors((dir / "weights.safetensors").string(), weights));
  const std::string command =
      std::string(kPython) + " " + script + " --model " + (dir / "model.yaml").string() +
      " --weights " + (dir / "weights.safetensors").string() + " --tokens " +
      (dir / "tokens.bin").string() + " --seq " + std::to_string(kSeq) + " --batch " +
      std::to_string(kBatch) + " -o " + (dir / "out.safetensors").string();
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  auto out = ReadSafetensors((dir / "out.safetensors").string());
  ASSERT_TRUE(out) << out.error().message;
  const NamedTensor* loss = FindTensor(*out, "loss");
  ASSERT_NE(loss, nullptr);
  ASSERT_EQ(loss->dtype, DType::kF64);
  double reference_loss = 0;
  std::memcpy(&reference_loss, loss->data.data(), sizeof reference_loss);
  EXPECT_NEAR(report.loss, reference_loss, kTolerance * std::abs(reference_loss));
  for (const NamedTensor& grad : grads) {
    const NamedTensor* expected = FindTensor(*out, grad.name);
    ASSERT_NE(expected, nullptr) << grad.name;
    ASSERT_EQ(expected->shape, grad.shape) << grad.name;
    EXPECT_LE(testing::RelativeError(Floats(grad), Floats(*expected)), kTolerance) << grad.name;
  }
}

}  // namespace
}  // namespace hexiseq::train
