// Allgather-based barrier and the Split membership rule (see comm_algorithms.h).
#include "runtime/comm_algorithms.h"

#include <algorithm>
#include <utility>

namespace hexiseq::runtime {

void BarrierByAllgather(Comm& comm) {
  std::vector<char> all(comm.size());
  const char mine = 0;
  comm.Allgather(&mine, 1, all.data());
}

SplitMembership SplitMembers(std::span<const int> colors_and_keys, int stride, int color,
                             int my_rank) {
  const int ranks = static_cast<int>(colors_and_keys.size()) / stride;
  std::vector<std::pair<int, int>> order;  // (key, rank)
  for (int rank = 0; rank < ranks; ++rank) {
    if (colors_and_keys[rank * stride] == color) {
      order.emplace_back(colors_and_keys[rank * stride + 1], rank);
    }
  }
  std::sort(order.begin(), order.end());
  SplitMembership membership;
  for (const auto& [key, rank] : order) {
    if (rank == my_rank) membership.new_rank = static_cast<int>(membership.members.size());
    membership.members.push_back(rank);
  }
  return membership;
}

}  // namespace hexiseq::runtime
