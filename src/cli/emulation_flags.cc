// --slowdown, --slowdown-pad and --link-slowdown (emulation_flags.h).
#include "cli/emulation_flags.h"

#include <cstdio>

#include "runtime/link_delay.h"
#include "runtime/mpi_comm.h"
#include "runtime/slowdown.h"

namespace hexiseq::cli {

void AddEmulationOptions(CLI::App* cmd, EmulationFlags& flags, const std::string& compute_what) {
  cmd->add_option("--slowdown", flags.slowdown,
                  "RANK=FACTOR[,...]: emulate slower devices; that rank's " + compute_what +
                      " take FACTOR (>= 1) times as long (docs/measured.md)")
      ->check(CLI::Validator(runtime::SlowdownSyntaxError, "RANK=FACTOR[,...]", "slowdown"));
  cmd->add_option("--slowdown-pad", flags.pad,
                  "How --slowdown pads: spin (busy, keeps the core), sleep (frees it) or auto "
                  "(default: spin when every rank has a CPU of its own)")
      ->check(CLI::IsMember({"auto", "spin", "sleep"}));
  cmd->add_option("--link-slowdown", flags.link_slowdown,
                  "A-B=NS[,...]: emulate slow links; every byte between ranks A and B takes NS "
                  "nanoseconds longer, both ways (docs/measured.md)")
      ->check(CLI::Validator(runtime::LinkSlowdownSyntaxError, "A-B=NS[,...]", "link-slowdown"));
  cmd->add_option("--comm-wait", flags.comm_wait,
                  "How communication waits: spin (MPI's busy polling), sleep (poll, then sleep "
                  "between polls: frees the core) or auto (sleep when ranks share CPUs); "
                  "default spin (docs/measured.md)")
      ->check(CLI::IsMember({"auto", "spin", "sleep"}));
}

namespace {

// Sets the communication wait mode from --comm-wait (collective over `world` for auto).
Result<void> ApplyWaitMode(const std::string& requested, runtime::Comm& world) {
  // --slowdown-pad's rule: spin, sleep, or auto (sleep when ranks share CPUs).
  auto mode = runtime::ChoosePadMode(world, requested, "--comm-wait");
  if (!mode) return std::unexpected(mode.error());
  const bool sleep = *mode == runtime::PadMode::kSleep;
  runtime::SetWaitMode(sleep ? runtime::WaitMode::kSleep : runtime::WaitMode::kSpin);
  if (sleep && world.rank() == 0)
    std::fprintf(stderr, "communication: waiting by sleeping (--comm-wait %s)\n",
                 requested.c_str());
  return {};
}

}  // namespace

Result<void> ApplyEmulation(const EmulationFlags& flags, std::unique_ptr<runtime::Comm>& world) {
  const int rank = world->rank(), size = world->size();
  if (auto waiting = ApplyWaitMode(flags.comm_wait, *world); !waiting) return waiting;
  if (!flags.slowdown.empty()) {
    if (auto slowed = runtime::ApplySlowdown(flags.slowdown, rank, size); !slowed) return slowed;
    auto mode = runtime::ChoosePadMode(*world, flags.pad);
    if (!mode) return std::unexpected(mode.error());
    runtime::SetPadMode(*mode);
    if (rank == 0) {
      std::fprintf(stderr, "slowdown: padding by %s (--slowdown-pad %s)\n",
                   *mode == runtime::PadMode::kSpin ? "spinning" : "sleeping", flags.pad.c_str());
    }
  }
  if (!flags.link_slowdown.empty()) {
    auto delays = runtime::ParseLinkSlowdown(flags.link_slowdown, size);
    if (!delays) return std::unexpected(delays.error());
    world = runtime::WithLinkDelays(std::move(world), *delays);
  }
  return {};
}

}  // namespace hexiseq::cli
