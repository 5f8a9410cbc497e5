// Emulated slow links (link_delay.h): the --link-slowdown parser, the poster thread that releases
// delayed sends, and the Comm decorator whose collectives run over the delayed messages.
#include "runtime/link_delay.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>

#include "runtime/comm_algorithms.h"
#include "runtime/slowdown.h"
#include "runtime/str_cat.h"

namespace hexiseq::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kSecondsPerNs = 1e-9;
// Tags of the collectives' point-to-point messages, on a private duplicate of the communicator.
constexpr int kAllToAllTag = 1;
constexpr int kAllgatherTag = 2;
constexpr int kIallreduceTag = 3;
constexpr int kIreduceScatterTag = 4;
constexpr int kIallgatherTag = 5;
// A thread waiting for its own held-back send sleeps until this long before the release time and
// spins the rest.
constexpr auto kSpinBefore = std::chrono::microseconds(200);

std::string LinkRuleText() {
  return StrCat("A-B=NS[,A-B=NS...], A and B two ranks of this run, NS a number in (0, ",
                kMaxLinkDelayNsPerByte,
                "]: every byte between A and B takes NS nanoseconds longer, both ways");
}

Result<LinkDelay> ParseLinkPiece(const std::string& piece, const std::string& where,
                                 int num_ranks) {
  const size_t equals = piece.find('='), dash = piece.find('-');
  if (equals == std::string::npos || dash == std::string::npos || dash > equals) {
    return InvalidArgument(StrCat(where, ": not A-B=NS (rule: ", LinkRuleText(),
                                  "; hint: write 0-1=10 for 10 ns per byte, a 100 MB/s link)"));
  }
  const std::string rule = LinkRuleText();
  auto first = ParseRankNumber(piece.substr(0, dash), where, num_ranks, rule);
  if (!first) return std::unexpected(first.error());
  auto second = ParseRankNumber(piece.substr(dash + 1, equals - dash - 1), where, num_ranks, rule);
  if (!second) return std::unexpected(second.error());
  if (*first == *second) {
    return InvalidArgument(StrCat(where, ": A = B = ", *first, " (rule: ", rule,
                                  "; hint: a link joins two different ranks)"));
  }
  const std::string value = piece.substr(equals + 1);
  char* end = nullptr;
  errno = 0;
  const double ns = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || errno != 0 || !std::isfinite(ns) ||
      ns <= 0 || ns > kMaxLinkDelayNsPerByte) {
    return InvalidArgument(StrCat(where, ": NS = '", value, "': must be a number in (0, ",
                                  kMaxLinkDelayNsPerByte, "] (rule: ", rule,
                                  "; hint: 10 ns per byte is a 100 MB/s link)"));
  }
  return LinkDelay{std::min(*first, *second), std::max(*first, *second), ns * kSecondsPerNs};
}

}  // namespace

Result<std::vector<LinkDelay>> ParseLinkSlowdown(const std::string& text, int num_ranks,
                                                 const std::string& flag) {
  if (text.empty()) {
    return InvalidArgument(StrCat(flag, " = '': empty (rule: ", LinkRuleText(), ")"));
  }
  std::vector<LinkDelay> delays;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string piece = text.substr(begin, comma - begin);
    const std::string where = StrCat(flag, " '", piece, "'");
    auto delay = ParseLinkPiece(piece, where, num_ranks);
    if (!delay) return std::unexpected(delay.error());
    for (const LinkDelay& seen : delays) {
      if (seen.a == delay->a && seen.b == delay->b) {
        return InvalidArgument(StrCat(where, ": the link ", delay->a, "-", delay->b,
                                      " is given twice (rule: ", LinkRuleText(),
                                      "; hint: name each pair once)"));
      }
    }
    delays.push_back(*delay);
    begin = comma + 1;
  }
  return delays;
}

std::string LinkSlowdownSyntaxError(const std::string& text) {
  auto parsed = ParseLinkSlowdown(text, 0);
  return parsed ? std::string() : parsed.error().message;
}

namespace {

// A send held back until its release time, then posted on `comm` by the poster thread.
struct PendingSend {
  Comm* comm = nullptr;
  const void* data = nullptr;
  size_t bytes = 0;
  int dest = 0, tag = 0;
  Clock::time_point release;  // changes while later messages join the link (Poster::Add)
  uint64_t order = 0;         // FIFO among equal release times
  RequestPtr inner;           // set when posted
  bool posted = false;
};

double SecondsOf(Clock::time_point time) {
  return std::chrono::duration<double>(time.time_since_epoch()).count();
}

Clock::time_point TimeOf(double seconds) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
}

