// MPI-backed Comm. Each MpiComm owns its MPI communicator and frees it on destruction; large
// all-to-all-v counts (beyond int) fall back to chunked point-to-point on a private duplicate.
#include "runtime/mpi_comm.h"

#include <mpi.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "spec/error.h"

namespace hexiseq::runtime {
namespace {

struct MpiRequest : Request {
  MPI_Request handle = MPI_REQUEST_NULL;
};
// A collective whose count array MPI reads until it completes.
struct MpiCountsRequest : MpiRequest {
  std::vector<int> counts;
};

// What this process's communication is doing, for the watchdog: how many blocking calls (and
// successful tests) completed, and whether the main thread is inside a blocking call now.
struct CommActivity {
  std::atomic<int64_t> completed{0};
  std::atomic<int> inside{0};
};
CommActivity& Activity() {
  static CommActivity activity;
  return activity;
}
// Marks the scope of one blocking MPI call.
class BlockingCall {
 public:
  BlockingCall() { ++Activity().inside; }
  ~BlockingCall() {
    --Activity().inside;
    ++Activity().completed;
  }
  BlockingCall(const BlockingCall&) = delete;
  BlockingCall& operator=(const BlockingCall&) = delete;
};

std::atomic<WaitMode> g_wait_mode{WaitMode::kSpin};
// A sleeping wait polls this long before its first sleep (a message due soon costs no wake-up),
// then sleeps this long between polls.
constexpr auto kPollBeforeSleeping = std::chrono::microseconds(50);
constexpr auto kSleepBetweenPolls = std::chrono::microseconds(50);

bool Sleeping() { return g_wait_mode.load(std::memory_order_relaxed) == WaitMode::kSleep; }

// Polls `done` until it returns true, sleeping between polls after kPollBeforeSleeping.
template <class Done>
void PollUntil(const Done& done) {
  const auto start = std::chrono::steady_clock::now();
  while (!done()) {
    if (std::chrono::steady_clock::now() - start >= kPollBeforeSleeping)
      std::this_thread::sleep_for(kSleepBetweenPolls);
  }
}

// MPI_Waitall in the process's wait mode.
void CompleteAll(int count, MPI_Request* handles) {
  if (!Sleeping()) {
    MPI_Waitall(count, handles, MPI_STATUSES_IGNORE);
    return;
  }
  PollUntil([&] {
    int done = 0;
    MPI_Testall(count, handles, &done, MPI_STATUSES_IGNORE);
    return done != 0;
  });
}

// MPI_Waitany in the process's wait mode: the index completed, MPI_UNDEFINED when none is active.
int CompleteAny(int count, MPI_Request* handles) {
  int which = MPI_UNDEFINED;
  if (!Sleeping()) {
    MPI_Waitany(count, handles, &which, MPI_STATUS_IGNORE);
    return which;
  }
  PollUntil([&] {
    int flag = 0;
    MPI_Testany(count, handles, &which, &flag, MPI_STATUS_IGNORE);
    return flag != 0;
  });
  return which;
}

// A collective in the process's wait mode: `blocking` (MPI's own call) when spinning; otherwise
// `start(&handle)` (its non-blocking form) and a sleeping wait.
template <class Blocking, class Start>
void Collective(const Blocking& blocking, const Start& start) {
  if (!Sleeping()) {
    blocking();
    return;
  }
  MPI_Request handle = MPI_REQUEST_NULL;
  start(&handle);
  CompleteAll(1, &handle);
}

int CheckedInt(size_t value) {
  HEXISEQ_CHECK(value <= static_cast<size_t>(INT_MAX), "MPI message larger than INT_MAX");
  return static_cast<int>(value);
}

class MpiComm final : public Comm {
 public:
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &found);
    max_tag_ = (found && tag_ub != nullptr) ? *tag_ub : 32767;
  }
  ~MpiComm() override {
    if (side_ != MPI_COMM_NULL) MPI_Comm_free(&side_);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int max_tag() const override { return max_tag_; }

  RequestPtr Isend(const void* data, size_t bytes, int dest, int tag) override {
    auto request = std::make_unique<MpiRequest>();
    MPI_Isend(data, CheckedInt(bytes), MPI_BYTE, dest, tag, comm_, &request->handle);
    return request;
  }
  RequestPtr Irecv(void* data, size_t bytes, int source, int tag) override {
    auto request = std::make_unique<MpiRequest>();
    MPI_Irecv(data, CheckedInt(bytes), MPI_BYTE, source, tag, comm_, &request->handle);
    return request;
  }
  void Wait(Request& request) override {
    if (request.done()) return;
    const BlockingCall call;
    CompleteAll(1, &static_cast<MpiRequest&>(request).handle);
    MarkDone(request);
  }
  size_t WaitAny(std::span<Request* const> requests) override {
    std::vector<MPI_Request> handles;
    std::vector<size_t> owners;
    for (size_t index = 0; index < requests.size(); ++index) {
      Request* request = requests[index];
      if (request == nullptr || request->done()) continue;
      handles.push_back(static_cast<MpiRequest*>(request)->handle);
      owners.push_back(index);
    }
    HEXISEQ_CHECK(!handles.empty(), "WaitAny called without an incomplete request");
    const BlockingCall call;
    const int which = CompleteAny(static_cast<int>(handles.size()), handles.data());
    HEXISEQ_CHECK(which != MPI_UNDEFINED, "MPI_Waitany found no active request");
    Request* done = requests[owners[which]];
    static_cast<MpiRequest*>(done)->handle = MPI_REQUEST_NULL;
    MarkDone(*done);
    return owners[which];
  }
  bool Test(Request& request) override {
    if (request.done()) return true;
    int flag = 0;
    MPI_Test(&static_cast<MpiRequest&>(request).handle, &flag, MPI_STATUS_IGNORE);
    if (flag) {
      MarkDone(request);
      ++Activity().completed;
    }
    return flag != 0;
  }

  void Alltoallv(const float* send, std::span<const int64_t> send_counts,
                 std::span<const int64_t> send_displs, float* recv,
                 std::span<const int64_t> recv_counts,
                 std::span<const int64_t> recv_displs) override {
    HEXISEQ_CHECK(static_cast<int>(send_counts.size()) == size_ &&
                      static_cast<int>(recv_counts.size()) == size_,
                  "Alltoallv count arrays must have one entry per rank");
    const BlockingCall call;
    auto fits = [](std::span<const int64_t> values) {
      return std::all_of(values.begin(), values.end(), [](int64_t v) { return v <= INT_MAX; });
    };
    if (fits(send_counts) && fits(send_displs) && fits(recv_counts) && fits(recv_displs)) {
      std::vector<int> sc(send_counts.begin(), send_counts.end());
      std::vector<int> sd(send_displs.begin(), send_displs.end());
      std::vector<int> rc(recv_counts.begin(), recv_counts.end());
      std::vector<int> rd(recv_displs.begin(), recv_displs.end());
      Collective(
          [&] {
            MPI_Alltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(),
                          MPI_FLOAT, comm_);
          },
          [&](MPI_Request* handle) {
            MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(),
                           MPI_FLOAT, comm_, handle);
          });
      return;
    }
    // Chunked point-to-point on a private duplicate (never matches user messages).
    if (side_ == MPI_COMM_NULL) MPI_Comm_dup(comm_, &side_);
    constexpr int64_t kChunk = int64_t{1} << 28;  // floats per message
    std::vector<MPI_Request> handles;
    for (int peer = 0; peer < size_; ++peer) {
      for (int64_t offset = 0; offset < recv_counts[peer]; offset += kChunk) {
        handles.emplace_back();
        MPI_Irecv(recv + recv_displs[peer] + offset,
                  static_cast<int>(std::min(kChunk, recv_counts[peer] - offset)), MPI_FLOAT, peer,
                  0, side_, &handles.back());
      }
    }
    for (int peer = 0; peer < size_; ++peer) {
      for (int64_t offset = 0; offset < send_counts[peer]; offset += kChunk) {
        handles.emplace_back();
        MPI_Isend(send + send_displs[peer] + offset,
                  static_cast<int>(std::min(kChunk, send_counts[peer] - offset)), MPI_FLOAT, peer,
                  0, side_, &handles.back());
      }
    }
    CompleteAll(static_cast<int>(handles.size()), handles.data());
  }

  void AllreduceSum(std::span<double> data) override {
    const BlockingCall call;
    Allreduce(data.data(), CheckedInt(data.size()), MPI_DOUBLE);
  }
  // Through the nonblocking all-reduce, so that the sums are IallreduceSum's bits (OpenMPI's
  // blocking all-reduce adds in another order at some sizes, e.g. 3 ranks and 20000 floats).
  void AllreduceSum(std::span<float> data) override {
    const BlockingCall call;
    MPI_Request handle = MPI_REQUEST_NULL;
    MPI_Iallreduce(MPI_IN_PLACE, data.data(), CheckedInt(data.size()), MPI_FLOAT, MPI_SUM, comm_,
                   &handle);
    CompleteAll(1, &handle);
  }
  RequestPtr IallreduceSum(std::span<float> data) override {
    auto request = std::make_unique<MpiRequest>();
    MPI_Iallreduce(MPI_IN_PLACE, data.data(), CheckedInt(data.size()), MPI_FLOAT, MPI_SUM, comm_,
                   &request->handle);
    return request;
  }
  RequestPtr IreduceScatterSum(const float* send, std::span<const int64_t> counts,
                               float* recv) override {
    HEXISEQ_CHECK(static_cast<int>(counts.size()) == size_,
                  "IreduceScatterSum: one count per rank");
    auto request = std::make_unique<MpiCountsRequest>();
    for (int64_t count : counts) request->counts.push_back(CheckedInt(static_cast<size_t>(count)));
    MPI_Ireduce_scatter(send, recv, request->counts.data(), MPI_FLOAT, MPI_SUM, comm_,
                        &request->handle);
    return request;
  }
  RequestPtr IallgatherBytes(const void* send, size_t bytes, void* recv) override {
    auto request = std::make_unique<MpiRequest>();
    const int count = CheckedInt(bytes);
    MPI_Iallgather(send, count, MPI_BYTE, recv, count, MPI_BYTE, comm_, &request->handle);
    return request;
  }
  void Allgather(const void* send, size_t bytes, void* recv) override {
    const BlockingCall call;
    const int count = CheckedInt(bytes);
    Collective([&] { MPI_Allgather(send, count, MPI_BYTE, recv, count, MPI_BYTE, comm_); },
               [&](MPI_Request* handle) {
                 MPI_Iallgather(send, count, MPI_BYTE, recv, count, MPI_BYTE, comm_, handle);
               });
  }
  void Barrier() override {
    const BlockingCall call;
    Collective([&] { MPI_Barrier(comm_); },
               [&](MPI_Request* handle) { MPI_Ibarrier(comm_, handle); });
  }

  std::unique_ptr<Comm> Split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub);
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiComm>(sub);
  }

 private:
  // In-place sum over the communicator, in the process's wait mode.
  void Allreduce(void* data, int count, MPI_Datatype type) {
    Collective([&] { MPI_Allreduce(MPI_IN_PLACE, data, count, type, MPI_SUM, comm_); },
               [&](MPI_Request* handle) {
                 MPI_Iallreduce(MPI_IN_PLACE, data, count, type, MPI_SUM, comm_, handle);
               });
  }

  MPI_Comm comm_;
  MPI_Comm side_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  int max_tag_ = 32767;
};

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    finalize_ = true;
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalize_ && !finalized) MPI_Finalize();
}

