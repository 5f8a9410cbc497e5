// A conformance check for runtime::Comm implementations, run on every rank of a world: MPI
// matching (source, tag, posting order), WaitAny and Test on out-of-order completion, messages to
// self and empty messages, all-to-all-v, all-reduce, all-gather, Split (with a rank in no group)
// and Dup with separate message spaces. The process-group transport is tested with it from
// Python (tests/python/test_comm.py). Each check runs on a sub-communicator of the first ranks.
#pragma once

#include <string>
#include <vector>

#include "runtime/comm.h"

namespace hexiseq::python {

// Collective over `world`. Returns one line per failed expectation ("" when all hold), naming
// the check, the rank and the values. REQUIRES: world.size() >= 5 for every check to run
// (smaller worlds run the checks that fit).
std::vector<std::string> CheckCommConformance(runtime::Comm& world);

}  // namespace hexiseq::python
