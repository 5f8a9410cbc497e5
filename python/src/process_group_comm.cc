// ProcessGroupComm. Completion: c10d's gloo send/recv Work reports completion only through a
// blocking wait() (isCompleted() turns true only after it, and a timed wait() that expires ends
// the Work with an error), so Test/WaitAny cannot poll. Each posted operation is therefore
// waited on by a helper thread from a pool that grows to the number of operations in flight
// (threads are reused, never fewer than needed, so a wait that depends on another operation's
// progress cannot starve it); the helper marks the operation complete and wakes WaitAny.
#include "process_group_comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "runtime/comm_algorithms.h"
#include "spec/error.h"

namespace hexiseq::python {
namespace {

struct Operation {
  c10::intrusive_ptr<c10d::Work> work;
  bool complete = false;  // guarded by the pool's mutex
  std::exception_ptr error;
};

// Helper threads that block in Work::wait() and publish completions.
class CompletionPool {
 public:
  ~CompletionPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    job_cv_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  void Submit(std::shared_ptr<Operation> operation) {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(operation));
    if (idle_ < static_cast<int>(jobs_.size())) {
      threads_.emplace_back([this] { Worker(); });
    } else {
      job_cv_.notify_one();
    }
  }

  // Blocks until one of `operations` (null entries and completed ones included) is complete;
  // returns its index and rethrows its transport error, if any.
  size_t WaitAny(const std::vector<Operation*>& operations) {
    std::unique_lock lock(mu_);
    for (;;) {
      for (size_t index = 0; index < operations.size(); ++index) {
        Operation* operation = operations[index];
        if (operation == nullptr || !operation->complete) continue;
        if (operation->error) std::rethrow_exception(operation->error);
        return index;
      }
      done_cv_.wait(lock);
    }
  }

  // Completes an operation that has no Work (a message to this rank itself).
  void MarkComplete(Operation& operation) {
    {
      std::lock_guard lock(mu_);
      operation.complete = true;
    }
    done_cv_.notify_all();
  }

  bool IsComplete(const Operation& operation) {
    std::lock_guard lock(mu_);
    if (operation.complete && operation.error) std::rethrow_exception(operation.error);
    return operation.complete;
  }

 private:
  void Worker() {
    std::unique_lock lock(mu_);
    for (;;) {
      ++idle_;
      job_cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // stopping
      std::shared_ptr<Operation> operation = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      std::exception_ptr error;
      try {
        operation->work->wait();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      operation->complete = true;
      operation->error = error;
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable job_cv_, done_cv_;
  std::deque<std::shared_ptr<Operation>> jobs_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stop_ = false;
};

}  // namespace

struct ProcessGroupState {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  CompletionPool pool;
  int next_context = 1;  // context 0 is the world; each Split takes the next free id
};

namespace {

struct PgRequest : runtime::Request {
  std::shared_ptr<Operation> operation;
  std::vector<char> scratch;  // stands in for an empty buffer (gloo needs at least one byte)
};

// Messages a rank sends to itself never reach the process group (gloo has no pair to self):
// they match here, by tag in posting order, and are copied.
struct SelfMessage {
  int tag = 0;
  std::vector<std::byte> data;
};
struct SelfReceive {
  int tag = 0;
  void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<Operation> operation;
};

class ProcessGroupComm final : public runtime::Comm {
 public:
  ProcessGroupComm(std::shared_ptr<ProcessGroupState> state, int context, std::vector<int> members,
                   int rank)
      : state_(std::move(state)), context_(context), members_(std::move(members)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int max_tag() const override { return (1 << kUserTagBits) - 1 - kCollectiveTags; }

  runtime::RequestPtr Isend(const void* data, size_t bytes, int dest, int tag) override {
    return Post(true, const_cast<void*>(data), bytes, dest, tag);
  }
  runtime::RequestPtr Irecv(void* data, size_t bytes, int source, int tag) override {
    return Post(false, data, bytes, source, tag);
  }

  void Wait(runtime::Request& request) override {
    if (request.done()) return;
    std::vector<Operation*> one = {static_cast<PgRequest&>(request).operation.get()};
    state_->pool.WaitAny(one);
    MarkDone(request);
  }

  size_t WaitAny(std::span<runtime::Request* const> requests) override {
    std::vector<Operation*> operations;
    bool any_pending = false;
    for (runtime::Request* request : requests) {
      const bool pending = request != nullptr && !request->done();
      any_pending = any_pending || pending;
      operations.push_back(pending ? static_cast<PgRequest*>(request)->operation.get() : nullptr);
    }
    HEXISEQ_CHECK(any_pending, "WaitAny called without an incomplete request");
    const size_t index = state_->pool.WaitAny(operations);
    MarkDone(*requests[index]);
    return index;
  }

  bool Test(runtime::Request& request) override {
    if (request.done()) return true;
    if (!state_->pool.IsComplete(*static_cast<PgRequest&>(request).operation)) return false;
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
    std::vector<runtime::RequestPtr> requests;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank_ || recv_counts[peer] == 0) continue;
      requests.push_back(
          Irecv(recv + recv_displs[peer], recv_counts[peer] * sizeof(float), peer, AlltoallTag()));
    }
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank_ || send_counts[peer] == 0) continue;
      requests.push_back(
          Isend(send + send_displs[peer], send_counts[peer] * sizeof(float), peer, AlltoallTag()));
    }
    HEXISEQ_CHECK(send_counts[rank_] == recv_counts[rank_], "Alltoallv: own counts differ");
    std::copy_n(send + send_displs[rank_], send_counts[rank_], recv + recv_displs[rank_]);
    WaitAll(requests);
  }

