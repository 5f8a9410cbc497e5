// `hexiseq train`'s flags, audited like the planning commands': a bad value is exit 2 naming the
// flag, the value and the rule (before anything is built), and a --data path that is not a regular
// file is exit 1 naming the file and what it is (it used to block on a FIFO or /dev/zero and abort
// on a directory). One-rank runs, without mpirun.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli/cli_test_util.h"

namespace {

#ifdef HEXISEQ_NO_TRAIN
#define SKIP_WITHOUT_TRAIN() GTEST_SKIP() << "built with HEXISEQ_TRAIN=OFF: no train command"
#else
#define SKIP_WITHOUT_TRAIN() (void)0
#endif

// A one-rank plan of the tiny model (256 tokens), made once.
const std::string& OneRankPlan() {
  static const std::string plan = [] {
    const std::string cluster = Write("cpu-1.yaml",
                                      "nodes:\n  - gpu:\n      name: CPU-core\n      bf16_tflops: "
                                      "0.05\n      memory: 64 GiB\n      hbm_bandwidth: 0.02 TB/s\n"
                                      "    count: 1\n    gpus_per_node: 1\n    intra_node: 5 GB/s\n"
                                      "inter_node: 1 GB/s\n");
    const std::string path = TempDir() + "/one_rank_tiny.json";
    const CmdResult made =
        Hexiseq("plan --cluster " + cluster + " --model " + Example("examples/models/tiny.yaml") +
                " --seq 256 --format json -o " + path);
    EXPECT_EQ(made.code, 0) << made.err;
    return path;
  }();
  return plan;
}

CmdResult Train(const std::string& extra) {
  return Hexiseq("train --plan " + OneRankPlan() + " --model " +
                     Example("examples/models/tiny.yaml") + " --steps 1 " + extra,
                 120);
}

void ExpectUsage(const std::string& flags, std::initializer_list<const char*> needles) {
  SCOPED_TRACE(flags);
  const CmdResult r = Train(flags);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_LT(r.err.size(), 600u) << r.err;
  for (const char* needle : needles)
    EXPECT_NE(r.err.find(needle), std::string::npos) << "want '" << needle << "' in: " << r.err;
}

TEST(TrainFlags, BadValuesAreUsageErrorsNamingTheFlag) {
  SKIP_WITHOUT_TRAIN();
  ExpectUsage("--lr nan", {"--lr = nan", "a finite number > 0"});
  ExpectUsage("--lr 1e-3 --min-lr 1", {"--min-lr = 1", "0 <= min_lr <= lr"});
  ExpectUsage("--beta1 1.5", {"--beta1 = 1.5", "in [0, 1)"});
  ExpectUsage("--warmup -2", {"--warmup = -2", ">= 0"});
  ExpectUsage("--adam-eps 0", {"--adam-eps = 0", "> 0"});
  ExpectUsage("--seq 3G", {"--seq", "3G", "at most 2147483648 tokens", "docs/limits.md"});
  ExpectUsage("--seq x", {"--seq", "not a token count"});
  ExpectUsage("--seed -1", {"--seed", "-1", "[0, 2^64 - 1]"});
  ExpectUsage("--seed 18446744073709551616", {"--seed", "[0, 2^64 - 1]"});
  ExpectUsage("--timeout 0", {"--timeout", "[1, 86400]"});
}

TEST(TrainFlags, GoodValuesStillTrain) {
  SKIP_WITHOUT_TRAIN();
  const CmdResult r = Train("--seq 256 --seed 18446744073709551615 --lr 1e-3 --timeout 30");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("peak RSS per rank"), std::string::npos) << r.err;
}

TEST(TrainFlags, DataThatIsNotARegularFileNamesTheFile) {
  SKIP_WITHOUT_TRAIN();
  const std::string fifo = TempDir() + "/data.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::pair<std::string, const char*> cases[] = {
      {"/dev/zero", "a character device"}, {fifo, "a FIFO"}, {TempDir(), "a directory"}};
  for (const auto& [path, type] : cases) {
    SCOPED_TRACE(path);
    const CmdResult r = Train("--data " + path);
    ExpectBadInput(r, {"cannot read the --data file", type});
    EXPECT_NE(r.err.find(path + ": "), std::string::npos) << r.err;
  }
}

}  // namespace

namespace {

// `hexiseq train` runs hexiseq-train from hexiseq's own directory; a copy of hexiseq without it
// (a build with HEXISEQ_TRAIN=OFF, or a partial install) says what is missing and how to build it.
TEST(TrainFlags, MissingTrainerIsAClearError) {
  const std::string alone = TempDir() + "/alone";
  std::filesystem::create_directories(alone);
  std::filesystem::copy_file(HEXISEQ_BIN_PATH, alone + "/hexiseq",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string out = TempDir() + "/alone.out", err = TempDir() + "/alone.err";
  const int status = std::system((alone + "/hexiseq train --help >" + out + " 2>" + err).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  ExpectBadInput({WEXITSTATUS(status), Slurp(out), Slurp(err)},
                 {"train: cannot run", "/alone/hexiseq-train", "HEXISEQ_TRAIN=ON"});
}

}  // namespace
