// The in-process transport: MPI matching semantics (source, tag, posting order), WaitAny,
// all-to-all-v, all-reduce, all-gather, split and dup.
#include "runtime/comm.h"

#include <gtest/gtest.h>

#include <numeric>

namespace hexiseq::runtime {
namespace {

TEST(InProcessComm, MatchesBySourceAndTagInPostingOrder) {
  RunInProcess(3, [](Comm& comm) {
    if (comm.rank() == 0) {
      // Two messages with the same tag arrive in order; another tag can be received first.
      int a = 0, b = 0, c = 0;
      RequestPtr rc = comm.Irecv(&c, sizeof c, 2, 7);
      RequestPtr ra = comm.Irecv(&a, sizeof a, 1, 5);
      RequestPtr rb = comm.Irecv(&b, sizeof b, 1, 5);
      comm.Wait(*rb);
      comm.Wait(*ra);
      comm.Wait(*rc);
      EXPECT_EQ(a, 10);
      EXPECT_EQ(b, 11);
      EXPECT_EQ(c, 20);
    } else if (comm.rank() == 1) {
      int x = 10, y = 11;
      comm.Wait(*comm.Isend(&x, sizeof x, 0, 5));
      comm.Wait(*comm.Isend(&y, sizeof y, 0, 5));
    } else {
      int z = 20;
      comm.Wait(*comm.Isend(&z, sizeof z, 0, 7));
    }
  });
}

TEST(InProcessComm, WaitAnyReturnsTheCompletedRequest) {
  RunInProcess(2, [](Comm& comm) {
    if (comm.rank() == 0) {
      int first = 0, second = 0;
      RequestPtr r1 = comm.Irecv(&first, sizeof first, 1, 1);
      RequestPtr r2 = comm.Irecv(&second, sizeof second, 1, 2);
      std::vector<Request*> requests = {r1.get(), r2.get()};
      const size_t done = comm.WaitAny(requests);
      EXPECT_EQ(done, 1u);  // only tag 2 is sent before the barrier
      EXPECT_EQ(second, 2);
      comm.Barrier();
      EXPECT_EQ(comm.WaitAny(requests), 0u);
      EXPECT_EQ(first, 1);
    } else {
      int two = 2, one = 1;
      comm.Wait(*comm.Isend(&two, sizeof two, 0, 2));
      comm.Barrier();
      comm.Wait(*comm.Isend(&one, sizeof one, 0, 1));
    }
  });
}

TEST(InProcessComm, Collectives) {
  RunInProcess(4, [](Comm& comm) {
    const int n = comm.size(), me = comm.rank();
    // Rank r sends (r + 1) * (p + 1) copies of value 100 r + p to rank p.
    std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
    int64_t st = 0, rt = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = (me + 1) * (p + 1);
      rc[p] = (p + 1) * (me + 1);
      sd[p] = st;
      rd[p] = rt;
      st += sc[p];
      rt += rc[p];
    }
    std::vector<float> send(st), recv(rt);
    for (int p = 0; p < n; ++p) std::fill_n(send.begin() + sd[p], sc[p], 100.0f * me + p);
    comm.Alltoallv(send.data(), sc, sd, recv.data(), rc, rd);
    for (int p = 0; p < n; ++p) {
      for (int64_t i = 0; i < rc[p]; ++i) EXPECT_EQ(recv[rd[p] + i], 100.0f * p + me);
    }
    std::vector<double> sum = {1.0 * me, 2.0};
    comm.AllreduceSum(std::span<double>(sum));
    EXPECT_EQ(sum[0], 6.0);
    EXPECT_EQ(sum[1], 8.0);
    std::vector<int> all(n);
    comm.Allgather(&me, sizeof me, all.data());
    for (int p = 0; p < n; ++p) EXPECT_EQ(all[p], p);
  });
}

// Values whose float sum depends on the order of addition, different on every rank.
std::vector<float> RankValues(int rank, size_t count) {
  std::vector<float> values(count);
  for (size_t index = 0; index < count; ++index) {
    values[index] = (rank % 2 ? 1e7f : 1e-3f) * static_cast<float>(index + 1) / (rank + 3.0f);
  }
  return values;
}

TEST(InProcessComm, IallreduceSumEqualsAllreduceSumBitwiseAndOverlapsOtherTraffic) {
  for (const int ranks : {1, 2, 4}) {
    RunInProcess(ranks, [](Comm& comm) {
      constexpr size_t kCount = 257;
      std::vector<float> blocking = RankValues(comm.rank(), kCount);
      comm.AllreduceSum(std::span<float>(blocking));
      // Two outstanding all-reduces, a collective and point-to-point traffic in between.
      std::vector<float> first = RankValues(comm.rank(), kCount);
      std::vector<float> second(3, static_cast<float>(comm.rank()));
      RequestPtr first_request = comm.IallreduceSum(std::span<float>(first));
      RequestPtr second_request = comm.IallreduceSum(std::span<float>(second));
      std::vector<int> ranks_seen(comm.size());
      const int mine = comm.rank();
      comm.Allgather(&mine, sizeof mine, ranks_seen.data());
      const int next = (comm.rank() + 1) % comm.size();
      const int prev = (comm.rank() + comm.size() - 1) % comm.size();
      int received = -1;
      RequestPtr recv = comm.Irecv(&received, sizeof received, prev, 2);  // same tag number
      RequestPtr send = comm.Isend(&mine, sizeof mine, next, 2);
      comm.Wait(*send);
      comm.Wait(*recv);
      EXPECT_EQ(received, prev);
      while (!comm.Test(*second_request)) {
      }
      comm.Wait(*first_request);
      EXPECT_EQ(first, blocking);  // bit-identical
      const float expected = static_cast<float>(comm.size() * (comm.size() - 1) / 2);
      EXPECT_EQ(second, std::vector<float>(3, expected));
    });
  }
}

// Uneven blocks (one empty); each rank's block of the reduce-scatter must be the same bits as the
// all-reduce's elements there.
void ExpectReduceScatterMatchesAllreduce(Comm& comm, const std::vector<int64_t>& counts) {
  int64_t total = 0, offset = 0;
  for (int peer = 0; peer < comm.size(); ++peer) {
    if (peer < comm.rank()) offset += counts[peer];
    total += counts[peer];
  }
  const std::vector<float> send = RankValues(comm.rank(), static_cast<size_t>(total));
  std::vector<float> reduced = send;
  comm.AllreduceSum(std::span<float>(reduced));
  std::vector<float> block(counts[comm.rank()], -1.0f);
  RequestPtr request = comm.IreduceScatterSum(send.data(), counts, block.data());
  comm.Wait(*request);
  EXPECT_EQ(block, std::vector<float>(reduced.begin() + offset,
                                      reduced.begin() + offset + counts[comm.rank()]));
}

TEST(InProcessComm, IreduceScatterSumGivesEachRankItsBlockOfTheAllreduce) {
  for (const int ranks : {1, 2, 4}) {
    RunInProcess(ranks, [](Comm& comm) {
      std::vector<int64_t> counts = {7, 0, 130, 3};
      counts.resize(comm.size());
      ExpectReduceScatterMatchesAllreduce(comm, counts);
      // Two outstanding at once, completed out of order with traffic in between.
      const std::vector<float> ones(comm.size(), 1.0f), twos(comm.size() * 2, 2.0f);
      float one_sum = 0;
      std::vector<float> two_sum(2);
      const std::vector<int64_t> singles(comm.size(), 1), pairs(comm.size(), 2);
      RequestPtr first = comm.IreduceScatterSum(ones.data(), singles, &one_sum);
      RequestPtr second = comm.IreduceScatterSum(twos.data(), pairs, two_sum.data());
      comm.Barrier();
      comm.Wait(*second);
      comm.Wait(*first);
      EXPECT_EQ(one_sum, static_cast<float>(comm.size()));
      EXPECT_EQ(two_sum, std::vector<float>(2, 2.0f * comm.size()));
    });
  }
}

TEST(InProcessComm, IallgatherBytesEqualsAllgather) {
  for (const int ranks : {1, 3}) {
    RunInProcess(ranks, [](Comm& comm) {
      const std::vector<float> mine = RankValues(comm.rank(), 5);
      std::vector<float> blocking(5 * comm.size()), started(5 * comm.size(), -1.0f);
      comm.Allgather(mine.data(), 5 * sizeof(float), blocking.data());
      RequestPtr gather = comm.IallgatherBytes(mine.data(), 5 * sizeof(float), started.data());
      comm.Barrier();  // other collectives may run while it is outstanding
      while (!comm.Test(*gather)) {
      }
      EXPECT_EQ(started, blocking);
    });
  }
}

TEST(InProcessComm, SplitAndDupHaveSeparateMessageSpaces) {
  RunInProcess(5, [](Comm& comm) {
    const int me = comm.rank();
    // Colors: even ranks -> 0, odd -> 1, rank 4 -> none. Key reverses the order.
    const int color = me == 4 ? -1 : me % 2;
    std::unique_ptr<Comm> sub = comm.Split(color, -me);
    std::unique_ptr<Comm> dup = comm.Dup();
    ASSERT_EQ(dup->size(), 5);
    EXPECT_EQ(dup->rank(), me);
    if (me == 4) {
      EXPECT_EQ(sub, nullptr);
    } else {
      ASSERT_NE(sub, nullptr);
      EXPECT_EQ(sub->size(), 2);
      EXPECT_EQ(sub->rank(), me < 2 ? 1 : 0);  // higher old rank first
      int peer_rank = -1;
      std::vector<int> both(2);
      sub->Allgather(&me, sizeof me, both.data());
      peer_rank = both[1 - sub->rank()];
      EXPECT_EQ(peer_rank % 2, me % 2);
    }
    // Same (source, tag) on world and dup do not mix.
    if (me == 0) {
      int on_world = 0, on_dup = 0;
      RequestPtr a = dup->Irecv(&on_dup, sizeof on_dup, 1, 3);
      RequestPtr b = comm.Irecv(&on_world, sizeof on_world, 1, 3);
      comm.Wait(*b);
      dup->Wait(*a);
      EXPECT_EQ(on_world, 1);
      EXPECT_EQ(on_dup, 2);
    } else if (me == 1) {
      int one = 1, two = 2;
      comm.Wait(*comm.Isend(&one, sizeof one, 0, 3));
      dup->Wait(*dup->Isend(&two, sizeof two, 0, 3));
    }
  });
}

}  // namespace
}  // namespace hexiseq::runtime
