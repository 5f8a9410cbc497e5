// Helpers for the end-to-end tests of the hexiseq command (tests/cli).
#include "cli/cli_test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
std::string TempDir() {
  static const std::string dir = [] {
    std::string d =
        std::filesystem::temp_directory_path() / ("hexiseq_cli_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

CmdResult Hexiseq(const std::string& args, int timeout_seconds) {
  const std::string exe =
      (timeout_seconds > 0 ? "timeout " + std::to_string(timeout_seconds) + " " : std::string()) +
      HEXISEQ_BIN_PATH;
  const std::string out = TempDir() + "/stdout", err = TempDir() + "/stderr";
  const std::string cmd = exe + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CmdResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

std::string Example(const std::string& rel) { return std::string(HEXISEQ_SOURCE_PATH) + "/" + rel; }

void ExpectBadInput(const CmdResult& r, std::initializer_list<const char*> needles) {
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << "stdout must carry results only: " << r.out;
  for (const char* n : needles)
    EXPECT_NE(r.err.find(n), std::string::npos) << "want '" << n << "' in: " << r.err;
}