void SetWaitMode(WaitMode mode) { g_wait_mode.store(mode); }
WaitMode CurrentWaitMode() { return g_wait_mode.load(); }

std::unique_ptr<Comm> MpiWorldComm() {
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  return std::make_unique<MpiComm>(dup);
}

// --- Watchdog ------------------------------------------------------------------------------------

namespace {

using WatchdogClock = std::chrono::steady_clock;
constexpr int kHeartbeatTag = 1;
constexpr int kFinalCountTag = 2;
constexpr double kMaxBeatSeconds = 1.0;
constexpr auto kPollInterval = std::chrono::milliseconds(50);
constexpr const char* kWatchdogThreadName = "hexiseq-watch";  // in /proc/PID/task/*/comm
constexpr size_t kPhaseChars = 32;  // a phase name in a heartbeat, NUL-terminated
constexpr const char* kStallEnv = "HEXISEQ_TEST_STALL";

constexpr int kNeverSentTag = 3;  // the test hook's receive, which nothing matches

// One heartbeat: how many the sender has sent, and at that moment its progress (phases entered
// plus communication completed), whether it was waiting inside a blocking call, and its phase.
struct Heartbeat {
  int64_t count = 0;
  int64_t progress = 0;
  int64_t waiting = 0;
  char phase[kPhaseChars] = {};
};

double SecondsSince(WatchdogClock::time_point start) {
  return std::chrono::duration<double>(WatchdogClock::now() - start).count();
}

}  // namespace

