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

// A duplicate of MPI_COMM_WORLD (so the runtime's messages never mix with the application's).
// REQUIRES: MPI is initialized.
std::unique_ptr<Comm> MpiWorldComm();

// A watchdog over MPI_COMM_WORLD, as NCCL's: a thread sends a heartbeat to every peer about once a
// second on a private communicator and watches theirs. When a peer has sent none for
// `timeout_seconds` (it is stopped, hung in the kernel, or dead), the watchdog prints
// "hexiseq: <what>: rank R (phase P): no heartbeat from rank Q for T s ..." on stderr and ends
// the process with exit code 1 (after a short grace, so that every live rank can say it), and
// mpirun then ends the job. A long computation is no stall: the peer's watchdog thread keeps
// beating. Construction and destruction are collective over MPI_COMM_WORLD; the destructor stops
// the thread and drains every heartbeat (also bounded by the timeout).
// REQUIRES: MPI initialized with MPI_THREAD_MULTIPLE (MpiSession does; otherwise the watchdog is
// inactive and says so on stderr). The phase is set by the main thread; thread-safe.
class MpiWatchdog {
 public:
  MpiWatchdog(std::string what, double timeout_seconds);
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  // Names what the main thread is doing now, for the timeout message (a string literal).
  void SetPhase(const char* phase) { phase_.store(phase); }

  struct State;

 private:
  void Run();
  void Fail(const std::string& message);

  std::string what_;
  double timeout_seconds_;
  std::atomic<const char*> phase_{"start"};
  std::atomic<bool> stop_{false};
  std::unique_ptr<State> state_;
  std::thread thread_;
};

}  // namespace hexiseq::runtime
