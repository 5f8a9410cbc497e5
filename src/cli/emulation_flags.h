// The flags that make equal CPU ranks unequal, shared by train, attn-check and calibrate:
// --slowdown (compute), --slowdown-pad (how the padding waits), --link-slowdown (links) and
// --comm-wait (how communication waits: ranks that share cores should not poll).
// docs/measured.md describes them.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "runtime/comm.h"
#include "spec/error.h"

namespace hexiseq::cli {

struct EmulationFlags {
  std::string slowdown;            // RANK=FACTOR[,...]
  std::string pad = "auto";        // spin | sleep | auto
  std::string link_slowdown;       // A-B=NS[,...]
  std::string comm_wait = "spin";  // spin | sleep | auto
};

// Adds the four options to `cmd`; `compute_what` says what --slowdown stretches there.
void AddEmulationOptions(CLI::App* cmd, EmulationFlags& flags, const std::string& compute_what);

// Collective over `world`: sets this rank's slowdown factor, padding mode and communication wait
// mode (runtime::SetWaitMode), and replaces `world`
// by one whose slowed links delay their bytes (when --link-slowdown is given). Every rank parses
// the same flags, so every rank returns the same error. Rank 0 says the padding mode on stderr, and
// the wait mode when it sleeps.
Result<void> ApplyEmulation(const EmulationFlags& flags, std::unique_ptr<runtime::Comm>& world);

}  // namespace hexiseq::cli
