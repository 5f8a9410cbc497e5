// Compute padding for emulated slow ranks (slowdown.h): spins, or sleeps with the debt carried
// over; the choice between them from the ranks' CPU affinity.
#include "runtime/slowdown.h"

#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/str_cat.h"

namespace hexiseq::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// The factor is process-wide; debt and open regions belong to the thread that times them, so
// ranks run as threads of one process (the in-process tests) never share them.
std::atomic<double> g_factor{1.0};
std::atomic<PadMode> g_pad_mode{PadMode::kSleep};
std::atomic<double> g_requested_seconds{0.0};  // total padding asked for

struct ThreadState {
  double debt_seconds = 0;  // padding owed (negative: credit from an oversleep)
  bool open = false;        // a MarkComputeStart region is open
  Clock::time_point mark;
};

ThreadState& State() {
  thread_local ThreadState state;
  return state;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Spends `seconds` of wall time: busy on the clock (spin) or asleep.
void Wait(double seconds, bool spin) {
  const auto span =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  if (!spin) {
    std::this_thread::sleep_for(span);
    return;
  }
  const Clock::time_point until = Clock::now() + span;
  while (Clock::now() < until) {
  }
}

std::string RuleText() {
  return StrCat("RANK=FACTOR[,RANK=FACTOR...], RANK a rank of this run, FACTOR a number in [1, ",
                kMaxSlowdown, "]: that rank's compute takes FACTOR times as long");
}

Result<double> ParseFactor(const std::string& text, const std::string& where) {
  char* end = nullptr;
  errno = 0;
  const double factor = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(factor)) {
    return InvalidArgument(StrCat(where, ": FACTOR '", text, "' is not a number (rule: ",
                                  RuleText(), "; hint: write 1=2 for rank 1 at half speed)"));
  }
  if (factor < 1 || factor > kMaxSlowdown) {
    return InvalidArgument(StrCat(where, ": FACTOR = ", text, ": must be in [1, ", kMaxSlowdown,
                                  "] (rule: ", RuleText(),
                                  "; hint: a slowdown cannot speed a rank up; to make rank 0 "
                                  "the fast one, slow the others down)"));
  }
  return factor;
}

}  // namespace

Result<int> ParseRankNumber(const std::string& text, const std::string& where, int num_ranks,
                            const std::string& rule) {
  char* end = nullptr;
  errno = 0;
  const long rank = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0) {
    return InvalidArgument(
        StrCat(where, ": RANK '", text, "' is not a whole number (rule: ", rule, ")"));
  }
  if (rank < 0 || (num_ranks > 0 && rank >= num_ranks)) {
    return InvalidArgument(StrCat(where, ": RANK = ", text, ": this run has ", num_ranks,
                                  " rank(s), 0..", num_ranks - 1, " (rule: ", rule,
                                  "; hint: check mpirun -np)"));
  }
  return static_cast<int>(rank);
}

Result<std::vector<double>> ParseSlowdown(const std::string& text, int num_ranks,
                                          const std::string& flag) {
  std::vector<double> factors(std::max(num_ranks, 0), 1.0);
  std::vector<int> ranks_seen;
  if (text.empty()) {
    return InvalidArgument(StrCat(flag, " = '': empty (rule: ", RuleText(), ")"));
  }
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string piece = text.substr(begin, comma - begin);
    const std::string where = StrCat(flag, " '", piece, "'");
    const size_t equals = piece.find('=');
    if (equals == std::string::npos) {
      return InvalidArgument(
          StrCat(where, ": no '=' (rule: ", RuleText(), "; hint: write 1=2, not 1:2 or 2)"));
    }
    auto rank = ParseRankNumber(piece.substr(0, equals), where, num_ranks, RuleText());
    if (!rank) return std::unexpected(rank.error());
    auto factor = ParseFactor(piece.substr(equals + 1), where);
    if (!factor) return std::unexpected(factor.error());
    if (std::find(ranks_seen.begin(), ranks_seen.end(), *rank) != ranks_seen.end()) {
      return InvalidArgument(StrCat(where, ": rank ", *rank, " is given twice (rule: ", RuleText(),
                                    "; hint: name each rank once)"));
    }
    ranks_seen.push_back(*rank);
    if (num_ranks > 0) factors[*rank] = *factor;
    begin = comma + 1;
  }
  return factors;
}

Result<void> ApplySlowdown(const std::string& text, int rank, int num_ranks,
                           const std::string& flag) {
  if (text.empty()) return {};
  auto factors = ParseSlowdown(text, num_ranks, flag);
  if (!factors) return std::unexpected(factors.error());
  SetComputeSlowdown((*factors)[rank]);
  return {};
}

std::string SlowdownSyntaxError(const std::string& text) {
  auto parsed = ParseSlowdown(text, 0);
  return parsed ? std::string() : parsed.error().message;
}

