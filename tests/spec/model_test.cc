// Model presets against their published parameter totals, the parameter formulas against hand
// arithmetic, model YAML files and their errors, recompute policies and workload validation.
#include "spec/model.h"

#include <gtest/gtest.h>

#include "spec_test_util.h"

namespace hexiseq {
namespace {

Result<ModelSpec> Preset(const std::string& name) { return LoadModel(name); }

TEST(ModelTest, PresetNamesAndSources) {
  std::vector<std::string> names;
  for (const ModelSpec& spec : ModelPresets()) {
    names.push_back(spec.name);
    EXPECT_FALSE(spec.source.empty()) << spec.name;
    EXPECT_EQ(spec.heads % spec.kv_heads, 0) << spec.name;
    EXPECT_GT(spec.head_dim, 0) << spec.name;
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"gpt-3b", "gpt-7b", "gpt-13b", "llama3.2-3b", "llama2-7b",
                                      "llama3-8b", "llama2-13b", "llama3-70b"}));
}

TEST(ModelTest, ParamCountsMatchPublishedTotals) {
  struct Published {
    const char* name;
    double params;  // from the model card / paper
  };
  for (const Published& p : {Published{"gpt-3b", 2.7e9}, Published{"gpt-7b", 6.7e9},
                             Published{"gpt-13b", 13.0e9}, Published{"llama3.2-3b", 3.21e9},
                             Published{"llama2-7b", 6.74e9}, Published{"llama3-8b", 8.03e9},
                             Published{"llama2-13b", 13.02e9}, Published{"llama3-70b", 70.55e9}}) {
    auto spec = Preset(p.name);
    ASSERT_TRUE(spec) << spec.error().message;
    const double relative = std::abs(spec->TotalParams() - p.params) / p.params;
    // GPT-3 totals are rounded in the paper (and include position embeddings and biases).
    EXPECT_LT(relative, 0.03) << p.name << ": " << spec->TotalParams();
  }
  EXPECT_NEAR(Preset("llama3-8b")->TotalParams(), 8.03e9, 0.01 * 8.03e9);
  EXPECT_NEAR(Preset("llama3-70b")->TotalParams(), 70.55e9, 0.01 * 70.55e9);
  EXPECT_NEAR(Preset("llama2-7b")->TotalParams(), 6.74e9, 0.01 * 6.74e9);
}

TEST(ModelTest, LayerGemmParamsByHand) {
  // llama3-8b: Q 4096x4096, K and V 4096x1024 each, O 4096x4096, SwiGLU 3 x 4096 x 14336.
  const ModelSpec llama = *Preset("llama3-8b");
  EXPECT_DOUBLE_EQ(llama.LayerGemmParams(),
                   16777216.0 + 2 * 4194304.0 + 16777216.0 + 3 * 58720256.0);
  EXPECT_EQ(llama.heads_per_kv(), 4);
  // gpt-3b: MHA 4 x 2560^2, GELU MLP 2 x 2560 x 10240 = 12 x 2560^2.
  const ModelSpec gpt = *Preset("gpt-3b");
  EXPECT_DOUBLE_EQ(gpt.LayerGemmParams(), 12.0 * 2560 * 2560);
  EXPECT_FALSE(gpt.gated_mlp);
  EXPECT_TRUE(gpt.tied_embeddings);
  // TotalParams: layers x (gemm + 2 norms) + embeddings (once when tied) + final norm.
  EXPECT_DOUBLE_EQ(gpt.TotalParams(), 32 * (12.0 * 2560 * 2560 + 2 * 2560) + 50257.0 * 2560 + 2560);
  EXPECT_DOUBLE_EQ(llama.TotalParams(),
                   32 * (llama.LayerGemmParams() + 2 * 4096) + 2 * 128256.0 * 4096 + 4096);
}

TEST(ModelTest, PresetLookupIsCaseInsensitive) {
  auto spec = LoadModel("LLaMA3-8B");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->name, "llama3-8b");
  EXPECT_EQ(spec->kv_heads, 8);
  EXPECT_EQ(LoadModel("Llama3-70B")->layers, 80);
}

TEST(ModelTest, UnknownPresetListsPresets) {
  auto result = LoadModel("llama9");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(result.error().message,
            "unknown model 'llama9' (rule: a preset name or a YAML file; hint: did you mean "
            "llama2-7b? presets are gpt-3b, gpt-7b, gpt-13b, llama3.2-3b, llama2-7b, llama3-8b, "
            "llama2-13b and llama3-70b)");
}

TEST(ModelTest, MissingModelFileIsAnIoError) {
  spec_test::TempDir dir;
  auto result = LoadModel(dir.Path("absent.yaml"));
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kIo);
  EXPECT_NE(result.error().message.find("absent.yaml: cannot read the model file: No such file"),
            std::string::npos)
      << result.error().message;
}

TEST(ModelTest, LoadsTheTinyExample) {
  auto spec = LoadModel(spec_test::SourceDir() + "/examples/models/tiny.yaml");
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->name, "tiny");
  EXPECT_EQ(spec->layers, 2);
  EXPECT_EQ(spec->hidden, 64);
  EXPECT_EQ(spec->heads, 8);
  EXPECT_EQ(spec->kv_heads, 2);
  EXPECT_EQ(spec->head_dim, 8);
  EXPECT_EQ(spec->ffn_hidden, 128);
  EXPECT_EQ(spec->vocab, 256);
  EXPECT_TRUE(spec->gated_mlp);
}