// Heartbeat bookkeeping, one entry per peer (the entry for this rank is unused).
struct MpiWatchdog::State {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  double beat_seconds = kMaxBeatSeconds;
  std::vector<Heartbeat> inbox, outbox;      // buffers of the posted receive / last send
  std::vector<MPI_Request> receives, sends;  // posted receive, last send
  std::vector<int64_t> received, sent;       // heartbeats so far
  std::vector<WatchdogClock::time_point> last_heard;
  WatchdogClock::time_point last_beat;
  // Every rank's latest progress and phase (this rank's own from the main thread), and when any
  // of them last changed.
  std::vector<int64_t> progress;
  std::vector<int64_t> waiting;
  std::vector<std::string> phase;
  WatchdogClock::time_point last_progress;

  void PostReceive(int peer) {
    MPI_Irecv(&inbox[peer], sizeof(Heartbeat), MPI_BYTE, peer, kHeartbeatTag, comm,
              &receives[peer]);
  }
  void Observe(int rank, int64_t rank_progress, int64_t rank_waiting, const char* rank_phase) {
    if (rank_progress != progress[rank]) last_progress = WatchdogClock::now();
    progress[rank] = rank_progress;
    waiting[rank] = rank_waiting;
    phase[rank] = rank_phase;
  }
  bool AllWaiting() const {
    return std::all_of(waiting.begin(), waiting.end(), [](int64_t w) { return w != 0; });
  }
  bool AnyWaiting() const {
    return std::any_of(waiting.begin(), waiting.end(), [](int64_t w) { return w != 0; });
  }
  // Completes the heartbeats that arrived from `peer`, reposting after each while `more` says so.
  void TakeHeartbeats(int peer, int64_t expected) {
    while (receives[peer] != MPI_REQUEST_NULL) {
      int arrived = 0;
      MPI_Test(&receives[peer], &arrived, MPI_STATUS_IGNORE);
      if (!arrived) return;
      ++received[peer];
      last_heard[peer] = WatchdogClock::now();
      inbox[peer].phase[kPhaseChars - 1] = '\0';
      Observe(peer, inbox[peer].progress, inbox[peer].waiting, inbox[peer].phase);
      if (received[peer] < expected) PostReceive(peer);
    }
  }
  void Beat(int peer) {
    int idle = 1;
    if (sends[peer] != MPI_REQUEST_NULL) MPI_Test(&sends[peer], &idle, MPI_STATUS_IGNORE);
    if (!idle) return;  // the last heartbeat is still in flight
    outbox[peer].count = ++sent[peer];
    outbox[peer].progress = progress[rank];
    outbox[peer].waiting = waiting[rank];
    std::snprintf(outbox[peer].phase, kPhaseChars, "%s", phase[rank].c_str());
    MPI_Isend(&outbox[peer], sizeof(Heartbeat), MPI_BYTE, peer, kHeartbeatTag, comm, &sends[peer]);
  }
};

