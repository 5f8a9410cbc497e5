// ParallelFor: every index once, whatever the thread count.
#include "sched/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace hexiseq {
namespace {

TEST(ParallelFor, RunsEveryIndexExactlyOnce) {
  for (int threads : {0, 1, 2, 3, 8})
    for (size_t count : {0u, 1u, 2u, 5u, 64u}) {
      std::vector<std::atomic<int>> runs(count);
      ParallelFor(threads, count, [&](size_t index) { ++runs[index]; });
      for (size_t index = 0; index < count; ++index)
        EXPECT_EQ(runs[index].load(), 1) << "threads " << threads << " count " << count;
    }
}

TEST(ParallelFor, OneThreadRunsInOrderOnTheCaller) {
  std::vector<size_t> order;
  ParallelFor(1, 6, [&](size_t index) { order.push_back(index); });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
}

}  // namespace
}  // namespace hexiseq
