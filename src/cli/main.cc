// Entry point: registers the subcommands, parses, runs the chosen action.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli/cli.h"

namespace hexiseq::cli {

int ReportError(const Error& error) {
  std::fprintf(stderr, "hexiseq: %s\n", error.message.c_str());
  return error.code == ErrorCode::kInternal ? 3 : 1;
}

// Results that could not be written (a full disk, a closed pipe) are a failure, never exit 0.
int FlushResults(int exit_code) {
  std::cout.flush();
  if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout) {
    std::fprintf(stderr, "hexiseq: cannot write the results to stdout: %s\n", std::strerror(errno));
    return exit_code == 0 ? 1 : exit_code;
  }
  return exit_code;
}

}  // namespace hexiseq::cli

int main(int argc, char** argv) {
  using namespace hexiseq::cli;
  CLI::App app{
      "HexiSeq: asymmetric context + head parallelism for long-context training on "
      "heterogeneous GPU clusters"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  Actions actions;
  AddPlanningCommands(app, actions);
  AddSimulateCommand(app, actions);
  AddRuntimeCommands(app, actions);
#ifndef HEXISEQ_NO_TRAIN  // a build without libtorch (HEXISEQ_TRAIN=OFF) has no train command
  AddTrainCommand(app, actions);
#endif
  AddReportCommand(app, actions);
  AddCalibrateCommand(app, actions);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  for (const CLI::App* sub : app.get_subcommands()) {
    auto it = actions.find(sub);
    if (it != actions.end()) return FlushResults(it->second());
  }
  std::fprintf(stderr, "hexiseq: no command given (try --help)\n");
  return 2;
}
