// RecordingComm: forwards to the inner communicator and logs sends and all-to-all pieces.
#include "runtime/recording_comm.h"

#include <algorithm>
#include <numeric>

namespace hexiseq::runtime {

void MessageLog::Add(const RecordedMessage& message) {
  std::lock_guard lock(mutex_);
  messages_.push_back(message);
}

std::vector<RecordedMessage> MessageLog::TakeSorted() {
  std::lock_guard lock(mutex_);
  std::vector<RecordedMessage> taken = std::move(messages_);
  messages_.clear();
  std::sort(taken.begin(), taken.end());
  return taken;
}

RecordingComm::RecordingComm(Comm& inner, std::shared_ptr<MessageLog> log)
    : inner_(inner), log_(std::move(log)), world_ranks_(inner.size()) {
  std::iota(world_ranks_.begin(), world_ranks_.end(), 0);
}

RecordingComm::RecordingComm(std::unique_ptr<Comm> owned, std::shared_ptr<MessageLog> log,
                             std::vector<int> world_ranks)
    : owned_(std::move(owned)),
      inner_(*owned_),
      log_(std::move(log)),
      world_ranks_(std::move(world_ranks)) {}

RequestPtr RecordingComm::Isend(const void* data, size_t bytes, int dest, int tag) {
  log_->Add(RecordedMessage{RecordedMessage::Kind::kPointToPoint, world_ranks_[rank()],
                            world_ranks_[dest], static_cast<int64_t>(bytes)});
  return inner_.Isend(data, bytes, dest, tag);
}

void RecordingComm::Alltoallv(const float* send, std::span<const int64_t> send_counts,
                              std::span<const int64_t> send_displs, float* recv,
                              std::span<const int64_t> recv_counts,
                              std::span<const int64_t> recv_displs) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank() || send_counts[peer] == 0) continue;
    log_->Add(RecordedMessage{RecordedMessage::Kind::kAllToAll, world_ranks_[rank()],
                              world_ranks_[peer],
                              send_counts[peer] * static_cast<int64_t>(sizeof(float))});
  }
  inner_.Alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs);
}

std::unique_ptr<Comm> RecordingComm::Split(int color, int key) {
  std::unique_ptr<Comm> child = inner_.Split(color, key);
  if (child == nullptr) return nullptr;
  const int my_world_rank = world_ranks_[rank()];
  std::vector<int> child_world_ranks(child->size());
  child->Allgather(&my_world_rank, sizeof(int), child_world_ranks.data());
  return std::unique_ptr<Comm>(
      new RecordingComm(std::move(child), log_, std::move(child_world_ranks)));
}

}  // namespace hexiseq::runtime