// One outgoing link: the messages on it that have not left yet, one queue per flow (the
// communicator they are sent on) in send order. The link serves the first message of every flow
// at once, each at an equal share of its rate (processor sharing between flows, first come, first
// served within one), as a NIC serves its queue pairs: a ring's K/V block sent while a gradient
// bucket of another communicator is on the wire shares the link with it rather than waiting for
// all of it.
struct OutLink {
  struct Queued {
    std::shared_ptr<PendingSend> send;
    double remaining = 0;  // seconds on the wire left at the full rate
  };
  struct Flow {
    const Comm* key = nullptr;
    std::deque<Queued> queue;
  };
  std::vector<Flow> flows;
  double updated = 0;  // SecondsOf: when `remaining` was last brought up to date
};

// Runs the link's sharing in `flows` from `from` to `until`, calling left(queued, seconds) for
// every message whose last byte leaves by then and removing it.
template <typename Left>
void ServeLink(std::vector<OutLink::Flow>& flows, double from, double until, Left left) {
  double now = from;
  for (;;) {
    size_t active = 0;
    double least = std::numeric_limits<double>::infinity();
    for (const OutLink::Flow& flow : flows) {
      if (flow.queue.empty()) continue;
      ++active;
      least = std::min(least, flow.queue.front().remaining);
    }
    if (active == 0) return;
    const double finish = now + least * static_cast<double>(active);
    if (finish > until) {
      for (OutLink::Flow& flow : flows) {
        if (!flow.queue.empty()) flow.queue.front().remaining -= (until - now) / active;
      }
      return;
    }
    for (OutLink::Flow& flow : flows) {
      if (flow.queue.empty()) continue;
      flow.queue.front().remaining -= least;
      if (flow.queue.front().remaining <= 0) {
        left(flow.queue.front(), finish);
        flow.queue.pop_front();
      }
    }
    now = finish;
  }
}

