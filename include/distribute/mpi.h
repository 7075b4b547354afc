// MultiWorkerMirroredStrategy on a communicator of the program's. Include
// only in programs that use MPI themselves (it includes <mpi.h>).
#pragma once

#include <mpi.h>

#include "distribute/strategies.h"

namespace distribute {

// `options` with `comm` as the strategy's communicator: the strategy
// duplicates it (the program keeps and frees its own). MPI must be
// initialized with MPI_THREAD_SERIALIZED or higher.
inline MultiWorkerOptions with_communicator(MultiWorkerOptions options, MPI_Comm comm) {
  options.mpi_communicator = comm;
  return options;
}

}  // namespace distribute
