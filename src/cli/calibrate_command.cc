// `hexiseq calibrate`: under mpirun, every rank measures its GEMM and attention rates and every
// pair of ranks its latency and bandwidth (src/calibrate); rank 0 writes the cluster file (-o),
// checks that it loads back with the measured rates, writes the raw figures next to it, and
// prints one line per rank and per pair on stdout.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "calibrate/calibrate.h"
#include "cli/cli.h"
#include "cli/emulation_flags.h"
#include "runtime/attention_kernels.h"
#include "runtime/mpi_comm.h"
#include "runtime/str_cat.h"
#include "spec/cluster.h"
#include "spec/units.h"

namespace hexiseq::cli {
namespace {

using runtime::StrCat;
constexpr double kGiga = 1e9;
constexpr double kLoadBackTolerance = 1e-6;  // the file's rates vs the measured ones (printing)

struct CalibrateFlags {
  std::string model, seq, output, measurements, name, hosts;
  EmulationFlags emulation;
  std::string recompute = "full";
  int repeats = 3;
  double merge_tolerance = 0.10;
  std::vector<std::string> combine;               // sidecars to combine instead of measuring
  calibrate::LinearProbe linear_probe = nullptr;  // set by the executable, not a flag
  std::string linear_probe_name;
  calibrate::OptimizerProbe optimizer_probe = nullptr;  // set by the executable, not a flag
  std::string optimizer_probe_name;
  CLI::App* command = nullptr;  // to tell which flags were given
};

// The flags that say what to measure, which --combine (measuring nothing) does not take.
const char* const kMeasuringFlags[] = {"--model",        "--seq",          "--recompute",
                                       "--repeats",      "--hosts",        "--slowdown",
                                       "--slowdown-pad", "--link-slowdown"};

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    parts.push_back(text.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return parts;
}

std::string Stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string file = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = file.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? file : file.substr(0, dot);
}

std::string MeasurementsPath(const CalibrateFlags& flags) {
  if (!flags.measurements.empty()) return flags.measurements;
  const size_t dot = flags.output.find_last_of('.');
  const size_t slash = flags.output.find_last_of('/');
  const bool has_suffix = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  return (has_suffix ? flags.output.substr(0, dot) : flags.output) + ".measurements.json";
}

Result<calibrate::CalibrateOptions> MakeOptions(const CalibrateFlags& flags) {
  calibrate::CalibrateOptions options;
  auto model = LoadModel(flags.model);
  if (!model) return std::unexpected(model.error());
  options.model = *model;
  auto seq = ParseTokenCount(flags.seq, "--seq");
  if (!seq) return std::unexpected(seq.error());
  options.seq_len = *seq;
  auto recompute = ParseRecompute(flags.recompute);
  if (!recompute) return std::unexpected(recompute.error());
  options.recompute = *recompute;
  options.repeats = flags.repeats;
  options.merge_tolerance = flags.merge_tolerance;
  options.linear_probe = flags.linear_probe;
  options.linear_probe_name = flags.linear_probe_name;
  options.optimizer_probe = flags.optimizer_probe;
  options.optimizer_probe_name = flags.optimizer_probe_name;
  if (!flags.hosts.empty()) options.hosts = SplitCommas(flags.hosts);
  return options;
}

Result<void> WriteFile(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return IoError(StrCat(path, ": cannot write the ", what,
                          " (rule: the directory must exist and be writable; hint: check -o)"));
  }
  return {};
}

// The directory part of `path` ("." for a bare file name).
std::string Directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Whether `path` can be written (an existing writable file, or a new file in a writable
// directory), checked before anything is measured so that a bad -o costs no measuring time.
Result<void> CheckWritable(const std::string& path, const char* what) {
  const std::string rule = "(rule: calibrate writes the " + std::string(what) +
                           " there; nothing was measured; hint: check -o and --measurements)";
  struct stat info {};
  if (stat(path.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) {
      return IoError(StrCat(path, ": is a directory, not a file for the ", what, " ", rule));
    }
    if (access(path.c_str(), W_OK) != 0) {
      return IoError(StrCat(path, ": the ", what, " exists and is not writable ", rule));
    }
    return {};
  }
  const std::string directory = Directory(path);
  if (stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) ||
      access(directory.c_str(), W_OK) != 0) {
    return IoError(StrCat(path, ": cannot write the ", what, ": the directory '", directory,
                          "' does not exist or is not writable ", rule));
  }
  return {};
}

// Rank 0 (the writer) checks both outputs; every rank gets its verdict.
Result<void> CheckOutputsWritable(const CalibrateFlags& flags, runtime::Comm& world) {
  Result<void> checked;
  if (world.rank() == 0) {
    checked = CheckWritable(flags.output, "cluster file");
    if (checked) checked = CheckWritable(MeasurementsPath(flags), "measurements file");
  }
  std::vector<double> failed = {checked ? 0.0 : 1.0};
  world.AllreduceSum(std::span<double>(failed));
  if (failed[0] > 0 && checked) {
    return IoError("calibrate: rank 0 cannot write its outputs (see its message)");
  }
  return checked;
}

