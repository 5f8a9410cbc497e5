// The MPI implementation of Comm (OpenMPI): MPI_Isend/MPI_Irecv, MPI_Alltoallv, MPI_Allreduce,
// MPI_Iallreduce, MPI_Allgather, MPI_Barrier, MPI_Comm_split. MPI is initialized with
// MPI_THREAD_MULTIPLE: the rank's main thread makes every Comm call; an MpiWatchdog's thread uses
// its own communicator. Message sizes are limited to INT_MAX bytes per message (MPI 3 counts); the
// distributed attention checks that before it starts.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "runtime/comm.h"

namespace hexiseq::runtime {

// Initializes MPI if nobody has (a process started without mpirun becomes a one-rank world) and
// finalizes it on destruction if it initialized it. Create one before any MpiWorldComm() and
// destroy it after every Comm.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool finalize_ = false;
};

// How this process's blocking communication calls wait. kSpin: as MPI does (OpenMPI busy-polls;
// the lowest latency). kSleep: polls for 50 us, then sleeps 50 us between polls (collectives run
// as their non-blocking forms), so that a waiting rank frees its core for ranks that share it: a
// polling rank takes time slices from a computing one, which a separate device does not. The
// default is kSpin; `--comm-wait` (train, attn-check, calibrate) sets it.
enum class WaitMode { kSpin, kSleep };
void SetWaitMode(WaitMode mode);
WaitMode CurrentWaitMode();

// A duplicate of MPI_COMM_WORLD (so the runtime's messages never mix with the application's).
// REQUIRES: MPI is initialized.
std::unique_ptr<Comm> MpiWorldComm();

// A watchdog over MPI_COMM_WORLD, as NCCL's: a thread sends a heartbeat to every peer about once a
// second on a private communicator and watches theirs. Each heartbeat carries the sender's phase
// and its progress (how many times SetPhase was called). Two rules, each ending the process with
// exit code 1 after a message on stderr (and a short grace, so that every rank can say it; mpirun
// then ends the job):
//  - a peer sent no heartbeat for `timeout_seconds` (it is stopped, hung in the kernel, or dead):
//    "hexiseq: <what>: rank R (phase P): no heartbeat from rank Q for T s ...";
//  - every rank is alive and waiting inside a blocking communication call, and none made progress
//    (entered a phase or completed a call) for `timeout_seconds`: a deadlock. "... no progress for
//    T s while every rank is alive and waiting in communication (a deadlock): rank Q is behind, in
//    phase X; ranks ... wait in phase Y", the ranks grouped by phase and progress, the least
//    progressed named behind;
//  - some ranks wait in communication while the others compute, and none made progress for
//    `timeout_seconds`: a stuck computation (or one longer than the timeout). "... no progress
//    for T s while rank Q computes in phase X and every other rank waits in communication: ranks
//    ... wait in phase Y".
// Construction and destruction are collective over MPI_COMM_WORLD; the destructor stops the
// thread and drains every heartbeat (also bounded by the timeout).
// Test hook: the environment variable HEXISEQ_TEST_STALL=RANK:PHASE makes that rank wait forever
// for a message nobody sends when it enters that phase (its watchdog keeps beating), so the
// others block in their next collective: the deadlock of the second rule. RANK:PHASE:compute
// makes it compute forever instead (the third rule).
// REQUIRES: MPI initialized with MPI_THREAD_MULTIPLE (MpiSession does; otherwise the watchdog is
// inactive and says so on stderr). The phase is set by the main thread; thread-safe.
class MpiWatchdog {
 public:
  MpiWatchdog(std::string what, double timeout_seconds);
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  // Names what the main thread is doing now (a string literal) and counts as progress.
  void SetPhase(const char* phase);

  struct State;

 private:
  void Run();
  // Ends the process after "hexiseq: <what>: rank R (phase P): <message> (rule: --timeout; hint)".
  void Fail(const std::string& message, const std::string& hint);
  std::string DescribeStall(double seconds) const;
  std::string DescribeStuckCompute(double seconds) const;

  std::string what_;
  double timeout_seconds_;
  std::atomic<const char*> phase_{"start"};
  std::atomic<int64_t> progress_{0};
  int stall_rank_ = -1;           // HEXISEQ_TEST_STALL
  std::string stall_phase_;       // HEXISEQ_TEST_STALL
  bool stall_computing_ = false;  // HEXISEQ_TEST_STALL's ":compute"
  std::atomic<bool> stop_{false};
  std::unique_ptr<State> state_;
  std::thread thread_;
};

}  // namespace hexiseq::runtime
