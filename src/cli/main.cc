// Entry point: registers the subcommands, parses, runs the chosen action.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace hexiseq::cli {
namespace {

constexpr const char* kTrainExecutable = "hexiseq-train";

// hexiseq-train beside this executable.
std::string TrainExecutablePath() {
  std::string self(4096, '\0');
  const ssize_t length = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (length <= 0) return kTrainExecutable;
  self.resize(static_cast<size_t>(length));
  return self.substr(0, self.rfind('/') + 1) + kTrainExecutable;
}

// `hexiseq train ...` runs `hexiseq-train train ...` from the same directory in this process
// (exec keeps the PID, so mpirun sees the same ranks): only the trainer links libtorch, whose
// loading would otherwise add about 0.4 s and 170 MB to every command. `hexiseq calibrate` runs
// there too when it was built, so that it times the trainer's own linear phase. Returns only on
// failure.
int RunTrainExecutable(int argc, char** argv) {
  std::string path = TrainExecutablePath();
  std::vector<char*> args(argv, argv + argc);
  args[0] = path.data();
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  std::fprintf(stderr,
               "hexiseq: %s: cannot run %s: %s (hint: the trainer is built with libtorch, "
               "CMake option HEXISEQ_TRAIN=ON; scripts/build builds it)\n",
               argv[1], path.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace
}  // namespace hexiseq::cli

int main(int argc, char** argv) {
  using namespace hexiseq::cli;
  if (argc >= 2 && std::strcmp(argv[1], "train") == 0) return RunTrainExecutable(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "calibrate") == 0 &&
      access(TrainExecutablePath().c_str(), X_OK) == 0) {
    return RunTrainExecutable(argc, argv);
  }
  CLI::App app{
      "HexiSeq: asymmetric context + head parallelism for long-context training on "
      "heterogeneous GPU clusters"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  Actions actions;
  AddPlanningCommands(app, actions);
  AddSimulateCommand(app, actions);
  AddRuntimeCommands(app, actions);
  // Listed for --help; `hexiseq train ...` never reaches the parser (RunTrainExecutable).
  app.add_subcommand("train",
                     "Train the Llama model with a plan (run under mpirun -np <plan num_ranks>; "
                     "hexiseq train --help lists its flags)");
  AddReportCommand(app, actions);
  AddCalibrateCommand(app, actions);
  return RunApp(app, actions, argc, argv);
}
