// Comm helpers and the in-process (threads) transport. Matching mirrors MPI: a message matches
// the first posted receive with the same (context, source, tag), else waits in the destination's
// unexpected queue, which receives scan in arrival order (non-overtaking).
#include "runtime/comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <tuple>

#include "runtime/comm_algorithms.h"
#include "spec/error.h"

namespace hexiseq::runtime {

void Comm::WaitAll(std::span<const RequestPtr> requests) {
  for (const RequestPtr& request : requests) {
    if (request) Wait(*request);
  }
}

RequestPtr Comm::IallreduceSum(std::span<float> data) {
  AllreduceSum(data);
  auto request = std::make_unique<Request>();
  MarkDone(*request);
  return request;
}

RequestPtr Comm::IallgatherBytes(const void* send, size_t bytes, void* recv) {
  Allgather(send, bytes, recv);
  auto request = std::make_unique<Request>();
  MarkDone(*request);
  return request;
}

RequestPtr Comm::IreduceScatterSum(const float* send, std::span<const int64_t> counts,
                                   float* recv) {
  const int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank(), int64_t{0});
  std::vector<float> sum(send, send + std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  RequestPtr reduce = IallreduceSum(std::span<float>(sum));
  Wait(*reduce);
  std::copy_n(sum.begin() + offset, counts[rank()], recv);
  auto request = std::make_unique<Request>();
  MarkDone(*request);
  return request;
}

namespace {

struct InProcRequest : Request {
  bool complete = false;  // guarded by State::mu
};

// A started in-process all-reduce or reduce-scatter: every peer's contribution (to this rank's
// elements) is received into `gathered` (eager sends, so only the receives are pending);
// completing it sums in rank order into `data`.
struct InProcAllreduce : Request {
  bool add = true;  // false: an all-gather, the receives are the result
  std::span<float> data;
  std::vector<float> gathered;  // peer-major: peer * data.size() + index
  std::vector<RequestPtr> parts;
};

// On the collective context (Alltoallv 0, Allgather 1).
constexpr int kIallreduceTag = 2;
constexpr int kIreduceScatterTag = 3;
constexpr int kIallgatherTag = 4;

struct Message {
  int context = 0;
  int source = 0;
  int tag = 0;
  std::vector<std::byte> data;
};

struct PendingRecv {
  int context = 0;
  int source = 0;
  int tag = 0;
  void* data = nullptr;
  size_t bytes = 0;
  InProcRequest* request = nullptr;
};

}  // namespace

struct InProcessWorld::State {
  explicit State(int n) : size(n), unexpected(n), posted(n) {}
  int size;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<Message>> unexpected;  // by destination world rank
  std::vector<std::list<PendingRecv>> posted;   // by destination world rank
  // (parent context, parent's split sequence number, color) -> new context id.
  std::map<std::tuple<int, int64_t, int>, int> split_contexts;
  int next_context = 2;  // 0: world point-to-point, 1: world collectives
};

namespace {

using State = InProcessWorld::State;

class InProcComm final : public Comm {
 public:
  InProcComm(std::shared_ptr<State> state, int context, std::vector<int> members, int rank)
      : state_(std::move(state)), context_(context), members_(std::move(members)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int max_tag() const override { return (1 << 30); }

  RequestPtr Isend(const void* data, size_t bytes, int dest, int tag) override {
    return Send(context_, data, bytes, dest, tag);
  }
  RequestPtr Irecv(void* data, size_t bytes, int source, int tag) override {
    return Recv(context_, data, bytes, source, tag);
  }

  void Wait(Request& request) override {
    if (request.done()) return;
    if (auto* reduce = dynamic_cast<InProcAllreduce*>(&request)) {
      WaitAll(reduce->parts);
      FinishAllreduce(*reduce);
      return;
    }
    auto& req = static_cast<InProcRequest&>(request);
    std::unique_lock lock(state_->mu);
    state_->cv.wait(lock, [&] { return req.complete; });
    MarkDone(request);
  }

  size_t WaitAny(std::span<Request* const> requests) override {
    std::unique_lock lock(state_->mu);
    for (;;) {
      bool any_pending = false;
      for (size_t index = 0; index < requests.size(); ++index) {
        Request* request = requests[index];
        if (request == nullptr || request->done()) continue;
        HEXISEQ_CHECK(dynamic_cast<InProcAllreduce*>(request) == nullptr,
                      "WaitAny on an all-reduce request (complete it with Wait or Test)");
        any_pending = true;
        if (static_cast<InProcRequest*>(request)->complete) {
          MarkDone(*request);
          return index;
        }
      }
      HEXISEQ_CHECK(any_pending, "WaitAny called without an incomplete request");
      state_->cv.wait(lock);
    }
  }

  bool Test(Request& request) override {
    if (request.done()) return true;
    if (auto* reduce = dynamic_cast<InProcAllreduce*>(&request)) {
      for (const RequestPtr& part : reduce->parts) {
        if (!Test(*part)) return false;
      }
      FinishAllreduce(*reduce);
      return true;
    }
    std::unique_lock lock(state_->mu);
    if (!static_cast<InProcRequest&>(request).complete) return false;
    MarkDone(request);
    return true;
  }

  void Alltoallv(const float* send, std::span<const int64_t> send_counts,
                 std::span<const int64_t> send_displs, float* recv,
                 std::span<const int64_t> recv_counts,
                 std::span<const int64_t> recv_displs) override {
    const int n = size();
    HEXISEQ_CHECK(
        static_cast<int>(send_counts.size()) == n && static_cast<int>(recv_counts.size()) == n,
        "Alltoallv count arrays must have one entry per rank");
    std::vector<RequestPtr> requests;
    for (int peer = 0; peer < n; ++peer) {
      requests.push_back(Recv(context_ + 1, recv + recv_displs[peer],
                              static_cast<size_t>(recv_counts[peer]) * sizeof(float), peer, 0));
    }
    for (int peer = 0; peer < n; ++peer) {
      requests.push_back(Send(context_ + 1, send + send_displs[peer],
                              static_cast<size_t>(send_counts[peer]) * sizeof(float), peer, 0));
    }
    WaitAll(requests);
  }

  void AllreduceSum(std::span<double> data) override { AllreduceSumByAllgather(*this, data); }
  void AllreduceSum(std::span<float> data) override { AllreduceSumByAllgather(*this, data); }

  RequestPtr IallreduceSum(std::span<float> data) override {
    const int n = size();
    auto reduce = std::make_unique<InProcAllreduce>();
    reduce->data = data;
    reduce->gathered.resize(data.size() * n);
    for (int peer = 0; peer < n; ++peer) {
      reduce->parts.push_back(Recv(context_ + 1, reduce->gathered.data() + peer * data.size(),
                                   data.size_bytes(), peer, kIallreduceTag));
    }
    for (int peer = 0; peer < n; ++peer) {
      reduce->parts.push_back(
          Send(context_ + 1, data.data(), data.size_bytes(), peer, kIallreduceTag));
    }
    return reduce;
  }

  RequestPtr IreduceScatterSum(const float* send, std::span<const int64_t> counts,
                               float* recv) override {
    const int n = size();
    HEXISEQ_CHECK(static_cast<int>(counts.size()) == n, "IreduceScatterSum: one count per rank");
    const auto mine = static_cast<size_t>(counts[rank()]);
    auto reduce = std::make_unique<InProcAllreduce>();
    reduce->data = std::span<float>(recv, mine);
    reduce->gathered.resize(mine * n);
    for (int peer = 0; peer < n; ++peer) {
      reduce->parts.push_back(Recv(context_ + 1, reduce->gathered.data() + peer * mine,
                                   mine * sizeof(float), peer, kIreduceScatterTag));
    }
    const float* block = send;
    for (int peer = 0; peer < n; ++peer) {
      const auto bytes = static_cast<size_t>(counts[peer]) * sizeof(float);
      reduce->parts.push_back(Send(context_ + 1, block, bytes, peer, kIreduceScatterTag));
      block += counts[peer];
    }
    return reduce;
  }

  RequestPtr IallgatherBytes(const void* send, size_t bytes, void* recv) override {
    auto gather = std::make_unique<InProcAllreduce>();
    gather->add = false;
    for (int peer = 0; peer < size(); ++peer) {
      gather->parts.push_back(Recv(context_ + 1, static_cast<std::byte*>(recv) + peer * bytes,
                                   bytes, peer, kIallgatherTag));
    }
    for (int peer = 0; peer < size(); ++peer) {
      gather->parts.push_back(Send(context_ + 1, send, bytes, peer, kIallgatherTag));
    }
    return gather;
  }

  void Allgather(const void* send, size_t bytes, void* recv) override {
    const int n = size();
    std::vector<RequestPtr> requests;
    for (int peer = 0; peer < n; ++peer) {
      requests.push_back(
          Recv(context_ + 1, static_cast<std::byte*>(recv) + peer * bytes, bytes, peer, 1));
    }
    for (int peer = 0; peer < n; ++peer) {
      requests.push_back(Send(context_ + 1, send, bytes, peer, 1));
    }
    WaitAll(requests);
  }

  void Barrier() override { BarrierByAllgather(*this); }

  std::unique_ptr<Comm> Split(int color, int key) override {
    const int n = size();
    std::vector<int> mine = {color, key};
    std::vector<int> all(2 * n);
    Allgather(mine.data(), 2 * sizeof(int), all.data());
    const int64_t sequence = split_count_++;
    if (color < 0) return nullptr;
    SplitMembership membership = SplitMembers(all, 2, color, rank_);
    std::vector<int> members;  // world ranks
    for (int peer : membership.members) members.push_back(members_[peer]);
    const int new_rank = membership.new_rank;
    int context = 0;
    {
      std::lock_guard lock(state_->mu);
      auto [it, inserted] =
          state_->split_contexts.try_emplace({context_, sequence, color}, state_->next_context);
      if (inserted) state_->next_context += 2;
      context = it->second;
    }
    return std::make_unique<InProcComm>(state_, context, std::move(members), new_rank);
  }

 private:
  void FinishAllreduce(InProcAllreduce& reduce) {
    if (reduce.add) SumInRankOrder<float>(reduce.gathered, size(), reduce.data);
    reduce.gathered = {};
    reduce.parts.clear();
    MarkDone(reduce);
  }

  RequestPtr Send(int context, const void* data, size_t bytes, int dest, int tag) {
    HEXISEQ_CHECK(dest >= 0 && dest < size(), "send to a rank outside the communicator");
    auto request = std::make_unique<InProcRequest>();
    const int dest_world = members_[dest];
    {
      std::lock_guard lock(state_->mu);
      auto& posted = state_->posted[dest_world];
      auto match = std::find_if(posted.begin(), posted.end(), [&](const PendingRecv& pending) {
        return pending.context == context && pending.source == rank_ && pending.tag == tag;
      });
      if (match != posted.end()) {
        HEXISEQ_CHECK(bytes <= match->bytes, "in-process message larger than the receive buffer");
        if (bytes > 0) std::memcpy(match->data, data, bytes);
        match->request->complete = true;
        posted.erase(match);
      } else {
        Message message{context, rank_, tag, std::vector<std::byte>(bytes)};
        if (bytes > 0) std::memcpy(message.data.data(), data, bytes);
        state_->unexpected[dest_world].push_back(std::move(message));
      }
      request->complete = true;
    }
    state_->cv.notify_all();
    return request;
  }

  RequestPtr Recv(int context, void* data, size_t bytes, int source, int tag) {
    HEXISEQ_CHECK(source >= 0 && source < size(), "receive from a rank outside the communicator");
    auto request = std::make_unique<InProcRequest>();
    const int me = members_[rank_];
    std::lock_guard lock(state_->mu);
    auto& queue = state_->unexpected[me];
    auto match = std::find_if(queue.begin(), queue.end(), [&](const Message& message) {
      return message.context == context && message.source == source && message.tag == tag;
    });
    if (match != queue.end()) {
      HEXISEQ_CHECK(match->data.size() <= bytes,
                    "in-process message larger than the receive buffer");
      if (!match->data.empty()) std::memcpy(data, match->data.data(), match->data.size());
      request->complete = true;
      queue.erase(match);
    } else {
      state_->posted[me].push_back(PendingRecv{context, source, tag, data, bytes, request.get()});
    }
    return request;
  }

  std::shared_ptr<State> state_;
  int context_;               // point-to-point; context_ + 1 carries this comm's collectives
  std::vector<int> members_;  // world rank of each rank of this communicator
  int rank_;
  int64_t split_count_ = 0;
};

}  // namespace

InProcessWorld::InProcessWorld(int size) : state_(std::make_shared<State>(size)) {
  HEXISEQ_CHECK(size >= 1, "an in-process world needs at least one rank");
}
InProcessWorld::~InProcessWorld() = default;

int InProcessWorld::size() const { return state_->size; }

std::unique_ptr<Comm> InProcessWorld::WorldComm(int rank) {
  HEXISEQ_CHECK(rank >= 0 && rank < state_->size, "rank outside the in-process world");
  std::vector<int> members(state_->size);
  for (int member = 0; member < state_->size; ++member) members[member] = member;
  return std::make_unique<InProcComm>(state_, 0, std::move(members), rank);
}

void RunInProcess(int size, const std::function<void(Comm&)>& fn) {
  InProcessWorld world(size);
  std::vector<std::exception_ptr> errors(size);
  {
    std::vector<std::jthread> threads;
    for (int rank = 0; rank < size; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          auto comm = world.WorldComm(rank);
          fn(*comm);
        } catch (...) {
          errors[rank] = std::current_exception();
        }
      });
    }
  }
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace hexiseq::runtime
