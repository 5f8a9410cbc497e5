// --slowdown: the parser's errors, that padded regions take FACTOR times their own measured
// duration in total (sleeps with carry-over, and spins), for long and for very short regions, and
// the choice of padding mode from the ranks' CPUs.
#include "runtime/slowdown.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <cmath>
#include <thread>

namespace hexiseq::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Spins for about `seconds` of wall time (the work of a region).
void Spin(double seconds) {
  const Clock::time_point start = Clock::now();
  volatile double sink = 0;
  while (SecondsSince(start) < seconds) sink = sink + 1;
}

// Runs `regions` regions of `work_seconds` each at `factor`; returns total wall / total work.
double MeasuredFactor(double factor, int regions, double work_seconds) {
  SetComputeSlowdown(factor);
  const double padding_before = RequestedPaddingSeconds();
  double work = 0;
  const Clock::time_point start = Clock::now();
  for (int region = 0; region < regions; ++region) {
    const Clock::time_point begin = Clock::now();
    const ComputeRegion padded;
    Spin(work_seconds);
    work += SecondsSince(begin);
  }
  PadCompute(kMinSleepSeconds);  // settles the carried debt below the sleep threshold
  const double wall = SecondsSince(start);
  EXPECT_NEAR(RequestedPaddingSeconds() - padding_before, (factor - 1) * (work + kMinSleepSeconds),
              0.05 * factor * work);
  SetComputeSlowdown(1);
  return wall / work;
}

TEST(Slowdown, LongRegionsTakeFactorTimesAsLong) {
  // 40 regions of 2 ms: the sleeps are long, their overshoot is credited to the next region.
  for (double factor : {2.0, 4.0}) {
    const double measured = MeasuredFactor(factor, 40, 2e-3);
    EXPECT_NEAR(measured, factor, 0.1 * factor) << "factor " << factor;
  }
}

TEST(Slowdown, ShortRegionsAreCarriedOver) {
  // 2000 regions of 10 us, each padding below kMinSleepSeconds: the debt is carried over and
  // slept in larger pieces, so the total still follows the factor.
  const double measured = MeasuredFactor(2.0, 2000, 10e-6);
  EXPECT_NEAR(measured, 2.0, 0.25);
}

// Spinning pads exactly on the clock: no carry-over threshold, no oversleep, so the factor holds
// tightly even for 10 us regions (tolerance: the clock reads around each region).
TEST(Slowdown, SpinPaddingIsExact) {
  SetPadMode(PadMode::kSpin);
  for (double factor : {2.0, 4.0}) {
    EXPECT_NEAR(MeasuredFactor(factor, 40, 2e-3), factor, 0.03 * factor) << "factor " << factor;
  }
  EXPECT_NEAR(MeasuredFactor(2.0, 2000, 10e-6), 2.0, 0.1);
  SetPadMode(PadMode::kSleep);
}

// auto spins only when every rank can have a CPU of its own: the in-process ranks are threads of
// this process and share its affinity mask, so as many ranks as CPUs fit and one more does not.
TEST(Slowdown, AutoPadSpinsOnlyWithACpuPerRank) {
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof cpus, &cpus), 0);
  const int available = CPU_COUNT(&cpus);
  for (int ranks : {available, available + 1}) {
    RunInProcess(ranks, [&](Comm& comm) {
      auto mode = ChoosePadMode(comm, "auto");
      ASSERT_TRUE(mode.has_value());
      EXPECT_EQ(*mode, ranks <= available ? PadMode::kSpin : PadMode::kSleep) << ranks;
      EXPECT_EQ(EveryRankHasOwnCpu(comm), ranks <= available);
    });
  }
  RunInProcess(1, [](Comm& comm) {
    EXPECT_EQ(*ChoosePadMode(comm, "sleep"), PadMode::kSleep);
    EXPECT_EQ(*ChoosePadMode(comm, "spin"), PadMode::kSpin);
    auto bad = ChoosePadMode(comm, "busy");
    ASSERT_FALSE(bad.has_value());
    EXPECT_NE(bad.error().message.find("--slowdown-pad = 'busy': not a padding mode"),
              std::string::npos)
        << bad.error().message;
  });
}

TEST(Slowdown, FactorOneDoesNotPad) {
  SetComputeSlowdown(1);
  const double before = RequestedPaddingSeconds();
  {
    const ComputeRegion padded;
    Spin(1e-3);
  }
  MarkComputeStart();
  Spin(1e-3);
  PadComputeSinceMark();
  EXPECT_EQ(RequestedPaddingSeconds(), before);
}

