// --slowdown, --slowdown-pad and --link-slowdown (emulation_flags.h).
#include "cli/emulation_flags.h"

#include <cstdio>

#include "runtime/link_delay.h"
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
}

Result<void> ApplyEmulation(const EmulationFlags& flags, std::unique_ptr<runtime::Comm>& world) {
  const int rank = world->rank(), size = world->size();
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
