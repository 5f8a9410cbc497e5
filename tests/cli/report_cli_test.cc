// `hexiseq report` end to end: usage errors exit 2 and name the flag, bad input exits 1 and
// names the file or value, a good run writes the page or one figure.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli/cli_test_util.h"

namespace {

using ReportRun = CmdResult;

ReportRun Report(const std::string& args) {
  return Hexiseq("report --cluster " + Example("examples/clusters/custom-4.yaml") +
                 " --model llama3-8b " + args);
}

TEST(ReportCli, UnknownFigureIsUsageError) {
  const ReportRun r = Report("--seq 32K --format svg --figure gantt");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--figure = \"gantt\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("plan-map, timeline, strategies"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(ReportCli, SvgNeedsFigureAndFigureNeedsSvg) {
  ReportRun r = Report("--seq 32K --format svg");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--format svg needs --figure"), std::string::npos) << r.err;
  r = Report("--seq 32K --figure timeline");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("needs --format svg"), std::string::npos) << r.err;
  r = Report("--seq 32K --format pdf");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--format"), std::string::npos) << r.err;
}

TEST(ReportCli, MissingPlanNamesTheFile) {
  const ReportRun r = Report("--seq 32K --plan " + TempDir() + "/no-such-plan.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no-such-plan.json"), std::string::npos) << r.err;
}

TEST(ReportCli, PlanForAnotherSequenceLength) {
  const std::string plan = TempDir() + "/plan32k.json";
  const std::string cmd = std::string(HEXISEQ_BIN_PATH) + " plan --cluster " + HEXISEQ_SOURCE_PATH +
                          "/examples/clusters/custom-4.yaml --model llama3-8b --seq 32K "
                          "--format json -o " +
                          plan + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ReportRun r = Report("--seq 64K --plan " + plan);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--seq = 64K"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--seq 32768"), std::string::npos) << r.err;
  const std::string page = TempDir() + "/given.html";
  r = Report("--seq 32K --plan " + plan + " -o " + page);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string html = Slurp(page);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_NE(html.find("plan32k.json"), std::string::npos) << "names the plan's source";
}

TEST(ReportCli, OneFigureToStdout) {
  for (const char* figure : {"plan-map", "timeline", "strategies"}) {
    const ReportRun r = Report(std::string("--seq 32K --format svg --figure ") + figure);
    ASSERT_EQ(r.code, 0) << figure << ": " << r.err;
    EXPECT_TRUE(r.out.starts_with("<?xml")) << figure;
    EXPECT_NE(r.out.find("</svg>"), std::string::npos) << figure;
  }
}

}  // namespace