// Posts delayed sends at their release times, in release order: a helper thread does while the
// rank computes, and a thread that waits for a held-back send posts what is due itself (so a
// rank blocked on its own send does not also wait for the helper to be scheduled). Posting
// happens under the mutex, so messages on one link keep their order whoever posts them.
class Poster {
 public:
  Poster() : thread_([this] { Run(); }) {}
  ~Poster() {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Puts `send` on the outgoing link to world rank `to` (`wire_seconds` at the link's full rate)
  // and sets the release time of every message on that link as the sharing then projects it.
  void Add(std::shared_ptr<PendingSend> send, int to, double wire_seconds) {
    {
      const std::lock_guard lock(mutex_);
      if (links_.size() <= static_cast<size_t>(to)) links_.resize(to + 1);
      OutLink& link = links_[to];
      const double now = SecondsOf(Clock::now());
      ServeLink(link.flows, link.updated, now, [](OutLink::Queued&, double) {});
      link.updated = now;
      std::erase_if(link.flows, [](const OutLink::Flow& flow) { return flow.queue.empty(); });
      auto flow = std::find_if(link.flows.begin(), link.flows.end(),
                               [&](const OutLink::Flow& f) { return f.key == send->comm; });
      if (flow == link.flows.end()) flow = link.flows.insert(link.flows.end(), {send->comm, {}});
      flow->queue.push_back({send, wire_seconds});
      std::vector<OutLink::Flow> projection = link.flows;
      ServeLink(projection, now, std::numeric_limits<double>::infinity(),
                [](OutLink::Queued& queued, double left) { queued.send->release = TimeOf(left); });
      send->order = next_order_++;
      queue_.push_back(std::move(send));
      std::make_heap(queue_.begin(), queue_.end(), Later);
    }
    cv_.notify_all();
  }
  // Posts what is due; whether `send` is posted now.
  bool Posted(const PendingSend& send) {
    const std::lock_guard lock(mutex_);
    PostDueLocked();
    return send.posted;
  }
  // Returns once `send` is posted: waits for its release time (asleep until kSpinBefore ahead
  // of it, then on the clock, since on a busy machine a sleeper or a yielder can lose its core
  // for a whole time slice), then posts what is due; again if a later message on its link moved
  // the release meanwhile.
  void AwaitPosted(const PendingSend& send) {
    std::unique_lock lock(mutex_);
    for (;;) {
      PostDueLocked();
      if (send.posted) return;
      const Clock::time_point release = send.release;
      lock.unlock();
      if (release - Clock::now() > kSpinBefore) {
        std::this_thread::sleep_until(release - kSpinBefore);
      }
      while (Clock::now() < release) {
      }
      lock.lock();
    }
  }

 private:
  static bool Later(const std::shared_ptr<PendingSend>& a, const std::shared_ptr<PendingSend>& b) {
    return a->release != b->release ? a->release > b->release : a->order > b->order;
  }
  // REQUIRES: mutex_ held. Posts every queued send whose release time has come (all on stop).
  void PostDueLocked() {
    bool posted = false;
    while (!queue_.empty() && (stop_ || queue_.front()->release <= Clock::now())) {
      std::pop_heap(queue_.begin(), queue_.end(), Later);
      const std::shared_ptr<PendingSend> next = std::move(queue_.back());
      queue_.pop_back();
      next->inner = next->comm->Isend(next->data, next->bytes, next->dest, next->tag);
      next->posted = posted = true;
    }
    if (posted) cv_.notify_all();
  }
  void Run() {
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // wake at the release time, not 50 us later
    std::unique_lock lock(mutex_);
    while (!stop_ || !queue_.empty()) {
      PostDueLocked();
      if (queue_.empty()) {
        if (!stop_) cv_.wait(lock);
      } else {
        // A copy: wait_until reads its deadline again after waking, and by then a rank thread
        // may have posted the front send and freed it (AwaitPosted, Resolve).
        const Clock::time_point next_release = queue_.front()->release;
        cv_.wait_until(lock, next_release);
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<PendingSend>> queue_;  // a min-heap by (release, order)
  std::vector<OutLink> links_;                       // by world destination
  uint64_t next_order_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

// Per process: the delays between world ranks and the poster (which keeps the outgoing links).
struct LinkState {
  int world_size = 0;
  std::vector<double> seconds_per_byte;  // [a * world_size + b], symmetric
  Poster poster;

  double Delay(int a, int b) const { return seconds_per_byte[a * world_size + b]; }
};

// A request of the decorator: the inner one, or a delayed send that the poster will post.
struct LinkRequest : Request {
  RequestPtr inner;
  std::shared_ptr<PendingSend> pending;
};

// A nonblocking all-reduce (or reduce-scatter) over delayed messages: every rank's contribution to
// this rank's elements gathered, summed in rank order on completion.
struct GatherSumRequest : Request {
  bool add = true;  // false: an all-gather, the receives are the result
  std::vector<RequestPtr> parts;
  std::vector<float> gathered;
  std::span<float> data;
  int peers = 0;
};

class LinkDelayComm final : public Comm {
 public:
  LinkDelayComm(std::unique_ptr<Comm> inner, std::shared_ptr<LinkState> state,
                std::vector<int> world_ranks)
      : inner_(std::move(inner)), state_(std::move(state)), world_ranks_(std::move(world_ranks)) {
    for (int a : world_ranks_) {
      for (int b : world_ranks_) slowed_ = slowed_ || state_->Delay(a, b) > 0;
    }
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int max_tag() const override { return inner_->max_tag(); }

  RequestPtr Isend(const void* data, size_t bytes, int dest, int tag) override {
    auto request = std::make_unique<LinkRequest>();
    const int to = world_ranks_[dest];
    const double delay = state_->Delay(world_ranks_[rank()], to);
    if (delay <= 0) {
      request->inner = inner_->Isend(data, bytes, dest, tag);
      return request;
    }
    auto pending = std::make_shared<PendingSend>();
    *pending = PendingSend{inner_.get(), data, bytes, dest, tag};
    request->pending = pending;
    state_->poster.Add(std::move(pending), to, delay * static_cast<double>(bytes));
    return request;
  }
  RequestPtr Irecv(void* data, size_t bytes, int source, int tag) override {
    auto request = std::make_unique<LinkRequest>();
    request->inner = inner_->Irecv(data, bytes, source, tag);
    return request;
  }

  void Wait(Request& request) override {
    if (request.done()) return;
    if (auto* sum = dynamic_cast<GatherSumRequest*>(&request)) {
      for (RequestPtr& part : sum->parts) side_->Wait(*part);
      FinishSum(*sum);
      return;
    }
    auto& link = static_cast<LinkRequest&>(request);
    Resolve(link);
    inner_->Wait(*link.inner);
    MarkDone(request);
  }
  bool Test(Request& request) override {
    if (request.done()) return true;
    if (auto* sum = dynamic_cast<GatherSumRequest*>(&request)) {
      for (RequestPtr& part : sum->parts) {
        if (!side_->Test(*part)) return false;
      }
      FinishSum(*sum);
      return true;
    }
    auto& link = static_cast<LinkRequest&>(request);
    if (link.pending && !state_->poster.Posted(*link.pending)) return false;
    Resolve(link);
    if (!inner_->Test(*link.inner)) return false;
    MarkDone(request);
    return true;
  }
  size_t WaitAny(std::span<Request* const> requests) override;

  void Alltoallv(const float* send, std::span<const int64_t> send_counts,
                 std::span<const int64_t> send_displs, float* recv,
                 std::span<const int64_t> recv_counts,
                 std::span<const int64_t> recv_displs) override;
  void AllreduceSum(std::span<double> data) override {
    if (!slowed_) return inner_->AllreduceSum(data);
    AllreduceSumByAllgather<double>(*this, data);
  }
  void AllreduceSum(std::span<float> data) override {
    if (!slowed_) return inner_->AllreduceSum(data);
    AllreduceSumByAllgather<float>(*this, data);
  }
  RequestPtr IallreduceSum(std::span<float> data) override;
  RequestPtr IreduceScatterSum(const float* send, std::span<const int64_t> counts,
                               float* recv) override;
  void Allgather(const void* send, size_t bytes, void* recv) override;
  RequestPtr IallgatherBytes(const void* send, size_t bytes, void* recv) override;
  void Barrier() override { inner_->Barrier(); }
  std::unique_ptr<Comm> Split(int color, int key) override;

 private:
  void Resolve(LinkRequest& link) {
    if (!link.pending) return;
    state_->poster.AwaitPosted(*link.pending);
    link.inner = std::move(link.pending->inner);
    link.pending.reset();
  }
  // The private duplicate the collectives' messages travel on (slowed the same way).
  Comm& Side() {
    if (!side_) side_ = std::make_unique<LinkDelayComm>(inner_->Dup(), state_, world_ranks_);
    return *side_;
  }
  // Posts this rank's `bytes` to every peer and the receive of every peer's block into `recv`
  // (block r at r * bytes), own block copied; returns the requests (on Side()).
  std::vector<RequestPtr> StartGather(const void* send, size_t bytes, void* recv, int tag);
  void FinishSum(GatherSumRequest& sum) {
    if (sum.add) SumInRankOrder<float>(sum.gathered, sum.peers, sum.data);
    MarkDone(sum);
  }

  std::unique_ptr<Comm> inner_;
  std::shared_ptr<LinkState> state_;
  std::vector<int> world_ranks_;  // by rank of this communicator
  bool slowed_ = false;           // some pair of its ranks is on a slowed link
  std::unique_ptr<Comm> side_;
};

size_t LinkDelayComm::WaitAny(std::span<Request* const> requests) {
  // Only plain or already-posted requests: the inner transport waits for them.
  bool all_posted = true;
  std::vector<Request*> inner(requests.size(), nullptr);
  for (size_t index = 0; index < requests.size(); ++index) {
    auto* link = dynamic_cast<LinkRequest*>(requests[index]);
    if (requests[index] == nullptr || requests[index]->done()) continue;
    HEXISEQ_CHECK(link != nullptr, "WaitAny on an all-reduce request (complete it with Wait)");
    if (link->pending && !state_->poster.Posted(*link->pending)) {
      all_posted = false;
      continue;
    }
    Resolve(*link);
    inner[index] = link->inner.get();
  }
  if (all_posted) {
    const size_t index = inner_->WaitAny(inner);
    MarkDone(*requests[index]);
    return index;
  }
  for (;;) {  // some send is still held back: poll every request, as MPI polls
    for (size_t index = 0; index < requests.size(); ++index) {
      if (requests[index] != nullptr && !requests[index]->done() && Test(*requests[index])) {
        return index;
      }
    }
    std::this_thread::yield();
  }
}

std::vector<RequestPtr> LinkDelayComm::StartGather(const void* send, size_t bytes, void* recv,
                                                   int tag) {
  Comm& side = Side();
  std::vector<RequestPtr> requests;
  char* out = static_cast<char*>(recv);
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank()) requests.push_back(side.Irecv(out + peer * bytes, bytes, peer, tag));
  }
  for (int peer = 0; peer < size(); ++peer) {
    if (peer != rank()) requests.push_back(side.Isend(send, bytes, peer, tag));
  }
  if (bytes > 0) std::memcpy(out + rank() * bytes, send, bytes);
  return requests;
}

void LinkDelayComm::Allgather(const void* send, size_t bytes, void* recv) {
  if (!slowed_) return inner_->Allgather(send, bytes, recv);
  Side().WaitAll(StartGather(send, bytes, recv, kAllgatherTag));
}

RequestPtr LinkDelayComm::IallgatherBytes(const void* send, size_t bytes, void* recv) {
  if (!slowed_) {
    auto request = std::make_unique<LinkRequest>();
    request->inner = inner_->IallgatherBytes(send, bytes, recv);
    return request;
  }
  auto gather = std::make_unique<GatherSumRequest>();
  gather->add = false;
  gather->parts = StartGather(send, bytes, recv, kIallgatherTag);
  return gather;
}

RequestPtr LinkDelayComm::IallreduceSum(std::span<float> data) {
  if (!slowed_) {
    auto request = std::make_unique<LinkRequest>();
    request->inner = inner_->IallreduceSum(data);
    return request;
  }
  auto sum = std::make_unique<GatherSumRequest>();
  sum->data = data;
  sum->peers = size();
  sum->gathered.resize(data.size() * size());
  sum->parts = StartGather(data.data(), data.size_bytes(), sum->gathered.data(), kIallreduceTag);
  return sum;
}

RequestPtr LinkDelayComm::IreduceScatterSum(const float* send, std::span<const int64_t> counts,
                                            float* recv) {
  if (!slowed_) {
    auto request = std::make_unique<LinkRequest>();
    request->inner = inner_->IreduceScatterSum(send, counts, recv);
    return request;
  }
  const int me = rank();
  const auto mine = static_cast<size_t>(counts[me]);
  auto sum = std::make_unique<GatherSumRequest>();
  sum->data = std::span<float>(recv, mine);
  sum->peers = size();
  sum->gathered.resize(mine * size());
  Comm& side = Side();
  const float* block = send;
  for (int peer = 0; peer < size(); ++peer) {  // block `peer` of every rank goes to rank `peer`
    if (peer != me) {
      sum->parts.push_back(side.Irecv(sum->gathered.data() + peer * mine, mine * sizeof(float),
                                      peer, kIreduceScatterTag));
      sum->parts.push_back(side.Isend(block, static_cast<size_t>(counts[peer]) * sizeof(float),
                                      peer, kIreduceScatterTag));
    } else {
      std::copy_n(block, mine, sum->gathered.data() + me * mine);
    }
    block += counts[peer];
  }
  return sum;
}

void LinkDelayComm::Alltoallv(const float* send, std::span<const int64_t> send_counts,
                              std::span<const int64_t> send_displs, float* recv,
                              std::span<const int64_t> recv_counts,
                              std::span<const int64_t> recv_displs) {
  if (!slowed_) {
    return inner_->Alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  }
  Comm& side = Side();
  const int me = rank();
  HEXISEQ_CHECK(send_counts[me] == recv_counts[me], "Alltoallv: own block sent = received");
  std::vector<RequestPtr> requests;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == me || recv_counts[peer] == 0) continue;
    requests.push_back(side.Irecv(recv + recv_displs[peer], recv_counts[peer] * sizeof(float), peer,
                                  kAllToAllTag));
  }
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == me || send_counts[peer] == 0) continue;
    requests.push_back(side.Isend(send + send_displs[peer], send_counts[peer] * sizeof(float), peer,
                                  kAllToAllTag));
  }
  std::copy(send + send_displs[me], send + send_displs[me] + send_counts[me],
            recv + recv_displs[me]);
  side.WaitAll(requests);
}

std::unique_ptr<Comm> LinkDelayComm::Split(int color, int key) {
  std::unique_ptr<Comm> sub = inner_->Split(color, key);
  if (!sub) return nullptr;
  const int mine = world_ranks_[rank()];
  std::vector<int> world_ranks(sub->size());
  sub->Allgather(&mine, sizeof mine, world_ranks.data());
  return std::make_unique<LinkDelayComm>(std::move(sub), state_, std::move(world_ranks));
}

}  // namespace

std::unique_ptr<Comm> WithLinkDelays(std::unique_ptr<Comm> world,
                                     const std::vector<LinkDelay>& delays) {
  if (delays.empty()) return world;
  auto state = std::make_shared<LinkState>();
  state->world_size = world->size();
  state->seconds_per_byte.assign(world->size() * world->size(), 0.0);
  for (const LinkDelay& delay : delays) {
    HEXISEQ_CHECK(delay.a >= 0 && delay.b < world->size() && delay.a < delay.b,
                  "link delays name two ranks of the world");
    state->seconds_per_byte[delay.a * world->size() + delay.b] = delay.seconds_per_byte;
    state->seconds_per_byte[delay.b * world->size() + delay.a] = delay.seconds_per_byte;
  }
  std::vector<int> world_ranks(world->size());
  for (int rank = 0; rank < world->size(); ++rank) world_ranks[rank] = rank;
  return std::make_unique<LinkDelayComm>(std::move(world), std::move(state),
                                         std::move(world_ranks));
}

}  // namespace hexiseq::runtime
