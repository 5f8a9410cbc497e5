// --link-slowdown: the parser's errors, and that the decorator holds back messages on a slowed
// link by bytes x delay (queued behind each other on one communicator, sharing the link across
// communicators, without blocking the sender), leaves other pairs alone, keeps its delays in
// sub-communicators, and that its collectives stay correct.
#include "runtime/link_delay.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <numeric>
#include <thread>

namespace hexiseq::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kDelay = 200e-9;  // seconds per byte (200 ns/B, 5 MB/s)
// 50 ms on the slowed link: long enough that "returns within half the wire time" stays clear of
// a descheduled thread on a loaded machine under the sanitizers (a 10 ms wire was crossed there).
constexpr size_t kBytes = 250000;
constexpr double kWire = kDelay * kBytes;
constexpr double kSlack = 0.05;  // scheduling on a loaded machine, seconds

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs fn on every rank of an in-process world whose links are slowed by `delays`.
void RunDelayed(int size, const std::vector<LinkDelay>& delays,
                const std::function<void(Comm&)>& fn) {
  InProcessWorld world(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      std::unique_ptr<Comm> comm = WithLinkDelays(world.WorldComm(rank), delays);
      fn(*comm);
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(LinkDelay, SendIsHeldBackByBytesTimesDelayWithoutBlockingTheSender) {
  RunDelayed(2, {{0, 1, kDelay}}, [](Comm& comm) {
    std::vector<char> buffer(kBytes, comm.rank() == 0 ? 7 : 0);
    const Clock::time_point before_barrier = Clock::now();  // before the sender's Isend
    comm.Barrier();
    const Clock::time_point start = Clock::now();
    if (comm.rank() == 0) {
      RequestPtr send = comm.Isend(buffer.data(), kBytes, 1, 3);
      EXPECT_LT(SecondsSince(start), 0.5 * kWire) << "Isend must not wait for the wire";
      EXPECT_FALSE(comm.Test(*send));
      comm.Wait(*send);
    } else {
      comm.Wait(*comm.Irecv(buffer.data(), kBytes, 0, 3));
      EXPECT_EQ(std::count(buffer.begin(), buffer.end(), 7), static_cast<long>(kBytes));
    }
    // The receiver may leave the barrier after the sender has sent: its lower bound counts from
    // before the barrier (found under ASan, where the receiver woke 56 us after the send).
    EXPECT_GE(SecondsSince(before_barrier), kWire);
    EXPECT_LT(SecondsSince(start), kWire + kSlack);
  });
}

TEST(LinkDelay, MessagesOnOneLinkQueueInOrder) {
  RunDelayed(2, {{0, 1, kDelay}}, [](Comm& comm) {
    std::vector<char> first(kBytes, 1), second(kBytes, 2);
    const Clock::time_point before_barrier = Clock::now();  // before the sender's Isends
    comm.Barrier();
    const Clock::time_point start = Clock::now();
    if (comm.rank() == 1) {
      std::vector<RequestPtr> sends;
      sends.push_back(comm.Isend(first.data(), kBytes, 0, 4));
      sends.push_back(comm.Isend(second.data(), kBytes, 0, 4));
      comm.WaitAll(sends);
    } else {
      std::vector<char> a(kBytes), b(kBytes);
      RequestPtr receive_a = comm.Irecv(a.data(), kBytes, 1, 4);
      RequestPtr receive_b = comm.Irecv(b.data(), kBytes, 1, 4);
      Request* both[] = {receive_a.get(), receive_b.get()};
      EXPECT_EQ(comm.WaitAny(both), 0u);  // the first one arrives first
      EXPECT_LT(SecondsSince(start), 2 * kWire);
      comm.Wait(*receive_b);
      EXPECT_EQ(a[0], 1);
      EXPECT_EQ(b[0], 2);
    }
    EXPECT_GE(SecondsSince(before_barrier), 2 * kWire);  // see the first test
  });
}

TEST(LinkDelay, CommunicatorsShareALinkEqually) {
  // Rank 1 sends a long message (3 wires) on the world and then a short one (1 wire) on another
  // communicator of the same two ranks. Sharing the link, the short one leaves after 2 wires (both
  // at half the rate), the long one after 4; first come, first served, it would wait for 4.
  RunDelayed(2, {{0, 1, kDelay}}, [](Comm& comm) {
    std::unique_ptr<Comm> other = comm.Split(0, comm.rank());
    ASSERT_NE(other, nullptr);
    std::vector<char> long_message(3 * kBytes, 1), short_message(kBytes, 2);
    const Clock::time_point before_barrier = Clock::now();  // before the sender's Isends
    comm.Barrier();
    const Clock::time_point start = Clock::now();
    if (comm.rank() == 1) {
      RequestPtr long_send = comm.Isend(long_message.data(), long_message.size(), 0, 6);
      RequestPtr short_send = other->Isend(short_message.data(), short_message.size(), 0, 6);
      other->Wait(*short_send);
      comm.Wait(*long_send);
    } else {
      std::vector<char> a(3 * kBytes), b(kBytes);
      RequestPtr receive_long = comm.Irecv(a.data(), a.size(), 1, 6);
      other->Wait(*other->Irecv(b.data(), b.size(), 1, 6));
      EXPECT_GE(SecondsSince(before_barrier), 2 * kWire);
      EXPECT_LT(SecondsSince(start), 3 * kWire) << "the short message waited for the long one";
      comm.Wait(*receive_long);
      EXPECT_GE(SecondsSince(before_barrier), 4 * kWire);
      EXPECT_LT(SecondsSince(start), 4 * kWire + kSlack);
      EXPECT_EQ(a[0], 1);
      EXPECT_EQ(b[0], 2);
    }
  });
}

TEST(LinkDelay, OtherPairsAndSubCommunicatorsKeepTheirOwnLinks) {
  // 3 ranks, only the link 1-2 is slowed; the sub-communicator of ranks 1 and 2 keeps it.
  RunDelayed(3, {{1, 2, kDelay}}, [](Comm& comm) {
    std::vector<char> buffer(kBytes, 5);
    comm.Barrier();
    const Clock::time_point start = Clock::now();
    if (comm.rank() == 0) comm.Wait(*comm.Isend(buffer.data(), kBytes, 1, 1));
    if (comm.rank() == 1) comm.Wait(*comm.Irecv(buffer.data(), kBytes, 0, 1));
    if (comm.rank() < 2) {
      EXPECT_LT(SecondsSince(start), 0.5 * kWire) << "0-1 is not slowed";
    }
    std::unique_ptr<Comm> sub = comm.Split(comm.rank() == 0 ? 0 : 1, comm.rank());
    ASSERT_NE(sub, nullptr);
    const Clock::time_point before_barrier = Clock::now();  // before rank 1's Isend
    sub->Barrier();
    if (comm.rank() == 1) sub->Wait(*sub->Isend(buffer.data(), kBytes, 1, 2));
    if (comm.rank() == 2) sub->Wait(*sub->Irecv(buffer.data(), kBytes, 0, 2));
    if (comm.rank() > 0) {
      EXPECT_GE(SecondsSince(before_barrier), kWire) << "world ranks 1-2 are slowed";
    }
  });
}

TEST(LinkDelay, CollectivesAreCorrectAndSlowed) {
  RunDelayed(2, {{0, 1, kDelay}}, [](Comm& comm) {
    const int me = comm.rank();
    // All-gather of kBytes per rank: it crosses the slowed link.
    std::vector<char> mine(kBytes, static_cast<char>(10 + me)), all(2 * kBytes);
    Clock::time_point start = Clock::now();
    comm.Allgather(mine.data(), kBytes, all.data());
    EXPECT_GE(SecondsSince(start), kWire);
    EXPECT_EQ(all[0], 10);
    EXPECT_EQ(all[kBytes], 11);
    // All-to-all-v: rank r sends r * 10 + peer to every peer (one float; own block kept).
    std::vector<float> send = {me * 10.0f, me * 10.0f + 1}, recv(2);
    const std::vector<int64_t> counts = {1, 1}, displs = {0, 1};
    comm.Alltoallv(send.data(), counts, displs, recv.data(), counts, displs);
    EXPECT_EQ(recv, (std::vector<float>{0.0f + me, 10.0f + me}));
    // All-reduces, blocking and not.
    std::vector<double> values = {1.0 + me, 2.0};
    comm.AllreduceSum(std::span<double>(values));
    EXPECT_EQ(values, (std::vector<double>{3.0, 4.0}));
    std::vector<float> floats(kBytes / sizeof(float), 1.0f + me);
    start = Clock::now();
    RequestPtr sum = comm.IallreduceSum(std::span<float>(floats));
    EXPECT_LT(SecondsSince(start), 0.5 * kWire);
    comm.Wait(*sum);
    EXPECT_GE(SecondsSince(start), kWire);
    EXPECT_EQ(floats.front(), 3.0f);
    EXPECT_EQ(floats.back(), 3.0f);
    // Reduce-scatter: each rank sends the other half the floats across the slowed link.
    const std::vector<int64_t> halves(2, static_cast<int64_t>(floats.size() / 2));
    std::vector<float> half(floats.size() / 2);
    std::fill(floats.begin(), floats.end(), 1.0f + me);
    start = Clock::now();
    RequestPtr scatter = comm.IreduceScatterSum(floats.data(), halves, half.data());
    EXPECT_LT(SecondsSince(start), 0.4 * kWire);
    comm.Wait(*scatter);
    EXPECT_GE(SecondsSince(start), 0.5 * kWire);
    EXPECT_EQ(half, std::vector<float>(half.size(), 3.0f));
    // Nonblocking all-gather of kBytes per rank.
    std::vector<char> gathered(2 * kBytes);
    start = Clock::now();
    RequestPtr gather = comm.IallgatherBytes(mine.data(), kBytes, gathered.data());
    EXPECT_LT(SecondsSince(start), 0.4 * kWire);
    comm.Wait(*gather);
    EXPECT_GE(SecondsSince(start), kWire);
    EXPECT_EQ(gathered, all);
  });
}

TEST(LinkDelay, ParsesPairsInNanosecondsPerByte) {
  auto delays = ParseLinkSlowdown("1-0=10,2-3=2.5", 4);
  ASSERT_TRUE(delays.has_value()) << delays.error().message;
  ASSERT_EQ(delays->size(), 2u);
  EXPECT_EQ((*delays)[0].a, 0);
  EXPECT_EQ((*delays)[0].b, 1);
  EXPECT_DOUBLE_EQ((*delays)[0].seconds_per_byte, 10e-9);
  EXPECT_DOUBLE_EQ((*delays)[1].seconds_per_byte, 2.5e-9);
  EXPECT_TRUE(ParseLinkSlowdown("5-9=1", 0).has_value());  // syntax only
}

void ExpectError(const std::string& text, int ranks, const std::string& part) {
  auto delays = ParseLinkSlowdown(text, ranks);
  ASSERT_FALSE(delays.has_value()) << text;
  EXPECT_EQ(delays.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(delays.error().message.find("--link-slowdown"), std::string::npos)
      << delays.error().message;
  EXPECT_NE(delays.error().message.find(part), std::string::npos) << delays.error().message;
}

TEST(LinkDelay, BadInputsAreClearErrors) {
  ExpectError("0-1=0", 2, "NS = '0': must be a number in (0, 1e+06]");
  ExpectError("0-1=-3", 2, "NS = '-3'");
  ExpectError("0-1=slow", 2, "NS = 'slow'");
  ExpectError("0-1=1e9", 2, "must be a number in (0, 1e+06]");
  ExpectError("0-0=1", 2, "A = B = 0");
  ExpectError("0-2=1", 2, "RANK = 2: this run has 2 rank(s)");
  ExpectError("x-1=1", 2, "RANK 'x' is not a whole number");
  ExpectError("01=1", 2, "not A-B=NS");
  ExpectError("0-1", 2, "not A-B=NS");
  ExpectError("0-1=1,1-0=2", 2, "the link 0-1 is given twice");
  ExpectError("", 2, "empty");
  EXPECT_EQ(LinkSlowdownSyntaxError("0-1=10"), "");
  EXPECT_NE(LinkSlowdownSyntaxError("0-1=0").find("must be a number"), std::string::npos);
}

}  // namespace
}  // namespace hexiseq::runtime