// The file must load back as a cluster of the same ranks with the measured rates (a merged node
// kind carries its members' mean, within --merge-tolerance of each).
Result<Cluster> LoadBack(const std::string& yaml, const std::string& path,
                         const calibrate::Calibration& calibration, double merge_tolerance) {
  auto cluster = ParseCluster(yaml, path, DeviceCatalog());
  if (!cluster) return std::unexpected(cluster.error());
  HEXISEQ_CHECK(cluster->num_ranks() == calibration.num_ranks, "one cluster rank per MPI rank");
  for (const calibrate::RankMeasurement& rank : calibration.ranks) {
    const double file_gemm = cluster->device(rank.rank).GemmFlops();
    HEXISEQ_CHECK(std::abs(file_gemm - rank.gemm_rate) <=
                      merge_tolerance * rank.gemm_rate + kLoadBackTolerance * file_gemm,
                  "the cluster file carries the measured GEMM rate");
  }
  return cluster;
}

void PrintSummary(const calibrate::Calibration& calibration, const Cluster& cluster) {
  const calibrate::RankMeasurement& first = calibration.ranks[0];
  std::printf("%-4s %-16s %8s %12s %12s %10s %10s %12s %12s\n", "rank", "host", "slowdown",
              "gemm_GF/s", "attn_GF/s", "gemm_rel", "attn_rel", "file_gemm", "file_attn");
  for (const calibrate::RankMeasurement& rank : calibration.ranks) {
    std::printf("%-4d %-16s %8.3g %12.4f %12.4f %10.4f %10.4f %12.4f %12.4f\n", rank.rank,
                rank.host.c_str(), rank.slowdown, rank.gemm_rate / kGiga,
                rank.attention_rate / kGiga, rank.gemm_rate / first.gemm_rate,
                rank.attention_rate / first.attention_rate,
                cluster.device(rank.rank).GemmFlops() / kGiga,
                cluster.device(rank.rank).AttentionFlops() / kGiga);
  }
  std::printf("\n%-4s %-9s %10s %12s %12s\n", "rank", "probe", "tokens", "seconds", "GF/s");
  for (const calibrate::RankMeasurement& rank : calibration.ranks) {
    for (const auto& [probe, curve] :
         {std::pair{"gemm", &rank.gemm}, std::pair{"attention", &rank.attention}}) {
      for (const calibrate::RatePoint& point : *curve) {
        std::printf("%-4d %-9s %10lld %12.6f %12.4f\n", rank.rank, probe,
                    static_cast<long long>(point.tokens), point.seconds,
                    point.flops_per_second() / kGiga);
      }
    }
  }
  std::printf("\n%-6s %12s %12s\n", "pair", "latency_us", "GB/s");
  for (const calibrate::PairMeasurement& pair : calibration.pairs) {
    std::printf("%d-%-4d %12.2f %12.3f\n", pair.a, pair.b, pair.latency_seconds * 1e6,
                pair.bytes_per_second / kGiga);
  }
  std::printf("\n%-14s %12s %14s\n", "all-to-all", "seconds", "alpha_beta_s");
  for (const calibrate::AllToAllMeasurement& row : calibration.all_to_all) {
    std::printf("%8lld B/peer %12.6f %14.6f\n", static_cast<long long>(row.bytes_per_peer),
                row.seconds, row.predicted_seconds);
  }
}

Result<void> WriteOutputs(const CalibrateFlags& flags, const calibrate::CalibrateOptions& options,
                          const calibrate::Calibration& calibration) {
  const std::string name = flags.name.empty() ? Stem(flags.output) : flags.name;
  const std::string yaml = calibrate::ClusterYaml(calibration, options, name);
  auto cluster = LoadBack(yaml, flags.output, calibration, flags.merge_tolerance);
  if (!cluster) return std::unexpected(cluster.error());
  if (auto written = WriteFile(flags.output, yaml, "cluster file"); !written) return written;
  const std::string sidecar = MeasurementsPath(flags);
  if (auto written =
          WriteFile(sidecar, calibrate::CalibrationJson(calibration), "measurements file");
      !written) {
    return written;
  }
  PrintSummary(calibration, *cluster);
  std::fprintf(stderr, "calibrate: GEMM rate probe: %s\n", calibration.linear_probe.c_str());
  std::fprintf(stderr, "calibrate: optimizer step probe: %s\n",
               calibration.optimizer_probe.c_str());
  std::fprintf(stderr, "calibrate: wrote %s and %s\n", flags.output.c_str(), sidecar.c_str());
  return {};
}

