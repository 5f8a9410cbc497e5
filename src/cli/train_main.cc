// `hexiseq-train`: the trainer's executable, the only one that links libtorch. `hexiseq train ...`
// runs it as `hexiseq-train train ...` (src/cli/main.cc), so users never call it by name;
// `hexiseq calibrate ...` runs here too, with the trainer's linear phase as its GEMM-rate probe
// and the trainer's optimizer step as its optimizer probe.
#include "cli/cli.h"
#include "train/linear_probe.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  using namespace hexiseq::cli;
  hexiseq::train::KeepFreedMemory();
  CLI::App app{"HexiSeq trainer", "hexiseq"};
  app.require_subcommand(1);
  Actions actions;
  AddTrainCommand(app, actions);
  AddCalibrateCommand(app, actions, &hexiseq::train::TimeTrainerLinearPhase,
                      hexiseq::train::kTrainerProbeName, &hexiseq::train::TimeTrainerOptimizerStep,
                      hexiseq::train::kTrainerOptimizerProbeName);
  return RunApp(app, actions, argc, argv);
}
