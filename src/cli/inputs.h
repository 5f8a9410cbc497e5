// Shared CLI plumbing: the input flags every planning command takes (--cluster, --model, --seq,
// workload flags, --device-table), loading them into a CostModel, and plain-text tables.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "plan/plan.h"
#include "sched/scheduler.h"
#include "spec/error.h"

namespace hexiseq::cli {

struct InputFlags {
  std::string cluster, model, seq, device_table;
  int batch = 1;
  std::string recompute = "auto";  // auto | full | selective | none
  std::string zero = "auto";       // auto | 0..3
  double memory_reserve = 0.1;
  std::string dtype = "bf16";  // bf16 | fp32
};

// Adds --cluster, --model, --device-table; with `workload` also --seq (required), --batch,
// --recompute, --zero, --memory-reserve, --dtype.
void AddInputFlags(CLI::App* cmd, InputFlags& flags, bool workload);

// The planner chooses the settings given as auto; the workload then holds the auto settings that
// need the least memory (ZeRO-3, full recompute) until it does.
void ApplyTrainingChoice(const InputFlags& flags, ScheduleOptions& options);

// Loads catalog, cluster, model and workload into a checked Problem (ValidateProblem). Workload
// fields come from the flags, or from `plan` when given (explain/validate/simulate score a plan
// with its own workload).
Result<Problem> LoadInputs(const InputFlags& flags, const Plan* plan = nullptr);

// A CLI11 check: a finite number in [min, max] (CLI::Range lets nan through).
CLI::Validator FiniteRange(double min, double max);
// --time-limit: seconds in [0, kMaxTimeLimitSeconds].
CLI::Validator TimeLimitRange();
// --seed: a whole number in [0, 2^64 - 1] (CLI11 would wrap -1 around for an unsigned option).
CLI::Validator SeedRange();

// The planning deadline of a command, started when the command starts (--time-limit, checked).
class CommandDeadline {
 public:
  explicit CommandDeadline(double time_limit_seconds);
  const Deadline& deadline() const { return deadline_; }
  // When the deadline cut a search short: one line on stderr saying so, with the time taken and
  // what the result is (`result`, e.g. "the plan is the best found by then").
  void NoteIfReached(const std::string& result) const;

 private:
  std::chrono::steady_clock::time_point start_;
  Deadline deadline_;
};

// A left-aligned text table: first row is the header.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);
std::string Fixed(double value, int digits);

}  // namespace hexiseq::cli
