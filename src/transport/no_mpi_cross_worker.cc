// make_mpi_cross_worker for builds without MPI.
#include "distribute/errors.h"
#include "transport/cross_worker.h"

namespace distribute::internal {

std::shared_ptr<CrossWorker> make_mpi_cross_worker(const ChannelOptions& /*options*/) {
  throw UnimplementedError(
      "MultiWorkerMirroredStrategy: this build of distribute has no MPI; install an MPI (Debian: openmpi-bin "
      "libopenmpi-dev, as scripts/setup.sh does, or MPICH) and configure again");
}

}  // namespace distribute::internal