MpiWatchdog::MpiWatchdog(std::string what, double timeout_seconds)
    : what_(std::move(what)), timeout_seconds_(timeout_seconds), state_(std::make_unique<State>()) {
  State& state = *state_;
  MPI_Comm_size(MPI_COMM_WORLD, &state.size);
  MPI_Comm_rank(MPI_COMM_WORLD, &state.rank);
  if (const char* stall = std::getenv(kStallEnv)) {  // test hook: "RANK:PHASE[:compute]"
    const char* colon = std::strchr(stall, ':');
    if (colon) {
      stall_rank_ = std::atoi(stall);
      stall_phase_ = colon + 1;
      const size_t mode = stall_phase_.find(':');
      if (mode != std::string::npos) {
        stall_computing_ = stall_phase_.substr(mode + 1) == "compute";
        stall_phase_.resize(mode);
      }
    }
  }
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (state.size == 1) return;  // nobody to wait for
  if (level < MPI_THREAD_MULTIPLE) {
    if (state.rank == 0)
      std::fprintf(stderr,
                   "hexiseq: %s: the watchdog is off: MPI was not initialized with "
                   "MPI_THREAD_MULTIPLE\n",
                   what_.c_str());
    return;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &state.comm);
  state.beat_seconds = std::min(kMaxBeatSeconds, timeout_seconds_ / 4);
  state.inbox.assign(state.size, Heartbeat{});
  state.outbox.assign(state.size, Heartbeat{});
  state.progress.assign(state.size, 0);
  state.waiting.assign(state.size, 0);
  state.phase.assign(state.size, "start");
  state.last_progress = WatchdogClock::now();
  state.receives.assign(state.size, MPI_REQUEST_NULL);
  state.sends.assign(state.size, MPI_REQUEST_NULL);
  state.received.assign(state.size, 0);
  state.sent.assign(state.size, 0);
  state.last_heard.assign(state.size, WatchdogClock::now());
  state.last_beat = WatchdogClock::now() - std::chrono::hours(1);
  for (int peer = 0; peer < state.size; ++peer)
    if (peer != state.rank) state.PostReceive(peer);
  thread_ = std::thread([this] { Run(); });
}

