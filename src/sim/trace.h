// Chrome trace-event JSON (opens in Perfetto and chrome://tracing) of a simulated layer step:
// one process per node (`pid` = node), one thread per rank (`tid` = rank, named with its
// data-parallel replica or "left out") carrying its compute ops, and per-link communication
// lanes as extra threads of the sending node (a link that carries overlapping messages gets more
// lanes). Phase "X" events, `ts` and `dur` in microseconds. The explicit layers come first, then
// each rank's LM head, then one gradient bucket; the iteration repeats this step (see
// simulator.h). Byte-identical for the same input.
#pragma once

#include <string>

#include "sim/simulator.h"
#include "spec/cluster.h"
#include "spec/error.h"

namespace hexiseq::sim {

// REQUIRES: `result` came from Simulate with keep_timeline on the same cluster.
std::string ChromeTraceJson(const SimResult& result, const Cluster& cluster);
Result<void> WriteChromeTrace(const SimResult& result, const Cluster& cluster,
                              const std::string& path);

}  // namespace hexiseq::sim
