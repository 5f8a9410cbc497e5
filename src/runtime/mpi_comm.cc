// MPI-backed Comm. Each MpiComm owns its MPI communicator and frees it on destruction; large
// all-to-all-v counts (beyond int) fall back to chunked point-to-point on a private duplicate.
#include "runtime/mpi_comm.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "spec/error.h"

namespace hexiseq::runtime {
namespace {

struct MpiRequest : Request {
  MPI_Request handle = MPI_REQUEST_NULL;
};

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
    MPI_Wait(&static_cast<MpiRequest&>(request).handle, MPI_STATUS_IGNORE);
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
    int which = MPI_UNDEFINED;
    MPI_Waitany(static_cast<int>(handles.size()), handles.data(), &which, MPI_STATUS_IGNORE);
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
    if (flag) MarkDone(request);
    return flag != 0;
  }

  void Alltoallv(const float* send, std::span<const int64_t> send_counts,
                 std::span<const int64_t> send_displs, float* recv,
                 std::span<const int64_t> recv_counts,
                 std::span<const int64_t> recv_displs) override {
    HEXISEQ_CHECK(static_cast<int>(send_counts.size()) == size_ &&
                      static_cast<int>(recv_counts.size()) == size_,
                  "Alltoallv count arrays must have one entry per rank");
    auto fits = [](std::span<const int64_t> values) {
      return std::all_of(values.begin(), values.end(), [](int64_t v) { return v <= INT_MAX; });
    };
    if (fits(send_counts) && fits(send_displs) && fits(recv_counts) && fits(recv_displs)) {
      std::vector<int> sc(send_counts.begin(), send_counts.end());
      std::vector<int> sd(send_displs.begin(), send_displs.end());
      std::vector<int> rc(recv_counts.begin(), recv_counts.end());
      std::vector<int> rd(recv_displs.begin(), recv_displs.end());
      MPI_Alltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT,
                    comm_);
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
    MPI_Waitall(static_cast<int>(handles.size()), handles.data(), MPI_STATUSES_IGNORE);
  }

  void AllreduceSum(std::span<double> data) override {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), CheckedInt(data.size()), MPI_DOUBLE, MPI_SUM, comm_);
  }
  void AllreduceSum(std::span<float> data) override {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), CheckedInt(data.size()), MPI_FLOAT, MPI_SUM, comm_);
  }
  RequestPtr IallreduceSum(std::span<float> data) override {
    auto request = std::make_unique<MpiRequest>();
    MPI_Iallreduce(MPI_IN_PLACE, data.data(), CheckedInt(data.size()), MPI_FLOAT, MPI_SUM, comm_,
                   &request->handle);
    return request;
  }
  void Allgather(const void* send, size_t bytes, void* recv) override {
    MPI_Allgather(send, CheckedInt(bytes), MPI_BYTE, recv, CheckedInt(bytes), MPI_BYTE, comm_);
  }
  void Barrier() override { MPI_Barrier(comm_); }

  std::unique_ptr<Comm> Split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub);
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiComm>(sub);
  }

 private:
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
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    finalize_ = true;
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalize_ && !finalized) MPI_Finalize();
}

std::unique_ptr<Comm> MpiWorldComm() {
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  return std::make_unique<MpiComm>(dup);
}

}  // namespace hexiseq::runtime