void MpiWatchdog::Run() {
  pthread_setname_np(pthread_self(), kWatchdogThreadName);
  State& state = *state_;
  constexpr int64_t kUnbounded = INT64_MAX;
  while (!stop_.load()) {
    state.Observe(state.rank, progress_.load() + Activity().completed.load(),
                  Activity().inside.load() > 0, phase_.load());
    const bool beat = SecondsSince(state.last_beat) >= state.beat_seconds;
    if (beat) state.last_beat = WatchdogClock::now();
    for (int peer = 0; peer < state.size; ++peer) {
      if (peer == state.rank) continue;
      state.TakeHeartbeats(peer, kUnbounded);
      if (beat) state.Beat(peer);
      const double silent = SecondsSince(state.last_heard[peer]);
      if (silent > timeout_seconds_) {
        char text[160];
        std::snprintf(text, sizeof text,
                      "no heartbeat from rank %d for %.0f s: it is stopped, "
                      "hung or dead",
                      peer, silent);
        Fail(text, "check that process, its node and its network");
      }
    }
    // Every peer is alive (the rule above); no progress anywhere while every rank waits in
    // communication is a deadlock, and while some wait and the others compute, a stuck
    // computation (or one longer than --timeout).
    const double still = SecondsSince(state.last_progress);
    if (still > timeout_seconds_ && state.AllWaiting())
      Fail(DescribeStall(still),
           "the ranks behind are stuck in that phase while the others wait for them; raise "
           "--timeout if a phase legitimately runs longer");
    if (still > timeout_seconds_ && state.AnyWaiting())
      Fail(DescribeStuckCompute(still),
           "those ranks compute without finishing while the others wait for them; raise "
           "--timeout if a phase legitimately computes longer");
    std::this_thread::sleep_for(kPollInterval);
  }
}

void MpiWatchdog::SetPhase(const char* phase) {
  phase_.store(phase);
  progress_.fetch_add(1);
  if (state_->rank != stall_rank_ || stall_phase_ != phase) return;
  if (stall_computing_) {
    std::fprintf(stderr, "hexiseq: %s: rank %d computes forever in phase %s (%s, a test hook)\n",
                 what_.c_str(), state_->rank, phase, kStallEnv);
    std::fflush(stderr);
    volatile uint64_t spin = 0;
    for (;;) {
      spin = spin + 1;
    }
  }
  std::fprintf(stderr,
               "hexiseq: %s: rank %d waits forever in phase %s for a message nobody sends (%s, a "
               "test hook)\n",
               what_.c_str(), state_->rank, phase, kStallEnv);
  std::fflush(stderr);
  const BlockingCall call;
  char never = 0;
  MPI_Recv(&never, 1, MPI_BYTE, 0, kNeverSentTag, MPI_COMM_SELF, MPI_STATUS_IGNORE);
}

namespace {

// "ranks 1, 3" for a list of ranks.
std::string RankList(const std::vector<int>& ranks) {
  std::string list = ranks.size() > 1 ? "ranks " : "rank ";
  for (size_t index = 0; index < ranks.size(); ++index)
    list += (index ? ", " : "") + std::to_string(ranks[index]);
  return list;
}

}  // namespace

// "no progress for 5 s while every rank is alive and waiting in communication (a deadlock):
// rank 1 is behind, in phase forward; ranks 0, 2, 3 wait in phase backward": the ranks with the
// least progress are behind; the others are grouped by phase.
std::string MpiWatchdog::DescribeStall(double seconds) const {
  const State& state = *state_;
  const int64_t least = *std::min_element(state.progress.begin(), state.progress.end());
  std::map<std::string, std::vector<int>> behind, waiting;  // by phase
  for (int rank = 0; rank < state.size; ++rank)
    (state.progress[rank] == least ? behind : waiting)[state.phase[rank]].push_back(rank);
  char head[128];
  std::snprintf(head, sizeof head,
                "no progress for %.0f s while every rank is alive and waiting in communication "
                "(a deadlock): ",
                seconds);
  std::string text = head;
  bool first = true;
  for (const auto* groups : {&behind, &waiting})
    for (const auto& [phase, ranks] : *groups) {
      const bool plural = ranks.size() > 1;
      const char* verb = groups == &behind
                             ? (plural ? " are behind, in phase " : " is behind, in phase ")
                             : (plural ? " wait in phase " : " waits in phase ");
      text += (first ? "" : "; ") + RankList(ranks) + verb + phase;
      first = false;
    }
  if (waiting.empty()) text += " (every rank alike)";
  return text;
}

