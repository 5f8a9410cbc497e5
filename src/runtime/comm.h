// Comm: the small communication interface the runtime talks to (point-to-point, all-to-all-v,
// all-reduce, reduce-scatter, all-gather, barrier, sub-communicators). Two implementations: MPI
// (the distributed engine, mpi_comm.h) and in-process threads (InProcessWorld below, for fast
// tests). A CUDA/NCCL backend plugs in behind the same interface. Transport failures are bugs or
// fatal machine errors, not user input: they abort (MPI's default error handler; HEXISEQ_CHECK
// in-process).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace hexiseq::runtime {

// An outstanding asynchronous operation. Move-only handle; complete it with Comm::Wait/WaitAny
// (or Test) before its buffer is reused or freed. Destroying an incomplete request is a bug.
class Request {
 public:
  virtual ~Request() = default;
  bool done() const { return done_; }

 protected:
  bool done_ = false;
  friend class Comm;
};
using RequestPtr = std::unique_ptr<Request>;

// One rank's view of a communicator. Not thread-safe: one thread per rank uses it.
// Message matching follows MPI: by (source, tag) on this communicator, in posting order.
class Comm {
 public:
  virtual ~Comm() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Largest tag usable with Isend/Irecv (MPI guarantees at least 32767).
  virtual int max_tag() const = 0;

  // Asynchronous byte transfers. REQUIRES: the buffer stays valid until the request completes;
  // a received message must fit in `bytes`.
  virtual RequestPtr Isend(const void* data, size_t bytes, int dest, int tag) = 0;
  virtual RequestPtr Irecv(void* data, size_t bytes, int source, int tag) = 0;
  virtual void Wait(Request& request) = 0;
  // Waits until one of the incomplete requests completes and returns its index. REQUIRES: at
  // least one of `requests` is incomplete (completed ones are ignored).
  virtual size_t WaitAny(std::span<Request* const> requests) = 0;
  virtual bool Test(Request& request) = 0;
  void WaitAll(std::span<const RequestPtr> requests);

  // Collectives; every rank of the communicator calls them in the same order.
  // All-to-all-v on floats; counts and displacements are in elements, indexed by rank.
  virtual void Alltoallv(const float* send, std::span<const int64_t> send_counts,
                         std::span<const int64_t> send_displs, float* recv,
                         std::span<const int64_t> recv_counts,
                         std::span<const int64_t> recv_displs) = 0;
  // In-place element-wise sum over ranks.
  virtual void AllreduceSum(std::span<double> data) = 0;
  virtual void AllreduceSum(std::span<float> data) = 0;
  // Starts the in-place sum of AllreduceSum(data) and returns its request; the sum is in `data`
  // once Wait (or a Test that returns true) completes it, bit-identical to AllreduceSum's.
  // REQUIRES: `data` stays valid and untouched until then; every rank starts the same
  // all-reduces in the same order. The default runs AllreduceSum at once and returns a completed
  // request; transports override it to overlap the sum with other work.
  virtual RequestPtr IallreduceSum(std::span<float> data);
  // Starts a reduce-scatter: `counts` (one per rank, the same on every rank) cut `send` into
  // blocks in rank order; once Wait (or a Test that returns true) completes the request, `recv`
  // (counts[rank()] elements) holds the sum over ranks of block rank(), the same sums as
  // IallreduceSum gives those elements (the in-process transport and slowed links sum both in
  // rank order; OpenMPI's nonblocking collectives agree too). REQUIRES: both buffers stay valid
  // and untouched until then; every rank starts the same collectives in the same order. The
  // default runs IallreduceSum on a copy at once and returns a completed request.
  virtual RequestPtr IreduceScatterSum(const float* send, std::span<const int64_t> counts,
                                       float* recv);
  // Every rank contributes `bytes` bytes; `recv` receives size() * bytes, in rank order.
  virtual void Allgather(const void* send, size_t bytes, void* recv) = 0;
  // Starts Allgather(send, bytes, recv); `recv` holds the blocks once Wait (or a Test that
  // returns true) completes the request. REQUIRES: both buffers stay valid and untouched until
  // then; every rank starts the same collectives in the same order. The default runs Allgather at
  // once and returns a completed request.
  virtual RequestPtr IallgatherBytes(const void* send, size_t bytes, void* recv);
  virtual void Barrier() = 0;

  // MPI_Comm_split: ranks with the same color form a new communicator, ordered by (key, rank).
  // A negative color returns nullptr (the rank joins none). Collective over this communicator.
  virtual std::unique_ptr<Comm> Split(int color, int key) = 0;
  // A communicator with the same ranks and a separate message space (MPI_Comm_dup).
  std::unique_ptr<Comm> Dup() { return Split(0, rank()); }

 protected:
  static void MarkDone(Request& request) { request.done_ = true; }
};

// In-process transport: `size` ranks as threads of one process sharing mailboxes. Sends are
// eager (copied at once), so a send never blocks. Thread-safe across ranks.
class InProcessWorld {
 public:
  explicit InProcessWorld(int size);
  ~InProcessWorld();
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int size() const;
  // The world communicator of `rank`; one per rank, used by that rank's thread only.
  std::unique_ptr<Comm> WorldComm(int rank);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Runs fn(comm) for every rank of a fresh in-process world, one thread each, and joins them.
void RunInProcess(int size, const std::function<void(Comm&)>& fn);

}  // namespace hexiseq::runtime