TEST(Slowdown, MarkPadsTheTimeSinceTheMarkOnce) {
  SetComputeSlowdown(3);
  const double before = RequestedPaddingSeconds();
  const Clock::time_point outer_start = Clock::now();
  MarkComputeStart();
  const Clock::time_point inner_start = Clock::now();
  Spin(2e-3);
  const double inner = SecondsSince(inner_start);  // inside the region (>= 2 ms)
  PadComputeSinceMark();
  const double outer = SecondsSince(outer_start);  // contains the region
  const double padded = RequestedPaddingSeconds() - before;
  // (3 - 1) x the region, which lies between the two clock spans; the upper slack covers a
  // preemption, and is far below what padding since an earlier mark (the whole test so far) would
  // give.
  constexpr double kPreemptionSlack = 5e-3;
  EXPECT_GE(padded, 2 * inner);
  EXPECT_LE(padded, 2 * (outer + kPreemptionSlack));
  PadComputeSinceMark();  // no region open: nothing more
  EXPECT_EQ(RequestedPaddingSeconds() - before, padded);
  SetComputeSlowdown(1);
}

// A wait inside an open region (the trainer waiting for weights in the forward) is not padded;
// the compute on both sides of it is, and without an open region a pause opens none.
TEST(Slowdown, PausedWaitsAreNotPadded) {
  SetComputeSlowdown(3);
  const double before = RequestedPaddingSeconds();
  const Clock::time_point outer_start = Clock::now();
  MarkComputeStart();
  Spin(2e-3);
  double waited = 0;
  {
    const ComputePause pause;
    const Clock::time_point wait_start = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    waited = SecondsSince(wait_start);
  }
  Spin(2e-3);
  PadComputeSinceMark();
  const double padded = RequestedPaddingSeconds() - before;
  constexpr double kPreemptionSlack = 5e-3;
  EXPECT_GE(padded, 2 * 4e-3);
  EXPECT_LE(padded, 2 * (SecondsSince(outer_start) - waited + kPreemptionSlack));
  { const ComputePause pause; }  // no region open: nothing padded, none opened
  PadComputeSinceMark();
  EXPECT_EQ(RequestedPaddingSeconds() - before, padded);
  SetComputeSlowdown(1);
}

TEST(Slowdown, SettleSleepsWhatIsOwed) {
  SetComputeSlowdown(2);
  // A region of about 30 us owes about 30 us, below kMinSleepSeconds, so the pad is carried, not
  // slept. A region stretched past that (preempted, or slowed by a sanitizer) pays at once; such a
  // try is made again.
  constexpr int kTries = 20;
  double owed = 0;
  for (int attempt = 0; attempt < kTries && !(owed > 0 && owed < kMinSleepSeconds); ++attempt) {
    SettlePadding();  // start even
    const double before = RequestedPaddingSeconds();
    {
      const ComputeRegion padded;
      Spin(30e-6);
    }
    owed = RequestedPaddingSeconds() - before;
  }
  ASSERT_GT(owed, 0);
  ASSERT_LT(owed, kMinSleepSeconds)
      << "every region of 30 us took " << kMinSleepSeconds << " s or more";
  const Clock::time_point start = Clock::now();
  SettlePadding();
  EXPECT_GE(SecondsSince(start), owed);
  const Clock::time_point again = Clock::now();
  SettlePadding();  // nothing owed any more
  EXPECT_LT(SecondsSince(again), 30e-6);
  SetComputeSlowdown(1);
}

TEST(Slowdown, ParsesFactorsPerRank) {
  auto factors = ParseSlowdown("1=2,3=4.5", 4);
  ASSERT_TRUE(factors.has_value()) << factors.error().message;
  EXPECT_EQ(*factors, (std::vector<double>{1, 2, 1, 4.5}));
  auto syntax_only = ParseSlowdown("7=2", 0);
  ASSERT_TRUE(syntax_only.has_value());
  EXPECT_TRUE(syntax_only->empty());
}

void ExpectError(const std::string& text, int ranks, const std::string& part) {
  auto factors = ParseSlowdown(text, ranks);
  ASSERT_FALSE(factors.has_value()) << text;
  EXPECT_EQ(factors.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(factors.error().message.find("--slowdown"), std::string::npos)
      << factors.error().message;
  EXPECT_NE(factors.error().message.find(part), std::string::npos) << factors.error().message;
}

TEST(Slowdown, BadInputsAreClearErrors) {
  ExpectError("1=0.5", 2, "FACTOR = 0.5: must be in [1, 1000]");
  ExpectError("1=0", 2, "FACTOR = 0: must be in [1, 1000]");
  ExpectError("1=fast", 2, "FACTOR 'fast' is not a number");
  ExpectError("1=", 2, "FACTOR '' is not a number");
  ExpectError("1=inf", 2, "is not a number");
  ExpectError("1:2", 2, "no '='");
  ExpectError("2=2", 2, "RANK = 2: this run has 2 rank(s), 0..1");
  ExpectError("-1=2", 2, "RANK = -1");
  ExpectError("x=2", 2, "RANK 'x' is not a whole number");
  ExpectError("1=2,1=3", 2, "rank 1 is given twice");
  ExpectError("", 2, "empty");
  ExpectError("1=2,", 2, "no '='");
  EXPECT_EQ(SlowdownSyntaxError("1=2"), "");
  EXPECT_NE(SlowdownSyntaxError("1=0.5").find("must be in [1, 1000]"), std::string::npos);
}

}  // namespace
}  // namespace hexiseq::runtime
