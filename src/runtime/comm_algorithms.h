// Collectives built from a communicator's own Allgather, shared by the transports that have no
// native ones (the in-process transport and the c10d ProcessGroup transport of the Python
// module): an all-reduce that sums in rank order (so every rank gets bit-identical results), a
// barrier, and the membership rule of Comm::Split (MPI_Comm_split: same color, ordered by key,
// then by rank). Ignores performance: every rank receives every rank's data.
#pragma once

#include <span>
#include <vector>

#include "runtime/comm.h"

namespace hexiseq::runtime {

// Sums `gathered` (`peers` blocks of data.size(), block r from rank r) in rank order into `data`.
template <class T>
void SumInRankOrder(std::span<const T> gathered, int peers, std::span<T> data) {
  for (size_t index = 0; index < data.size(); ++index) {
    T sum = 0;
    for (int peer = 0; peer < peers; ++peer) sum += gathered[peer * data.size() + index];
    data[index] = sum;
  }
}

// In-place all-reduce sum through comm.Allgather, summed in rank order.
template <class T>
void AllreduceSumByAllgather(Comm& comm, std::span<T> data) {
  std::vector<T> all(data.size() * comm.size());
  comm.Allgather(data.data(), data.size_bytes(), all.data());
  SumInRankOrder<T>(all, comm.size(), data);
}

// A barrier through a one-byte comm.Allgather.
void BarrierByAllgather(Comm& comm);

// The new communicator of a Split: `members` are the ranks (of the parent) with `color`, ordered
// by (key, rank); `new_rank` is the position of `my_rank` among them (-1 when it has another
// color). `colors_and_keys` holds every rank's (color, key), `stride` ints per rank.
struct SplitMembership {
  std::vector<int> members;
  int new_rank = -1;
};
SplitMembership SplitMembers(std::span<const int> colors_and_keys, int stride, int color,
                             int my_rank);

}  // namespace hexiseq::runtime
