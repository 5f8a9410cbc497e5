// `hexiseq train`: real training steps of the Llama model with a plan (one MPI process per plan
// rank; without mpirun, a one-rank world). The first participating rank prints one line per step
// on stdout (table or JSON lines): loss, recall loss, gradient norm, seconds, tokens/s and the
// per-phase seconds of the slowest participant; a summary with the peak RSS of every participant
// goes to stderr. A rank the plan leaves out says so on stderr after the start-up checks and
// exits 0 after the others finish. A watchdog (--timeout) ends every rank with a clear message
// when a peer stops or no rank makes progress, and the flags that must agree are checked across
// ranks before anything is built.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/emulation_flags.h"
#include "cli/inputs.h"
#include "cli/train_phases.h"
#include "plan/plan.h"
#include "runtime/agreement.h"
#include "runtime/mpi_comm.h"
#include "spec/model.h"
#include "spec/units.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace hexiseq::cli {
namespace {

constexpr double kBytesPerMiB = 1024.0 * 1024.0;
// CLI defaults, chosen so that the documented synthetic:recall run learns in 200 steps
// (docs/training.md): peak lr 3e-3 and a linear warmup over the first tenth of the steps.
constexpr double kDefaultLearningRate = 3e-3;
constexpr int64_t kWarmupFractionDivisor = 10;
constexpr int64_t kWarmupFromSteps = -1;     // --warmup not given: steps / kWarmupFractionDivisor
constexpr size_t kRecallWindowDivisor = 10;  // the final recall loss averages the last tenth
constexpr double kDefaultTimeoutSeconds = 300;  // the watchdog's, as attn-check's
constexpr int kUsageExitCode = 2;               // a bad flag value (CLI11's refusals exit 2 too)

struct TrainFlags {
  std::string plan, model, data = "synthetic:recall", format = "table";
  std::string optimizer = "adamw", recompute = "plan", grad_sync = "overlap";
  std::string save, resume, init;
  EmulationFlags emulation;  // --slowdown, --slowdown-pad, --link-slowdown
  int64_t save_every = 0;
  int64_t steps = 10;
  std::string seq;  // "" : the plan's; else a token count as `plan --seq` takes it (1K, 65536)
  int batch = 0, threads = 1;  // batch 0: the plan's
  uint64_t seed = 1;
  double timeout_seconds = kDefaultTimeoutSeconds;
  train::OptimizerConfig opt = [] {
    train::OptimizerConfig config;
    config.lr = kDefaultLearningRate;
    config.warmup_steps = kWarmupFromSteps;
    return config;
  }();
};

void PrintHeader() {
  std::printf("%6s %10s %10s %10s %10s %9s %10s %9s %9s %9s %9s %9s\n", "step", "loss", "recall",
              "grad_norm", "lr", "seconds", "tokens/s", "linear_s", "attn_s", "a2a_s", "wait_s",
              "sync_s");
}

// `ranks_json`: every participant's phases (RankPhasesJson), JSON lines only.
void PrintStep(const train::StepReport& r, const train::PhaseSeconds& p, bool json,
               const std::string& ranks_json) {
  if (json) {
    std::printf("{\"step\": %" PRId64
                ", \"loss\": %.17g, \"recall_loss\": %s, "
                "\"grad_norm\": %.17g, \"lr\": %.17g, \"seconds\": %.6f, \"tokens_per_second\": "
                "%.3f, \"linear_seconds\": %.6f, \"attention_compute_seconds\": %.6f, "
                "\"alltoall_seconds\": %.6f, \"ring_wait_seconds\": %.6f, "
                "\"grad_sync_seconds\": %.6f, \"ranks\": %s}\n",
                r.step, r.loss,
                std::isnan(r.recall_loss) ? "null" : std::to_string(r.recall_loss).c_str(),
                r.grad_norm, r.lr, r.seconds, r.tokens_per_second, p.linear, p.attention_compute,
                p.alltoall, p.ring_wait, p.grad_sync, ranks_json.c_str());
  } else {
    char recall[32] = "-";
    if (!std::isnan(r.recall_loss)) std::snprintf(recall, sizeof recall, "%.4f", r.recall_loss);
    std::printf("%6" PRId64
                " %10.4f %10s %10.4f %10.3g %9.4f %10.0f %9.4f %9.4f %9.4f %9.4f "
                "%9.4f\n",
                r.step, r.loss, recall, r.grad_norm, r.lr, r.seconds, r.tokens_per_second, p.linear,
                p.attention_compute, p.alltoall, p.ring_wait, p.grad_sync);
  }
  std::fflush(stdout);
}

// Mean of the last tenth (at least one) of the per-step recall losses: one step's recall loss
// covers few answers, so a single step is noisy.
double FinalRecall(const std::vector<double>& recall_per_step) {
  if (recall_per_step.empty()) return NAN;
  const size_t count = std::max<size_t>(1, recall_per_step.size() / kRecallWindowDivisor);
  double sum = 0;
  for (size_t index = recall_per_step.size() - count; index < recall_per_step.size(); ++index) {
    sum += recall_per_step[index];
  }
  return sum / static_cast<double>(count);
}

// Peak RSS of every participant (named by its world rank) and the final recall loss.
void PrintSummary(train::Trainer& trainer, const std::vector<double>& recall_per_step,
                  const PhaseMedians& phases) {
  runtime::Comm& participants = trainer.participants();
  const double final_recall = FinalRecall(recall_per_step);
  const int64_t mine[2] = {trainer.world().rank(), train::PeakRssBytes()};
  std::vector<int64_t> all(2 * participants.size());
  participants.Allgather(mine, sizeof mine, all.data());
  if (participants.rank() != 0) return;
  std::string line;
  for (int rank = 0; rank < participants.size(); ++rank) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%s%lld: %.1f MiB", rank ? ", " : "",
                  static_cast<long long>(all[2 * rank]), all[2 * rank + 1] / kBytesPerMiB);
    line += buffer;
  }
  std::fprintf(stderr, "train: peak RSS per rank: %s\n", line.c_str());
  if (const std::string medians = phases.SummaryLine(); !medians.empty()) {
    std::fprintf(stderr, "%s\n", medians.c_str());
  }
  if (trainer.data().has_recall() && !std::isnan(final_recall)) {
    std::fprintf(stderr,
                 "train: final recall loss %.4f (mean of the last %zu steps; chance %.4f)\n",
                 final_recall, std::max<size_t>(1, recall_per_step.size() / kRecallWindowDivisor),
                 trainer.data().recall_chance_loss());
  }
}

