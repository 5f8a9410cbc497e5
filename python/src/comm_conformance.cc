// The checks mirror tests/runtime/comm_test.cc (written for the in-process transport) and add
// what the process-group transport does differently: helper-thread completion, self messages and
// one-byte stand-ins for empty messages.
#include "comm_conformance.h"

#include <memory>
#include <numeric>

#include "runtime/str_cat.h"

namespace hexiseq::python {
namespace {

using runtime::Comm;
using runtime::Request;
using runtime::RequestPtr;
using runtime::StrCat;

class Failures {
 public:
  Failures(std::vector<std::string>& out, const char* check, int rank)
      : out_(out), check_(check), rank_(rank) {}
  template <class A, class B>
  void ExpectEq(const A& actual, const B& expected, const char* what) {
    if (actual == expected) return;
    out_.push_back(
        StrCat(check_, ": rank ", rank_, ": ", what, " = ", actual, ", expected ", expected));
  }

 private:
  std::vector<std::string>& out_;
  const char* check_;
  int rank_;
};

void MatchingOrder(Comm& comm, Failures& f) {  // 3 ranks
  if (comm.rank() == 0) {
    int a = 0, b = 0, c = 0;
    RequestPtr rc = comm.Irecv(&c, sizeof c, 2, 7);
    RequestPtr ra = comm.Irecv(&a, sizeof a, 1, 5);
    RequestPtr rb = comm.Irecv(&b, sizeof b, 1, 5);
    comm.Wait(*rb);
    comm.Wait(*ra);
    comm.Wait(*rc);
    f.ExpectEq(a, 10, "first message with tag 5");
    f.ExpectEq(b, 11, "second message with tag 5");
    f.ExpectEq(c, 20, "message with tag 7");
  } else if (comm.rank() == 1) {
    int x = 10, y = 11;
    comm.Wait(*comm.Isend(&x, sizeof x, 0, 5));
    comm.Wait(*comm.Isend(&y, sizeof y, 0, 5));
  } else {
    int z = 20;
    comm.Wait(*comm.Isend(&z, sizeof z, 0, 7));
  }
}

void WaitAnyAndTest(Comm& comm, Failures& f) {  // 2 ranks
  if (comm.rank() == 0) {
    int first = 0, second = 0;
    RequestPtr r1 = comm.Irecv(&first, sizeof first, 1, 1);
    RequestPtr r2 = comm.Irecv(&second, sizeof second, 1, 2);
    std::vector<Request*> requests = {r1.get(), r2.get()};
    f.ExpectEq(comm.WaitAny(requests), 1u, "WaitAny index before the barrier");
    f.ExpectEq(second, 2, "message with tag 2");
    f.ExpectEq(comm.Test(*r1), false, "Test of the message sent after the barrier");
    comm.Barrier();
    while (!comm.Test(*r1)) {
    }
    f.ExpectEq(first, 1, "message with tag 1");
  } else {
    int two = 2, one = 1;
    comm.Wait(*comm.Isend(&two, sizeof two, 0, 2));
    comm.Barrier();
    comm.Wait(*comm.Isend(&one, sizeof one, 0, 1));
  }
}

void SelfAndEmptyMessages(Comm& comm, Failures& f) {  // any size
  int to_self = comm.rank() + 40, from_self = 0;
  RequestPtr recv = comm.Irecv(&from_self, sizeof from_self, comm.rank(), 9);
  comm.Wait(*comm.Isend(&to_self, sizeof to_self, comm.rank(), 9));
  comm.Wait(*recv);
  f.ExpectEq(from_self, comm.rank() + 40, "message to self");
  const int next = (comm.rank() + 1) % comm.size();
  const int prev = (comm.rank() + comm.size() - 1) % comm.size();
  RequestPtr empty_recv = comm.Irecv(nullptr, 0, prev, 8);
  RequestPtr empty_send = comm.Isend(nullptr, 0, next, 8);
  std::vector<Request*> both = {empty_recv.get(), empty_send.get()};
  comm.WaitAny(both);
  comm.WaitAny(both);
  f.ExpectEq(empty_recv->done() && empty_send->done(), true, "empty messages done");
}

void Collectives(Comm& comm, Failures& f) {  // 4 ranks
  const int n = comm.size(), me = comm.rank();
  std::vector<int64_t> sc(n), sd(n), rc(n), rd(n);
  int64_t st = 0, rt = 0;
  for (int p = 0; p < n; ++p) {  // rank r sends (r + 1) * p values 100 r + p to rank p
    sc[p] = (me + 1) * p;
    rc[p] = (p + 1) * me;
    sd[p] = st;
    rd[p] = rt;
    st += sc[p];
    rt += rc[p];
  }
  std::vector<float> send(st), recv(rt);
  for (int p = 0; p < n; ++p) std::fill_n(send.begin() + sd[p], sc[p], 100.0f * me + p);
  comm.Alltoallv(send.data(), sc, sd, recv.data(), rc, rd);
  for (int p = 0; p < n; ++p) {
    for (int64_t i = 0; i < rc[p]; ++i) f.ExpectEq(recv[rd[p] + i], 100.0f * p + me, "alltoallv");
  }
  std::vector<double> sum = {1.0 * me, 2.0};
  comm.AllreduceSum(std::span<double>(sum));
  f.ExpectEq(sum[0], n * (n - 1) / 2.0, "allreduce sum of ranks");
  f.ExpectEq(sum[1], 2.0 * n, "allreduce sum of 2");
  std::vector<int> all(n);
  comm.Allgather(&me, sizeof me, all.data());
  for (int p = 0; p < n; ++p) f.ExpectEq(all[p], p, "allgather");
}

void SplitAndDup(Comm& comm, Failures& f) {  // 5 ranks
  const int me = comm.rank();
  const int color = me == 4 ? -1 : me % 2;  // rank 4 joins no group; keys reverse the order
  std::unique_ptr<Comm> sub = comm.Split(color, -me);
  std::unique_ptr<Comm> dup = comm.Dup();
  f.ExpectEq(dup->rank(), me, "dup rank");
  f.ExpectEq(sub == nullptr, me == 4, "in no group");
  if (sub) {
    f.ExpectEq(sub->size(), 2, "split size");
    f.ExpectEq(sub->rank(), me < 2 ? 1 : 0, "split rank (higher old rank first)");
    std::vector<int> both(2);
    sub->Allgather(&me, sizeof me, both.data());
    f.ExpectEq(both[1 - sub->rank()] % 2, me % 2, "split peer parity");
  }
  if (me == 0) {  // the same (source, tag) on world and dup do not mix
    int on_world = 0, on_dup = 0;
    RequestPtr a = dup->Irecv(&on_dup, sizeof on_dup, 1, 3);
    RequestPtr b = comm.Irecv(&on_world, sizeof on_world, 1, 3);
    comm.Wait(*b);
    dup->Wait(*a);
    f.ExpectEq(on_world, 1, "message on world");
    f.ExpectEq(on_dup, 2, "message on dup");
  } else if (me == 1) {
    int one = 1, two = 2;
    comm.Wait(*comm.Isend(&one, sizeof one, 0, 3));
    dup->Wait(*dup->Isend(&two, sizeof two, 0, 3));
  }
}

// Runs `check` on a sub-communicator of the first `ranks` ranks (when the world has them).
void RunOnFirst(Comm& world, int ranks, const char* name, void (*check)(Comm&, Failures&),
                std::vector<std::string>& out) {
  if (world.size() < ranks) return;
  std::unique_ptr<Comm> sub = world.Split(world.rank() < ranks ? 0 : -1, world.rank());
  if (!sub) return;
  Failures failures(out, name, world.rank());
  check(*sub, failures);
}

}  // namespace

std::vector<std::string> CheckCommConformance(Comm& world) {
  std::vector<std::string> failures;
  RunOnFirst(world, 3, "matching order", MatchingOrder, failures);
  RunOnFirst(world, 2, "WaitAny and Test", WaitAnyAndTest, failures);
  RunOnFirst(world, world.size(), "self and empty messages", SelfAndEmptyMessages, failures);
  RunOnFirst(world, 4, "collectives", Collectives, failures);
  RunOnFirst(world, 5, "split and dup", SplitAndDup, failures);
  world.Barrier();
  return failures;
}

}  // namespace hexiseq::python
