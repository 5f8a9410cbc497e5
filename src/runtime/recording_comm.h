// RecordingComm: a Comm decorator that forwards every call to an inner communicator and records
// (source, destination, bytes) of every point-to-point send and of every all-to-all piece sent to
// another rank, in world ranks, into a log shared by all ranks. Tests compare the log with the
// layer schedule. Collectives other than all-to-all (all-gather, all-reduce, reduce-scatter,
// barrier) are not recorded: they carry agreement checks, not attention data.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/comm.h"

namespace hexiseq::runtime {

struct RecordedMessage {
  enum class Kind { kPointToPoint, kAllToAll };
  Kind kind = Kind::kPointToPoint;
  int source = 0;  // world rank
  int dest = 0;    // world rank
  int64_t bytes = 0;
  auto operator<=>(const RecordedMessage&) const = default;
};

// Thread-safe: the ranks of an in-process world add to it concurrently.
class MessageLog {
 public:
  void Add(const RecordedMessage& message);
  // Returns what was recorded since the last call, sorted, and clears the log.
  std::vector<RecordedMessage> TakeSorted();

 private:
  std::mutex mutex_;
  std::vector<RecordedMessage> messages_;
};

class RecordingComm : public Comm {
 public:
  // Records into `log` the traffic of `inner`, a world communicator (its ranks are world ranks).
  // `inner` must outlive this object.
  RecordingComm(Comm& inner, std::shared_ptr<MessageLog> log);

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int max_tag() const override { return inner_.max_tag(); }
  RequestPtr Isend(const void* data, size_t bytes, int dest, int tag) override;
  RequestPtr Irecv(void* data, size_t bytes, int source, int tag) override {
    return inner_.Irecv(data, bytes, source, tag);
  }
  void Wait(Request& request) override { inner_.Wait(request); }
  size_t WaitAny(std::span<Request* const> requests) override { return inner_.WaitAny(requests); }
  bool Test(Request& request) override { return inner_.Test(request); }
  void Alltoallv(const float* send, std::span<const int64_t> send_counts,
                 std::span<const int64_t> send_displs, float* recv,
                 std::span<const int64_t> recv_counts,
                 std::span<const int64_t> recv_displs) override;
  void AllreduceSum(std::span<double> data) override { inner_.AllreduceSum(data); }
  void AllreduceSum(std::span<float> data) override { inner_.AllreduceSum(data); }
  RequestPtr IallreduceSum(std::span<float> data) override { return inner_.IallreduceSum(data); }
  RequestPtr IreduceScatterSum(const float* send, std::span<const int64_t> counts,
                               float* recv) override {
    return inner_.IreduceScatterSum(send, counts, recv);
  }
  void Allgather(const void* send, size_t bytes, void* recv) override {
    inner_.Allgather(send, bytes, recv);
  }
  RequestPtr IallgatherBytes(const void* send, size_t bytes, void* recv) override {
    return inner_.IallgatherBytes(send, bytes, recv);
  }
  void Barrier() override { inner_.Barrier(); }
  // The sub-communicator, recording into the same log with its ranks mapped to world ranks.
  std::unique_ptr<Comm> Split(int color, int key) override;

 private:
  RecordingComm(std::unique_ptr<Comm> owned, std::shared_ptr<MessageLog> log,
                std::vector<int> world_ranks);

  std::unique_ptr<Comm> owned_;  // set for sub-communicators
  Comm& inner_;
  std::shared_ptr<MessageLog> log_;
  std::vector<int> world_ranks_;  // by rank of this communicator
};

}  // namespace hexiseq::runtime