// --combine: the median of earlier calibrations of one job, written like a measured one; no MPI.
int RunCombine(const CalibrateFlags& flags) {
  for (const char* flag : kMeasuringFlags) {
    if (flags.command->count(flag) > 0) {
      std::fprintf(stderr,
                   "hexiseq: calibrate: %s is given with --combine (rule: --combine measures "
                   "nothing, it reads the model, --seq and the rest from the measurements files; "
                   "hint: leave %s out)\n",
                   flag, flag);
      return 2;
    }
  }
  std::vector<calibrate::Calibration> runs;
  for (const std::string& path : flags.combine) {
    auto run = calibrate::ReadCalibrationFile(path);
    if (!run) return ReportError(run.error());
    runs.push_back(std::move(*run));
  }
  auto combined = calibrate::CombineCalibrations(runs, flags.combine);
  if (!combined) return ReportError(combined.error());
  for (const auto& [path, what] : {std::pair{flags.output, "cluster file"},
                                   std::pair{MeasurementsPath(flags), "measurements file"}}) {
    if (auto writable = CheckWritable(path, what); !writable) return ReportError(writable.error());
  }
  calibrate::CalibrateOptions options;
  options.merge_tolerance = flags.merge_tolerance;
  if (auto written = WriteOutputs(flags, options, *combined); !written) {
    return ReportError(written.error());
  }
  return 0;
}

int RunCalibrateCommand(const CalibrateFlags& flags) {
  if (!flags.combine.empty()) return RunCombine(flags);
  for (const auto& [flag, value] : {std::pair{"--model", &flags.model}, {"--seq", &flags.seq}}) {
    if (value->empty()) {
      std::fprintf(stderr,
                   "hexiseq: calibrate: %s is required (rule: calibrate measures at the shapes "
                   "of --model at --seq, or combines earlier runs with --combine; hint: "
                   "--model llama3-8b --seq 32768)\n",
                   flag);
      return 2;
    }
  }
  runtime::MpiSession session(nullptr, nullptr);
  runtime::SetBlasThreads(1);
  std::unique_ptr<runtime::Comm> world = runtime::MpiWorldComm();
  const int rank = world->rank();
  // Every rank parses the same flags, so every rank reaches the same verdict; rank 0 prints.
  auto fail = [rank](const Error& error) { return rank == 0 ? ReportError(error) : 1; };
  auto options = MakeOptions(flags);
  if (!options) return fail(options.error());
  if (auto checked = calibrate::CheckOptions(*options, world->size()); !checked) {
    return fail(checked.error());
  }
  if (auto emulated = ApplyEmulation(flags.emulation, world); !emulated) {
    return fail(emulated.error());
  }
  if (auto writable = CheckOutputsWritable(flags, *world); !writable) {
    return fail(writable.error());
  }
  auto calibration = calibrate::RunCalibration(*world, *options);
  if (!calibration) return fail(calibration.error());
  if (rank != 0) return 0;
  if (auto written = WriteOutputs(flags, *options, *calibration); !written) {
    return ReportError(written.error());
  }
  return 0;
}

}  // namespace

void AddCalibrateCommand(CLI::App& app, Actions& actions, calibrate::LinearProbe linear_probe,
                         const char* linear_probe_name, calibrate::OptimizerProbe optimizer_probe,
                         const char* optimizer_probe_name) {
  static CalibrateFlags flags;
  flags.linear_probe = linear_probe;
  flags.linear_probe_name = linear_probe_name;
  flags.optimizer_probe = optimizer_probe;
  flags.optimizer_probe_name = optimizer_probe_name;
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure every rank's GEMM and attention rates and every pair's latency and bandwidth "
      "into a cluster file (run under mpirun -np N)");
  cmd->add_option("--model", flags.model,
                  "Model preset or YAML file (sets the GEMM shapes; required unless --combine)");
  cmd->add_option("--seq", flags.seq,
                  "Sequence length S (the even split S / N is the point used; required unless "
                  "--combine)");
  cmd->add_option("-o,--output", flags.output, "Cluster file to write (YAML)")->required();
  cmd->add_option("--measurements", flags.measurements,
                  "Raw measurements JSON (default: the output with .measurements.json)");
  cmd->add_option("--name", flags.name, "Cluster name (default: the output file's stem)");
  cmd->add_option("--recompute", flags.recompute,
                  "full (default)|selective|none: how forward and backward are weighted")
      ->check(CLI::IsMember({"full", "selective", "none"}));
  cmd->add_option("--repeats", flags.repeats, "Timed repeats per point, median (default 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--hosts", flags.hosts,
                  "Comma-separated host name per rank (default: each rank's host name)");
  cmd->add_option("--merge-tolerance", flags.merge_tolerance,
                  "Neighbouring ranks of a host share a node kind when their rates agree within "
                  "this fraction (default 0.1; 0: one node per rank)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--combine", flags.combine,
                  "Measure nothing: combine these .measurements.json files of earlier runs of "
                  "one job (comma-separated), every timed figure the median over the runs")
      ->delimiter(',');
  AddEmulationOptions(cmd, flags.emulation, "calibration kernels");
  flags.command = cmd;
  actions[cmd] = [] { return RunCalibrateCommand(flags); };
}

}  // namespace hexiseq::cli
