// ParallelFor (parallel.h): workers take the next index from a shared counter.
#include "sched/parallel.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace hexiseq {
namespace {

// Heap growth step of malloc's arenas while planner threads run. A thread's arena grows by
// changing page protections, which on a virtual machine costs every other running thread of the
// process a TLB flush; page-sized steps made it hundreds of times per plan (772 mprotect calls
// at 128 GPUs on 2 threads; 16 with this step). Only address space is reserved: pages are
// touched when used.
constexpr int kArenaGrowthBytes = 32 << 20;

}  // namespace

void PrepareHeapsForThreads() {
  static std::once_flag once;
  std::call_once(once, [] { mallopt(M_TOP_PAD, kArenaGrowthBytes); });
}

void ParallelFor(int threads, size_t count, const std::function<void(size_t)>& task) {
  const size_t workers = std::min(count, static_cast<size_t>(std::max(threads, 1)));
  if (workers <= 1) {
    for (size_t index = 0; index < count; ++index) task(index);
    return;
  }
  PrepareHeapsForThreads();
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t index = next++; index < count; index = next++) task(index);
  };
  std::vector<std::thread> helpers;
  for (size_t helper = 1; helper < workers; ++helper) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
}

int DefaultPlannerThreads() {
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());  // 0: unknown
  return std::clamp(hardware, 1, kMaxDefaultPlannerThreads);
}

}  // namespace hexiseq
