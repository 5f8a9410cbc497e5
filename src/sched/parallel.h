// A fixed set of independent tasks spread over a few threads.
#pragma once

#include <cstddef>
#include <functional>

namespace hexiseq {

// Runs task(0), ..., task(count - 1), each once, on up to `threads` threads (the calling thread
// among them; 1 or less: in order on the calling thread). Returns when all have run. The result
// does not depend on `threads` when each task writes only its own output slot.
void ParallelFor(int threads, size_t count, const std::function<void(size_t)>& task);

// Sets malloc's heap growth step for a process that plans on several threads (once; ParallelFor
// calls it before it starts threads; call it before starting others).
void PrepareHeapsForThreads();

// The planner's default thread count: the machine's hardware threads, at most
// kMaxDefaultPlannerThreads (the planner's parallel phases have few tasks), at least 1.
constexpr int kMaxDefaultPlannerThreads = 8;
int DefaultPlannerThreads();

}  // namespace hexiseq
