#include "cli/inputs.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "plan/plan.h"
#include "spec/limits.h"
#include "spec/units.h"

namespace hexiseq::cli {

void AddInputFlags(CLI::App* cmd, InputFlags& flags, bool workload) {
  cmd->add_option("--cluster", flags.cluster, "Cluster file (YAML or JSON)")->required();
  cmd->add_option("--model", flags.model, "Model preset name or model YAML file")->required();
  cmd->add_option("--device-table", flags.device_table,
                  "YAML device table overriding catalog rows (peaks, efficiencies)");
  if (!workload) return;
  cmd->add_option("--seq", flags.seq, "Sequence length, e.g. 256K, 1M, 131072")->required();
  cmd->add_option("--batch", flags.batch, "Sequences per iteration")
      ->check(CLI::Range(int64_t{1}, kMaxBatch));
  cmd->add_option("--recompute", flags.recompute,
                  "Activation recompute: auto (the planner picks the fastest that fits; default) | "
                  "full | selective | none")
      ->check(CLI::IsMember({"auto", "full", "selective", "none"}));
  cmd->add_option("--zero", flags.zero,
                  "ZeRO stage: auto (the planner picks the fastest that fits; default) | 0..3")
      ->check(CLI::IsMember({"auto", "0", "1", "2", "3"}));
  cmd->add_option("--dtype", flags.dtype,
                  "Precision of activations and gradients: bf16 (default, as GPU training runs) "
                  "| fp32 (as hexiseq train runs on CPUs)")
      ->check(CLI::IsMember({"bf16", "fp32"}));
  cmd->add_option("--memory-reserve", flags.memory_reserve,
                  "Fraction of each device's memory kept free")
      ->check(FiniteRange(0.0, 0.95));
}

CLI::Validator FiniteRange(double min, double max) {
  const std::string range =
      "[" + CLI::detail::to_string(min) + ", " + CLI::detail::to_string(max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "Value " + text + " is not a number";
        if (!std::isfinite(value) || value < min || value > max)
          return "Value " + text + " must be a finite number in " + range;
        return "";
      },
      "FINITE in " + range);
}

CLI::Validator TimeLimitRange() { return FiniteRange(0.0, kMaxTimeLimitSeconds); }

CLI::Validator SeedRange() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        const auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (text.empty() || status != std::errc{} || end != text.data() + text.size())
          return "Value " + text + " must be a whole number in [0, 2^64 - 1]";
        return "";
      },
      "UINT64");
}

CommandDeadline::CommandDeadline(double time_limit_seconds)
    : start_(std::chrono::steady_clock::now()),
      // The flag's check (TimeLimitRange) has refused every value FromTimeLimit refuses.
      deadline_(Deadline::FromTimeLimit(time_limit_seconds).value_or(Deadline{})) {}

void CommandDeadline::NoteIfReached(const std::string& result) const {
  if (!deadline_.CutShort()) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr,
               "hexiseq: --time-limit %g s reached (%.2f s in all): the searches stopped early; "
               "%s\n",
               deadline_.limit_seconds(), elapsed, result.c_str());
}

void ApplyTrainingChoice(const InputFlags& flags, ScheduleOptions& options) {
  options.zero_auto = flags.zero == "auto";
  options.recompute_auto = flags.recompute == "auto";
}

Result<Problem> LoadInputs(const InputFlags& flags, const Plan* plan) {
  DeviceCatalog catalog;
  if (!flags.device_table.empty())
    if (auto r = catalog.MergeFile(flags.device_table); !r) return std::unexpected(r.error());
  auto cluster = LoadCluster(flags.cluster, catalog);
  if (!cluster) return std::unexpected(cluster.error());
  auto model = LoadModel(flags.model);
  if (!model) return std::unexpected(model.error());
  Workload w;
  if (plan) {
    w.seq_len = plan->seq_len;
    w.batch = plan->batch;
    auto rec = ParseRecompute(plan->recompute);
    if (!rec) return std::unexpected(rec.error());
    w.recompute = *rec;
    w.zero_stage = plan->zero_stage;
    w.memory_reserve = flags.memory_reserve;
    auto dtype = ParseDtype(plan->dtype);
    if (!dtype) return std::unexpected(dtype.error());
    w.bytes_per_element = *dtype;
  } else {
    auto seq = ParseTokenCount(flags.seq, "--seq");
    if (!seq) return std::unexpected(seq.error());
    w.seq_len = *seq;
    w.batch = flags.batch;
    auto rec = ParseRecompute(flags.recompute == "auto" ? "full" : flags.recompute);
    if (!rec) return std::unexpected(rec.error());
    w.recompute = *rec;
    w.zero_stage = flags.zero == "auto" ? 3 : std::stoi(flags.zero);
    w.memory_reserve = flags.memory_reserve;
    auto dtype = ParseDtype(flags.dtype);
    if (!dtype) return std::unexpected(dtype.error());
    w.bytes_per_element = *dtype;
  }
  Problem problem{std::move(*cluster), std::move(*model), w};
  if (auto valid = ValidateProblem(problem); !valid) return std::unexpected(valid.error());
  return problem;
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string line;
    for (size_t c = 0; c < rows[r].size(); ++c) {
      line += rows[r][c];
      if (c + 1 < rows[r].size()) line += std::string(width[c] - rows[r][c].size() + 2, ' ');
    }
    out += line + "\n";
    if (r == 0) {
      size_t total = 0;
      for (size_t c = 0; c < width.size(); ++c) total += width[c] + (c + 1 < width.size() ? 2 : 0);
      out += std::string(total, '-') + "\n";
    }
  }
  return out;
}

std::string Fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

}  // namespace hexiseq::cli