void SetComputeSlowdown(double factor) {
  HEXISEQ_CHECK(factor >= 1 && factor <= kMaxSlowdown, "slowdown factor in [1, kMaxSlowdown]");
  g_factor.store(factor);
  // The default 50 us timer slack would add to every sleep; ask for the tightest wake-up.
  if (factor > 1) prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

double ComputeSlowdown() { return g_factor.load(); }

void SetPadMode(PadMode mode) { g_pad_mode.store(mode); }

PadMode CurrentPadMode() { return g_pad_mode.load(); }

const char* PadModeName(PadMode mode) { return mode == PadMode::kSpin ? "spin" : "sleep"; }

namespace {

constexpr size_t kHostBytes = 256;

// One rank's host name and CPU affinity, as gathered bytes.
struct Placement {
  char host[kHostBytes] = {};
  cpu_set_t cpus;
};

// Kuhn's augmenting path: can `rank` take a CPU, moving earlier ranks to others?
bool Assign(int rank, const std::vector<const cpu_set_t*>& masks, std::vector<int>& owner,
            std::vector<char>& visited) {
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, masks[rank]) || visited[cpu]) continue;
    visited[cpu] = 1;
    if (owner[cpu] < 0 || Assign(owner[cpu], masks, owner, visited)) {
      owner[cpu] = rank;
      return true;
    }
  }
  return false;
}

// Whether the ranks whose masks are `masks` can each have a distinct CPU (a bipartite matching).
bool DistinctCpusExist(const std::vector<const cpu_set_t*>& masks) {
  std::vector<int> owner(CPU_SETSIZE, -1);
  for (int rank = 0; rank < static_cast<int>(masks.size()); ++rank) {
    std::vector<char> visited(CPU_SETSIZE, 0);
    if (!Assign(rank, masks, owner, visited)) return false;
  }
  return true;
}

}  // namespace

bool EveryRankHasOwnCpu(Comm& world) {
  Placement mine;
  gethostname(mine.host, kHostBytes - 1);
  CPU_ZERO(&mine.cpus);
  if (sched_getaffinity(0, sizeof mine.cpus, &mine.cpus) != 0) {
    for (int cpu = 0; cpu < std::min<long>(sysconf(_SC_NPROCESSORS_ONLN), CPU_SETSIZE); ++cpu) {
      CPU_SET(cpu, &mine.cpus);
    }
  }
  std::vector<Placement> all(world.size());
  world.Allgather(&mine, sizeof mine, all.data());
  std::vector<char> checked(world.size(), 0);
  for (int first = 0; first < world.size(); ++first) {
    if (checked[first]) continue;
    std::vector<const cpu_set_t*> host_masks;
    for (int rank = first; rank < world.size(); ++rank) {
      if (std::strncmp(all[rank].host, all[first].host, kHostBytes) != 0) continue;
      checked[rank] = 1;
      host_masks.push_back(&all[rank].cpus);
    }
    if (!DistinctCpusExist(host_masks)) return false;
  }
  return true;
}

Result<PadMode> ChoosePadMode(Comm& world, const std::string& requested, const std::string& flag) {
  if (requested == "spin") return PadMode::kSpin;
  if (requested == "sleep") return PadMode::kSleep;
  if (requested != "auto") {
    return InvalidArgument(StrCat(flag, " = '", requested,
                                  "': not a padding mode (rule: spin, sleep or auto; hint: auto "
                                  "spins when every rank has a CPU of its own)"));
  }
  return EveryRankHasOwnCpu(world) ? PadMode::kSpin : PadMode::kSleep;
}

double RequestedPaddingSeconds() { return g_requested_seconds.load(); }

void PadCompute(double elapsed_seconds) {
  const double factor = g_factor.load(std::memory_order_relaxed);
  if (factor <= 1 || elapsed_seconds <= 0) return;
  ThreadState& state = State();
  const double pad = (factor - 1) * elapsed_seconds;
  g_requested_seconds.fetch_add(pad);
  state.debt_seconds += pad;
  const bool spin = g_pad_mode.load(std::memory_order_relaxed) == PadMode::kSpin;
  if (!spin && state.debt_seconds < kMinSleepSeconds) return;
  const Clock::time_point start = Clock::now();
  Wait(state.debt_seconds, spin);
  state.debt_seconds -= SecondsSince(start);  // an overshoot becomes credit
}

void SettlePadding() {
  ThreadState& state = State();
  if (state.debt_seconds > 0) {
    Wait(state.debt_seconds, g_pad_mode.load(std::memory_order_relaxed) == PadMode::kSpin);
  }
  state.debt_seconds = 0;
}

ComputeRegion::~ComputeRegion() { PadCompute(SecondsSince(start_)); }

void MarkComputeStart() {
  ThreadState& state = State();
  state.open = true;
  state.mark = Clock::now();
}

void PadComputeSinceMark() {
  ThreadState& state = State();
  if (!state.open) return;
  state.open = false;
  PadCompute(SecondsSince(state.mark));
}

ComputePause::ComputePause() : was_open_(State().open) { PadComputeSinceMark(); }

ComputePause::~ComputePause() {
  if (was_open_) MarkComputeStart();
}

}  // namespace hexiseq::runtime