// `--recompute plan` (the default) follows the plan's policy; the trainer recomputes whole layers
// or nothing, so a selective plan runs with full recompute.
train::RecomputePolicy RecomputeOf(const TrainFlags& flags, const Plan& plan) {
  const std::string& policy = flags.recompute == "plan" ? plan.recompute : flags.recompute;
  return policy == "none" ? train::RecomputePolicy::kNone : train::RecomputePolicy::kFull;
}

// The options from the flags; a flag with a bad value is kInvalidArgument naming it (the command
// then exits 2, as for a value CLI11 refuses).
Result<train::TrainOptions> MakeOptions(const TrainFlags& flags, const Plan& plan) {
  train::TrainOptions options;
  options.data = flags.data;
  if (!flags.seq.empty()) {
    auto seq = ParseTokenCount(flags.seq, "--seq");
    if (!seq) return std::unexpected(seq.error());
    options.seq_len = *seq;
  }
  options.batch = flags.batch;
  options.seed = flags.seed;
  options.optimizer = flags.opt;
  options.optimizer.total_steps = flags.steps;
  if (flags.opt.warmup_steps == kWarmupFromSteps) {
    options.optimizer.warmup_steps = flags.steps / kWarmupFractionDivisor;
  }
  options.optimizer.kind =
      flags.optimizer == "sgd" ? train::OptimizerKind::kSgd : train::OptimizerKind::kAdamW;
  options.recompute = RecomputeOf(flags, plan);
  options.overlap_grad_sync = flags.grad_sync == "overlap";
  if (auto valid = train::ValidateOptimizerConfig(options.optimizer); !valid)
    return std::unexpected(valid.error());
  return options;
}

