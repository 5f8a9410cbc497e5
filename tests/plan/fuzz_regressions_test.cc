// Inputs that the fuzzers (fuzz/, scripts/fuzz) found to crash a reader or to break its contract,
// kept as files under tests/fuzz_regressions/<reader>/. Each is read through the real loader and
// must now be a clear error that names the file, the field and the rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "spec/cluster.h"
#include "spec/model.h"
#include "spec/spec_test_util.h"

namespace hexiseq {
namespace {

struct Regression {
  std::string reader;  // the folder under tests/fuzz_regressions: cluster, model, plan, validate
  std::string file;
  std::vector<std::string> expected;  // parts of the error message
  // validate only: the cluster (under examples/clusters) and model to validate against.
  std::string cluster = "";
  std::string model = "";
};

void PrintTo(const Regression& regression, std::ostream* out) {
  *out << regression.reader << "/" << regression.file;
}

std::vector<Regression> Regressions() {
  return {
      {"model",
       "head_dim_from_hidden_above_bound.yaml",
       {"head_dim_from_hidden_above_bound.yaml: hidden = 960096, heads = 6: head_dim = hidden / "
        "heads = 160016 is above 65536",
        "hint: check hidden and heads, or set head_dim"}},
  };
}

std::string RegressionDir() { return spec_test::SourceDir() + "/tests/fuzz_regressions"; }

// Reads the input with the reader it was found in; the error, or an empty one on success.
Result<void> ReadWith(const Regression& regression) {
  const std::string path = RegressionDir() + "/" + regression.reader + "/" + regression.file;
  if (regression.reader == "cluster") {
    auto cluster = LoadCluster(path, DeviceCatalog());
    if (!cluster) return std::unexpected(cluster.error());
  } else if (regression.reader == "model") {
    auto model = LoadModel(path);
    if (!model) return std::unexpected(model.error());
  } else {
    auto plan = LoadPlan(path);
    if (!plan) return std::unexpected(plan.error());
    if (regression.reader == "validate") {
      auto cluster = LoadCluster(
          spec_test::SourceDir() + "/examples/clusters/" + regression.cluster, DeviceCatalog());
      auto model = LoadModel(regression.model);
      if (!cluster || !model) return Internal("the regression's cluster or model does not load");
      return Validate(*plan, *cluster, *model);
    }
  }
  return {};
}

class FuzzRegressionTest : public testing::TestWithParam<Regression> {};

TEST_P(FuzzRegressionTest, IsAClearError) {
  const Regression& regression = GetParam();
  Result<void> result = ReadWith(regression);
  ASSERT_FALSE(result) << regression.reader << "/" << regression.file << " was accepted";
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument) << result.error().message;
  for (const std::string& part : regression.expected)
    EXPECT_NE(result.error().message.find(part), std::string::npos)
        << "message: " << result.error().message << "\nexpected to contain: " << part;
}

INSTANTIATE_TEST_SUITE_P(Inputs, FuzzRegressionTest, testing::ValuesIn(Regressions()),
                         [](const testing::TestParamInfo<Regression>& info) {
                           std::string name = info.param.reader + "_" + info.param.file;
                           std::replace_if(
                               name.begin(), name.end(),
                               [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); },
                               '_');
                           return name;
                         });

// Every file kept under tests/fuzz_regressions has its expectation above.
TEST(FuzzRegressions, EveryKeptInputIsChecked) {
  std::set<std::string> listed;
  for (const Regression& regression : Regressions())
    listed.insert(regression.reader + "/" + regression.file);
  for (const auto& entry : std::filesystem::recursive_directory_iterator(RegressionDir())) {
    if (!entry.is_regular_file()) continue;
    const std::string relative =
        std::filesystem::relative(entry.path(), RegressionDir()).generic_string();
    EXPECT_TRUE(listed.count(relative)) << relative << " has no entry in Regressions()";
  }
}

}  // namespace
}  // namespace hexiseq
