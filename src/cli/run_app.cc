// What both executables share: parse, run the chosen subcommand's action, report errors, and
// make a failure to write the results an error.
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

int RunApp(CLI::App& app, const Actions& actions, int argc, char** argv) {
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

}  // namespace hexiseq::cli