// "[3, 7]": the plan's left-out ranks.
std::string LeftOutList(const Plan& plan) {
  std::string list;
  for (int rank : plan.left_out) list += (list.empty() ? "" : ", ") + std::to_string(rank);
  return "[" + list + "]";
}

// An error every rank agrees on is printed once, by rank `printer` of `comm`; a rank's own failure
// by that rank.
int Fail(runtime::Comm& comm, const Error& error, bool agreed, int printer = 0) {
  if (!agreed || comm.rank() == printer) return ReportError(error);
  return error.code == ErrorCode::kInternal ? 3 : 1;
}

// --init weights, then --resume state (which replaces them).
Result<void> StartFrom(train::Trainer& trainer, const TrainFlags& flags) {
  if (!flags.init.empty()) {
    if (auto loaded = train::LoadInitWeights(trainer, flags.init); !loaded) return loaded;
  }
  if (!flags.resume.empty()) return train::LoadCheckpoint(trainer, flags.resume);
  return {};
}

// The participants' loop: steps, per-step lines from the first participant, checkpoints.
int TrainSteps(train::Trainer& trainer, const TrainFlags& flags, runtime::MpiWatchdog& watchdog) {
  runtime::Comm& participants = trainer.participants();
  if (auto started = StartFrom(trainer, flags); !started) {
    return Fail(participants, started.error(), true);
  }
  const bool json = flags.format == "json";
  const bool prints = participants.rank() == 0;
  if (prints && !json) PrintHeader();
  std::vector<double> recall_per_step;  // this run's steps
  PhaseMedians phase_medians;           // every participant's phases, this run's steps
  while (trainer.step() < flags.steps) {
    watchdog.SetPhase("step");
    auto report = trainer.Step();
    if (!report) return Fail(participants, report.error(), true);
    const std::vector<RankPhases> phases =
        GatherPhases(participants, trainer.world().rank(), report->phases);
    phase_medians.Add(phases);
    if (prints) PrintStep(*report, SlowestPhases(phases), json, RankPhasesJson(phases));
    recall_per_step.push_back(report->recall_loss);
    const int64_t done = trainer.step();
    const bool periodic = flags.save_every > 0 && done % flags.save_every == 0;
    if (!flags.save.empty() && (periodic || done == flags.steps)) {
      watchdog.SetPhase("checkpoint");
      if (auto saved = train::SaveCheckpoint(trainer, flags.save); !saved) {
        return Fail(participants, saved.error(), true);
      }
    }
  }
  watchdog.SetPhase("summary");
  PrintSummary(trainer, recall_per_step, phase_medians);
  return 0;
}

std::string Number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// The flags every rank must give the same value (a different --seed or --lr on one rank would
// train a different model there; a different --steps or --save-every would deadlock).
std::vector<runtime::FlagValue> AgreedFlags(const TrainFlags& flags) {
  const train::OptimizerConfig& opt = flags.opt;
  return {{"--steps", std::to_string(flags.steps)},
          {"--seq", flags.seq},
          {"--batch", std::to_string(flags.batch)},
          {"--seed", std::to_string(flags.seed)},
          {"--data", flags.data},
          {"--optimizer", flags.optimizer},
          {"--lr", Number(opt.lr)},
          {"--min-lr", Number(opt.min_lr)},
          {"--warmup", std::to_string(opt.warmup_steps)},
          {"--beta1", Number(opt.beta1)},
          {"--beta2", Number(opt.beta2)},
          {"--adam-eps", Number(opt.eps)},
          {"--weight-decay", Number(opt.weight_decay)},
          {"--grad-clip", Number(opt.grad_clip)},
          {"--recompute", flags.recompute},
          {"--grad-sync", flags.grad_sync},
          {"--save", flags.save},
          {"--save-every", std::to_string(flags.save_every)},
          {"--resume", flags.resume},
          {"--init", flags.init},
          {"--slowdown", flags.emulation.slowdown},
          {"--slowdown-pad", flags.emulation.pad},
          {"--link-slowdown", flags.emulation.link_slowdown},
          {"--timeout", Number(flags.timeout_seconds)}};
}

