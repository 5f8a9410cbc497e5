// The `hexiseq` command: each subcommand file adds its CLI11 subcommand and the action to run
// when it is selected. Actions return the exit code: 0 success, 1 bad input or infeasible,
// 2 bad usage. stdout carries results only; messages go to stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>

#include "calibrate/calibrate.h"
#include "spec/error.h"

namespace hexiseq::cli {

using Actions = std::map<const CLI::App*, std::function<int()>>;

// Prints "hexiseq: <message>" to stderr and returns the exit code for the error's kind.
int ReportError(const Error& error);
// `exit_code`, or 1 when the results could not be written to stdout.
int FlushResults(int exit_code);
// Parses argv, runs the chosen subcommand's action; CLI11's usage errors exit 2.
int RunApp(CLI::App& app, const Actions& actions, int argc, char** argv);

void AddPlanningCommands(CLI::App& app, Actions& actions);  // plan, compare, validate, explain
void AddSimulateCommand(CLI::App& app, Actions& actions);   // simulate
void AddRuntimeCommands(CLI::App& app, Actions& actions);   // attn-check
void AddTrainCommand(CLI::App& app, Actions& actions);      // train (hexiseq-train only)
void AddReportCommand(CLI::App& app, Actions& actions);     // report
// calibrate; `linear_probe` times the linear phase (hexiseq-train passes the trainer's, named
// `linear_probe_name`; nullptr: one layer's GEMMs with sgemm), `optimizer_probe` the optimizer
// step (hexiseq-train passes the trainer's; nullptr: a plain AdamW loop).
void AddCalibrateCommand(CLI::App& app, Actions& actions,
                         calibrate::LinearProbe linear_probe = nullptr,
                         const char* linear_probe_name = "",
                         calibrate::OptimizerProbe optimizer_probe = nullptr,
                         const char* optimizer_probe_name = "");

}  // namespace hexiseq::cli
