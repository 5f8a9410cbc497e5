// rope_theta and norm_eps in model files and presets (used by the trainer): defaults, the Llama 3
// presets' published rope_theta, parsing and bad values.
#include <gtest/gtest.h>

#include "spec/model.h"

namespace hexiseq {
namespace {

constexpr const char* kBase =
    "layers: 2\nhidden: 64\nheads: 8\nkv_heads: 2\nffn_hidden: 128\nvocab: 256\n";

TEST(ModelTrainingFields, DefaultsAndPresets) {
  auto parsed = ParseModel(kBase, "m.yaml");
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->rope_theta, 10000.0);
  EXPECT_EQ(parsed->norm_eps, 1e-5);
  EXPECT_EQ(LoadModel("llama3-8b")->rope_theta, 500000.0);
  EXPECT_EQ(LoadModel("llama3.2-3b")->rope_theta, 500000.0);
  EXPECT_EQ(LoadModel("llama2-7b")->rope_theta, 10000.0);
  EXPECT_EQ(LoadModel("llama3-70b")->norm_eps, 1e-5);
}

TEST(ModelTrainingFields, Parsed) {
  auto parsed = ParseModel(std::string(kBase) + "rope_theta: 500000\nnorm_eps: 1e-6\n", "m.yaml");
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->rope_theta, 500000.0);
  EXPECT_EQ(parsed->norm_eps, 1e-6);
}

TEST(ModelTrainingFields, BadValues) {
  auto theta = ParseModel(std::string(kBase) + "rope_theta: -3\n", "m.yaml");
  ASSERT_FALSE(theta);
  EXPECT_NE(theta.error().message.find("m.yaml: rope_theta"), std::string::npos)
      << theta.error().message;
  auto eps = ParseModel(std::string(kBase) + "norm_eps: tiny\n", "m.yaml");
  ASSERT_FALSE(eps);
  EXPECT_NE(eps.error().message.find("m.yaml: norm_eps"), std::string::npos) << eps.error().message;
}

}  // namespace
}  // namespace hexiseq