// Everything but the final barrier: load, agree, build, train (or leave, for a left-out rank).
int TrainOnThisRank(std::unique_ptr<runtime::Comm>& world, const TrainFlags& flags,
                    runtime::MpiWatchdog& watchdog) {
  auto plan = LoadPlan(flags.plan);
  auto model = LoadModel(flags.model);
  auto options = MakeOptions(flags, plan ? *plan : Plan{});
  // Agree on the inputs first so that no rank waits for one that failed to load them.
  const int ok = plan.has_value() && model.has_value() ? 1 : 0;
  std::vector<int> all(world->size());
  world->Allgather(&ok, sizeof ok, all.data());
  if (!ok) return Fail(*world, plan ? model.error() : plan.error(), false);
  for (int flag : all) {
    if (!flag)
      return Fail(*world,
                  {ErrorCode::kInvalidArgument,
                   "train: inputs failed to load "
                   "on another rank"},
                  true);
  }
  watchdog.SetPhase("agree");
  if (auto agreed = runtime::CheckFlagsAgree(*world, "train", AgreedFlags(flags),
                                             "every rank trains the same run");
      !agreed)
    return Fail(*world, agreed.error(), true);
  if (!options) {  // a bad flag value, the same on every rank (the flags agree): bad usage
    Fail(*world, options.error(), true);
    return kUsageExitCode;
  }
  if (auto emulated = ApplyEmulation(flags.emulation, world); !emulated) {
    return Fail(*world, emulated.error(), true);
  }
  watchdog.SetPhase("setup");
  auto trainer = train::Trainer::Create(*plan, *model, *options, *world);
  // Setup errors come before the split (every rank has them) or after it (every participant):
  // the first participating rank prints them.
  const std::vector<int> participants = ParticipatingRanks(*plan);
  if (!trainer) {
    return Fail(*world, trainer.error(), true, participants.empty() ? 0 : participants.front());
  }
  if (!*trainer) {
    std::fprintf(stderr,
                 "train: rank %d is left out by the plan (left_out = %s): it holds no model state "
                 "and takes no part in training; exiting\n",
                 world->rank(), LeftOutList(*plan).c_str());
    return 0;
  }
  if ((*trainer)->optimizer_sharded() && (*trainer)->participants().rank() == 0) {
    std::fprintf(stderr,
                 "train: ZeRO %d: the optimizer state%s is sharded over the %d participants by "
                 "whole parameters; each receives its parameters' gradient sums "
                 "(reduce-scatter)%s\n",
                 plan->zero_stage, (*trainer)->weights_sharded() ? " with the weights" : "",
                 (*trainer)->participants().size(),
                 (*trainer)->weights_sharded()
                     ? " once per sequence, and gathers every layer's weights before its "
                       "forward and before its backward"
                 : (*trainer)->grads_sharded() ? " once per sequence, keeping only its own"
                                                 " parameters' gradients"
                                               : " once per step");
  }
  return TrainSteps(**trainer, flags, watchdog);
}

