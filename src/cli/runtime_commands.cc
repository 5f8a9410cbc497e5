// Placeholder until the subsystem lands.
#include "cli/cli.h"

namespace hexiseq::cli {

void AddRuntimeCommands(CLI::App& app, Actions& actions) {
  (void)app;
  (void)actions;
}

}  // namespace hexiseq::cli