// "no progress for 5 s while rank 1 computes in phase forward and every other rank waits in
// communication: ranks 0, 2, 3 wait in phase backward": the computing ranks named, the waiting
// ones grouped by phase.
std::string MpiWatchdog::DescribeStuckCompute(double seconds) const {
  const State& state = *state_;
  std::map<std::string, std::vector<int>> computing, waiting;  // by phase
  for (int rank = 0; rank < state.size; ++rank)
    (state.waiting[rank] ? waiting : computing)[state.phase[rank]].push_back(rank);
  char head[64];
  std::snprintf(head, sizeof head, "no progress for %.0f s while ", seconds);
  std::string text = head;
  bool first = true;
  for (const auto& [phase, ranks] : computing) {
    text += (first ? "" : " and ") + RankList(ranks) +
            (ranks.size() > 1 ? " compute" : " computes") + " in phase " + phase;
    first = false;
  }
  text += " and every other rank waits in communication:";
  first = true;
  for (const auto& [phase, ranks] : waiting) {
    text += (first ? " " : "; ") + RankList(ranks) + (ranks.size() > 1 ? " wait" : " waits") +
            " in phase " + phase;
    first = false;
  }
  return text;
}

void MpiWatchdog::Fail(const std::string& message, const std::string& hint) {
  std::fprintf(
      stderr, "hexiseq: %s: rank %d (phase %s): %s (rule: --timeout %g s; hint: %s; exiting)\n",
      what_.c_str(), state_->rank, phase_.load(), message.c_str(), timeout_seconds_, hint.c_str());
  std::fflush(stderr);
  // A short grace so that every live rank reports before mpirun ends the job.
  std::this_thread::sleep_for(std::chrono::duration<double>(2 * state_->beat_seconds));
  _exit(1);
}

MpiWatchdog::~MpiWatchdog() {
  State& state = *state_;
  if (state.comm == MPI_COMM_NULL) return;
  stop_.store(true);
  thread_.join();
  // Tell each peer how many heartbeats we sent, and take all of theirs, so that nothing is left
  // unmatched when the communicator is freed (bounded by the timeout as well).
  phase_.store("shutdown");
  std::vector<int64_t> final_out(state.sent), final_in(state.size, -1);
  std::vector<MPI_Request> final_sends(state.size, MPI_REQUEST_NULL),
      final_receives(state.size, MPI_REQUEST_NULL);
  for (int peer = 0; peer < state.size; ++peer) {
    if (peer == state.rank) continue;
    MPI_Isend(&final_out[peer], 1, MPI_INT64_T, peer, kFinalCountTag, state.comm,
              &final_sends[peer]);
    MPI_Irecv(&final_in[peer], 1, MPI_INT64_T, peer, kFinalCountTag, state.comm,
              &final_receives[peer]);
  }
  const auto start = WatchdogClock::now();
  for (int peer = 0; peer < state.size; ++peer) {
    if (peer == state.rank) continue;
    while (true) {
      int counted = 0;
      MPI_Test(&final_receives[peer], &counted, MPI_STATUS_IGNORE);
      if (counted || final_receives[peer] == MPI_REQUEST_NULL) {
        state.TakeHeartbeats(peer, final_in[peer]);
        if (state.received[peer] >= final_in[peer]) break;
      }
      if (SecondsSince(start) > timeout_seconds_) {
        char text[160];
        std::snprintf(text, sizeof text, "rank %d did not finish within %.0f s", peer,
                      timeout_seconds_);
        Fail(text, "check that process, its node and its network");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (state.receives[peer] != MPI_REQUEST_NULL) {  // posted for a heartbeat that never comes
      MPI_Cancel(&state.receives[peer]);
      MPI_Wait(&state.receives[peer], MPI_STATUS_IGNORE);
    }
  }
  MPI_Waitall(state.size, final_sends.data(), MPI_STATUSES_IGNORE);
  MPI_Waitall(state.size, state.sends.data(), MPI_STATUSES_IGNORE);
  MPI_Comm_free(&state.comm);
}

}  // namespace hexiseq::runtime