int RunTrainCommand(const TrainFlags& flags) {
  runtime::MpiSession session(nullptr, nullptr);
  runtime::MpiWatchdog watchdog("train", flags.timeout_seconds);
  watchdog.SetPhase("load");
  train::SetComputeThreads(flags.threads);
  std::unique_ptr<runtime::Comm> world = runtime::MpiWorldComm();
  const int code = TrainOnThisRank(world, flags, watchdog);
  // Every rank, on every path, waits here for the others: a left-out rank or one that failed
  // together with the others leaves no peer's watchdog waiting for it.
  watchdog.SetPhase("finish");
  world->Barrier();
  return code;
}

}  // namespace

void AddTrainCommand(CLI::App& app, Actions& actions) {
  static TrainFlags flags;
  CLI::App* cmd = app.add_subcommand(
      "train", "Train the Llama model with a plan (run under mpirun -np <plan num_ranks>)");
  cmd->add_option("--plan", flags.plan, "Plan JSON file (hexiseq plan --format json)")->required();
  cmd->add_option("--model", flags.model, "Model preset or YAML file")->required();
  cmd->add_option("--data", flags.data,
                  "Byte file, or synthetic:recall[:K] (default; K keys, 1 by default)");
  cmd->add_option("--steps", flags.steps, "Optimizer steps (default 10)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--seq", flags.seq,
                  "Sequence length S, e.g. 1K or 1024 (default: the plan's; given, it must equal "
                  "it)");
  cmd->add_option("--batch", flags.batch,
                  "Sequences per step (default: the plan's batch; given, it must equal it)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--seed", flags.seed, "Seed of weights and data (default 1)")->check(SeedRange());
  cmd->add_option("--optimizer", flags.optimizer, "adamw (default) or sgd")
      ->check(CLI::IsMember({"adamw", "sgd"}));
  cmd->add_option("--lr", flags.opt.lr, "Peak learning rate (default 3e-3)");
  cmd->add_option("--min-lr", flags.opt.min_lr, "Learning rate at the end of the cosine (0)");
  cmd->add_option("--warmup", flags.opt.warmup_steps,
                  "Linear warmup steps (default: a tenth of --steps)");
  cmd->add_option("--beta1", flags.opt.beta1, "AdamW beta1 (default 0.9)");
  cmd->add_option("--beta2", flags.opt.beta2, "AdamW beta2 (default 0.999)");
  cmd->add_option("--adam-eps", flags.opt.eps, "AdamW epsilon (default 1e-8)");
  cmd->add_option("--weight-decay", flags.opt.weight_decay, "Weight decay (default 0)");
  cmd->add_option("--grad-clip", flags.opt.grad_clip,
                  "Clip the global gradient norm to this (default 1; <= 0: off)");
  cmd->add_option("--recompute", flags.recompute,
                  "plan (default: the plan's policy; selective runs as full) | full | none")
      ->check(CLI::IsMember({"plan", "full", "none"}));
  cmd->add_option("--grad-sync", flags.grad_sync,
                  "overlap (default: gradient all-reduces start during backward) or blocking "
                  "(all after it)")
      ->check(CLI::IsMember({"overlap", "blocking"}));
  cmd->add_option("--threads", flags.threads, "libtorch and OpenBLAS threads per rank (1)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--save", flags.save,
                  "Checkpoint directory: weights (safetensors, HF names), optimizer state, step");
  cmd->add_option("--save-every", flags.save_every, "Also save every K steps (default: at the end)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--resume", flags.resume, "Resume from the latest checkpoint in this directory");
  cmd->add_option("--init", flags.init, "Initial weights: a safetensors file with HF names");
  cmd->add_option("--format", flags.format, "table|json")->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--timeout", flags.timeout_seconds,
                  "Seconds without a heartbeat from a peer, or without progress on any rank, "
                  "before every rank reports it and exits (default 300)")
      ->check(FiniteRange(1, 86400));
  AddEmulationOptions(cmd, flags.emulation, "compute regions");
  actions[cmd] = [] { return RunTrainCommand(flags); };
}

}  // namespace hexiseq::cli
