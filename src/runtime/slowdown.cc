// Compute padding for emulated slow ranks (slowdown.h): sleeps with the debt carried over.
#include "runtime/slowdown.h"

#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "runtime/str_cat.h"

namespace hexiseq::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// The factor is process-wide; debt and open regions belong to the thread that times them, so
// ranks run as threads of one process (the in-process tests) never share them.
std::atomic<double> g_factor{1.0};
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

Result<int> ParseRank(const std::string& text, const std::string& where, int num_ranks) {
  char* end = nullptr;
  errno = 0;
  const long rank = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0) {
    return InvalidArgument(
        StrCat(where, ": RANK '", text, "' is not a whole number (rule: ", RuleText(), ")"));
  }
  if (rank < 0 || (num_ranks > 0 && rank >= num_ranks)) {
    return InvalidArgument(StrCat(where, ": RANK = ", text, ": this run has ", num_ranks,
                                  " rank(s), 0..", num_ranks - 1, " (rule: ", RuleText(),
                                  "; hint: check mpirun -np)"));
  }
  return static_cast<int>(rank);
}

}  // namespace

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
    auto rank = ParseRank(piece.substr(0, equals), where, num_ranks);
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

double RequestedPaddingSeconds() { return g_requested_seconds.load(); }

void PadCompute(double elapsed_seconds) {
  const double factor = g_factor.load(std::memory_order_relaxed);
  if (factor <= 1 || elapsed_seconds <= 0) return;
  ThreadState& state = State();
  const double pad = (factor - 1) * elapsed_seconds;
  g_requested_seconds.fetch_add(pad);
  state.debt_seconds += pad;
  if (state.debt_seconds < kMinSleepSeconds) return;
  const Clock::time_point start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(state.debt_seconds));
  state.debt_seconds -= SecondsSince(start);  // an oversleep becomes credit
}

void SettlePadding() {
  ThreadState& state = State();
  if (state.debt_seconds > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(state.debt_seconds));
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

}  // namespace hexiseq::runtime
