// Flags that every rank of a multi-rank command must give the same value (a seed, a tolerance, a
// step count): each rank's values are hashed and gathered, and the first flag that differs is an
// error naming it and which ranks use which value, the same on every rank. Collective: every rank
// calls it with the same flag names in the same order.
#pragma once

#include <string>
#include <vector>

#include "runtime/comm.h"
#include "spec/error.h"

namespace hexiseq::runtime {

struct FlagValue {
  std::string flag;   // e.g. "--seed"
  std::string value;  // as the rank parsed it, e.g. "1"
};

// kInvalidArgument "<command>: --seed differs across ranks: ranks 0, 1, 2 use 1; rank 3 uses 2
// (rule: <rule>; hint: give every rank the same flags)" for the first flag that differs.
Result<void> CheckFlagsAgree(Comm& world, const std::string& command,
                             const std::vector<FlagValue>& flags, const std::string& rule);

}  // namespace hexiseq::runtime