  void AllreduceSum(std::span<double> data) override {
    runtime::AllreduceSumByAllgather(*this, data);
  }
  void AllreduceSum(std::span<float> data) override {
    runtime::AllreduceSumByAllgather(*this, data);
  }

  void Allgather(const void* send, size_t bytes, void* recv) override {
    const int n = size();
    auto* out = static_cast<std::byte*>(recv);
    std::vector<runtime::RequestPtr> requests;
    for (int peer = 0; peer < n; ++peer) {
      if (peer != rank_) requests.push_back(Irecv(out + peer * bytes, bytes, peer, GatherTag()));
    }
    for (int peer = 0; peer < n; ++peer) {
      if (peer != rank_) requests.push_back(Isend(send, bytes, peer, GatherTag()));
    }
    if (bytes > 0) std::memcpy(out + rank_ * bytes, send, bytes);
    WaitAll(requests);
  }

  void Barrier() override { runtime::BarrierByAllgather(*this); }

  std::unique_ptr<Comm> Split(int color, int key) override;

 private:
  int AlltoallTag() const { return max_tag() + 1; }
  int GatherTag() const { return max_tag() + 2; }

  runtime::RequestPtr Post(bool is_send, void* data, size_t bytes, int peer, int tag) {
    HEXISEQ_CHECK(peer >= 0 && peer < size(), "peer outside the communicator");
    HEXISEQ_CHECK(tag >= 0 && tag <= max_tag() + kCollectiveTags, "tag outside the range");
    if (peer == rank_) return PostToSelf(is_send, data, bytes, tag);
    auto request = std::make_unique<PgRequest>();
    if (bytes == 0) {  // both sides of an empty message agree to move one dummy byte
      request->scratch.resize(1);
      data = request->scratch.data();
      bytes = 1;
    }
    std::vector<at::Tensor> tensors = {
        at::from_blob(data, {static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte))};
    const int wire_tag = kTagBase + (context_ << kUserTagBits) + tag;
    auto operation = std::make_shared<Operation>();
    operation->work = is_send ? state_->group->send(tensors, members_[peer], wire_tag)
                              : state_->group->recv(tensors, members_[peer], wire_tag);
    request->operation = operation;
    state_->pool.Submit(std::move(operation));
    return request;
  }

  runtime::RequestPtr PostToSelf(bool is_send, void* data, size_t bytes, int tag) {
    auto request = std::make_unique<PgRequest>();
    request->operation = std::make_shared<Operation>();
    if (is_send) {
      auto match = std::find_if(self_receives_.begin(), self_receives_.end(),
                                [&](const SelfReceive& r) { return r.tag == tag; });
      if (match != self_receives_.end()) {
        HEXISEQ_CHECK(bytes <= match->bytes, "message to self larger than the receive buffer");
        if (bytes > 0) std::memcpy(match->data, data, bytes);
        state_->pool.MarkComplete(*match->operation);
        self_receives_.erase(match);
      } else {
        const auto* begin = static_cast<const std::byte*>(data);
        self_messages_.push_back(SelfMessage{tag, std::vector<std::byte>(begin, begin + bytes)});
      }
      state_->pool.MarkComplete(*request->operation);
      return request;
    }
    auto match = std::find_if(self_messages_.begin(), self_messages_.end(),
                              [&](const SelfMessage& m) { return m.tag == tag; });
    if (match != self_messages_.end()) {
      HEXISEQ_CHECK(match->data.size() <= bytes, "message to self larger than the receive buffer");
      if (!match->data.empty()) std::memcpy(data, match->data.data(), match->data.size());
      self_messages_.erase(match);
      state_->pool.MarkComplete(*request->operation);
    } else {
      self_receives_.push_back(SelfReceive{tag, data, bytes, request->operation});
    }
    return request;
  }

  std::shared_ptr<ProcessGroupState> state_;
  int context_;
  std::vector<int> members_;  // group rank of each rank of this communicator
  int rank_;
  std::deque<SelfMessage> self_messages_;
  std::deque<SelfReceive> self_receives_;
};

// Every rank of this communicator proposes its next free context id; the new communicators take
// the largest, and every rank moves past it. A rank's communicators thus have increasing ids, so
// two communicators that share a rank never share an id (disjoint colors may share one).
std::unique_ptr<runtime::Comm> ProcessGroupComm::Split(int color, int key) {
  const int n = size();
  const int mine[3] = {color, key, state_->next_context};
  std::vector<int> all(3 * n);
  Allgather(mine, sizeof(mine), all.data());
  int context = 0;
  for (int peer = 0; peer < n; ++peer) context = std::max(context, all[3 * peer + 2]);
  if (context >= kMaxContexts) {
    throw std::runtime_error("hexiseq: the process-group transport ran out of communicator ids (" +
                             std::to_string(kMaxContexts) +
                             "; hint: reuse hexiseq.torch.Context objects)");
  }
  state_->next_context = context + 1;
  if (color < 0) return nullptr;
  const runtime::SplitMembership membership = runtime::SplitMembers(all, 3, color, rank_);
  std::vector<int> members;  // group ranks
  for (int peer : membership.members) members.push_back(members_[peer]);
  return std::make_unique<ProcessGroupComm>(state_, context, std::move(members),
                                            membership.new_rank);
}

}  // namespace

std::unique_ptr<runtime::Comm> MakeProcessGroupComm(c10::intrusive_ptr<c10d::ProcessGroup> group) {
  auto state = std::make_shared<ProcessGroupState>();
  state->group = std::move(group);
  const int size = state->group->getSize();
  std::vector<int> members(size);
  for (int rank = 0; rank < size; ++rank) members[rank] = rank;
  const int rank = state->group->getRank();
  return std::make_unique<ProcessGroupComm>(std::move(state), 0, std::move(members), rank);
}

}  // namespace hexiseq::python
