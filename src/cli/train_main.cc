// `hexiseq-train`: the trainer's executable, the only one that links libtorch. `hexiseq train ...`
// runs it as `hexiseq-train train ...` (src/cli/main.cc), so users never call it by name.
#include "cli/cli.h"

int main(int argc, char** argv) {
  using namespace hexiseq::cli;
  CLI::App app{"HexiSeq trainer", "hexiseq"};
  app.require_subcommand(1);
  Actions actions;
  AddTrainCommand(app, actions);
  return RunApp(app, actions, argc, argv);
}
