// The MPI implementation of Comm (OpenMPI): MPI_Isend/MPI_Irecv, MPI_Alltoallv, MPI_Allreduce,
// MPI_Iallreduce, MPI_Allgather, MPI_Barrier, MPI_Comm_split. MPI is initialized with
// MPI_THREAD_FUNNELED (only the rank's main thread calls MPI). Message sizes are limited to INT_MAX
// bytes per message (MPI 3 counts); the distributed attention checks that before it starts.
#pragma once

#include <memory>

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

}  // namespace hexiseq::runtime