TEST(ModelTest, YamlFileOptionalFields) {
  spec_test::TempDir dir;
  auto spec = LoadModel(dir.Write("m.yaml",
                                  "layers: 4\nhidden: 96\nheads: 6\nkv_heads: 6\n"
                                  "head_dim: 32\nffn_hidden: 384\nvocab: 1000\n"
                                  "gated_mlp: false\ntied_embeddings: true\n"));
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->name, "m");  // the file stem
  EXPECT_EQ(spec->head_dim, 32);
  EXPECT_FALSE(spec->gated_mlp);
  EXPECT_TRUE(spec->tied_embeddings);
  // 96 x 192 (Q) + 2 x 96 x 192 (K, V) + 192 x 96 (O) + 2 x 96 x 384.
  EXPECT_DOUBLE_EQ(spec->LayerGemmParams(), 96.0 * 192 * 4 + 2.0 * 96 * 384);
}

void ExpectModelError(const std::string& text, const std::vector<std::string>& parts) {
  auto result = ParseModel(text, "m.yaml");
  ASSERT_FALSE(result) << text;
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
  for (const std::string& part : parts) {
    EXPECT_NE(result.error().message.find(part), std::string::npos)
        << "message: " << result.error().message << "\nexpected to contain: " << part;
  }
}

constexpr const char* kFields = "hidden: 64\nheads: 8\nffn_hidden: 128\nvocab: 256\n";

TEST(ModelTest, YamlErrors) {
  ExpectModelError(std::string("layers: 2\n") + kFields,
                   {"m.yaml: kv_heads: missing (rule: a model file gives layers, hidden, heads, "
                    "kv_heads, ffn_hidden and vocab, each a whole number >= 1; hint: write "
                    "kv_heads: 8 (for multi-head attention, kv_heads = heads)"});
  ExpectModelError(std::string("layers: 0\nkv_heads: 2\n") + kFields,
                   {"m.yaml: layers = 0: must be >= 1 (rule: a model file gives",
                    "hint: write "
                    "layers: 32)"});
  ExpectModelError(std::string("layers: -4\nkv_heads: 2\n") + kFields,
                   {"m.yaml: layers = -4: must be >= 1"});
  ExpectModelError(std::string("layers: two\nkv_heads: 2\n") + kFields,
                   {"m.yaml: layers = \"two\": not a whole number"});
  ExpectModelError(std::string("layers: 2\nkv_heads: 3\n") + kFields,
                   {"m.yaml: heads = 8, kv_heads = 3: heads must be divisible by kv_heads (rule: "
                    "grouped-query attention shares each KV head among heads / kv_heads query "
                    "heads; hint: kv_heads must divide 8: use 1, 2, 4 or 8)"});
  ExpectModelError(std::string("layers: 2\nkv_heads: 16\n") + kFields,
                   {"m.yaml: heads = 8, kv_heads = 16: heads must be divisible by kv_heads"});
  ExpectModelError("layers: 2\nkv_heads: 2\nhidden: 100\nheads: 8\nffn_hidden: 1\nvocab: 1\n",
                   {"m.yaml: hidden = 100, heads = 8: hidden is not divisible by heads and "
                    "head_dim is not given"});
  ExpectModelError(std::string("layers: 2\nkv_heads: 2\nlayer: 3\n") + kFields,
                   {"m.yaml: layer: unknown key \"layer\"", "did you mean `layers`?"});
  ExpectModelError(std::string("layers: 2\nkv_heads: 2\ngated_mlp: maybe\n") + kFields,
                   {"m.yaml: gated_mlp = \"maybe\": not true or false"});
  ExpectModelError("", {"m.yaml: empty file"});
  ExpectModelError("layers: [2\n", {"m.yaml:2:1: YAML syntax error"});
  ExpectModelError("llama3-8b\n", {"m.yaml: not a YAML mapping"});
}

TEST(ModelTest, Recompute) {
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    auto parsed = ParseRecompute(RecomputeName(r));
    ASSERT_TRUE(parsed);
    EXPECT_EQ(*parsed, r);
  }
  EXPECT_EQ(*ParseRecompute("FULL"), Recompute::kFull);
  auto bad = ParseRecompute("some");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--recompute = \"some\": not a recompute policy (rule: one of full, selective, none; "
            "hint: full is the norm for long context)");
}

TEST(WorkloadTest, Validation) {
  EXPECT_TRUE(ValidateWorkload(Workload{.seq_len = 1}));
  Workload ok;
  ok.seq_len = 262144;
  EXPECT_TRUE(ValidateWorkload(ok));
  struct Case {
    Workload workload;
    const char* expected;
  };
  auto with = [&ok](auto edit) {
    Workload w = ok;
    edit(w);
    return w;
  };
  for (const Case& c : {
           Case{with([](Workload& w) { w.seq_len = 0; }),
                "--seq = 0: must be >= 1 (rule: a whole number of tokens >= 1"},
           Case{with([](Workload& w) { w.batch = 0; }), "--batch = 0: must be >= 1"},
           Case{with([](Workload& w) { w.zero_stage = 4; }), "--zero = 4: must be 0, 1, 2 or 3"},
           Case{with([](Workload& w) { w.zero_stage = -1; }), "--zero = -1: must be 0, 1, 2 or 3"},
           Case{with([](Workload& w) { w.memory_reserve = 1.0; }),
                "--memory-reserve = 1: must be in [0, 1)"},
           Case{with([](Workload& w) { w.memory_reserve = -0.1; }),
                "--memory-reserve = -0.1: must be in [0, 1)"},
           Case{with([](Workload& w) { w.bytes_per_element = 3; }),
                "bytes_per_element = 3: must be 1, 2 or 4"},
       }) {
    auto result = ValidateWorkload(c.workload);
    ASSERT_FALSE(result) << c.expected;
    EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(result.error().message.find(c.expected), std::string::npos) << result.error().message;
  }
}

}  // namespace
}  // namespace hexiseq
