// How a MultiWorkerMirroredStrategy finds its place (run by CTest under
// mpirun -np 2, label mpi):
//   funneled  MPI initialized by the program with MPI_THREAD_FUNNELED: the
//             strategy raises FailedPreconditionError naming the thread level
//             it needs;
//   split     MPI initialized with MPI_THREAD_MULTIPLE and MPI_COMM_WORLD
//             split into one communicator per rank: a strategy on it has one
//             worker (the program's communicator is used, not the world);
//   tf_config TF_CONFIG (set per rank by mpirun) with a chief and a worker:
//             rank 0 is the chief, rank 1 not, 2 workers;
//   tf_config_mismatch  TF_CONFIG whose task ids disagree with the MPI ranks:
//             InvalidArgumentError naming both.
// Prints "PASS <mode>" and returns 0 when the behaviour is as described.
#include <mpi.h>

#include <iostream>
#include <string>

#include "distribute/distribute.h"
#include "distribute/mpi.h"

namespace dist = distribute;

namespace {

bool funneled() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  bool ok = false;
  try {
    dist::MultiWorkerMirroredStrategy strategy;
    std::cout << "no error with MPI_THREAD_FUNNELED\n";
  } catch (const dist::FailedPreconditionError& e) {
    ok = std::string(e.what()).find("MPI_THREAD_SERIALIZED") != std::string::npos;
    std::cout << e.what() << "\n";
  }
  MPI_Finalize();
  return ok;
}

bool split() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm mine = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &mine);
  bool ok = false;
  {
    dist::MultiWorkerMirroredStrategy strategy(dist::with_communicator({}, mine));
    auto sum = strategy.run([] { return dist::get_replica_context()->all_reduce(dist::ReduceOp::SUM, dist::Tensor{3.f}); });
    ok = strategy.num_workers() == 1 && strategy.worker_index() == 0 && sum[0] == dist::Tensor{3.f};
    std::cout << "rank " << rank << ": " << strategy.num_workers() << " worker(s), sum " << sum[0] << "\n";
  }
  MPI_Comm_free(&mine);
  MPI_Finalize();
  return ok;
}

bool tf_config() {
  dist::MultiWorkerMirroredStrategy strategy;
  const int w = strategy.worker_index();
  std::cout << "worker " << w << ": chief " << strategy.is_chief() << ", " << strategy.num_workers() << " workers\n";
  return strategy.num_workers() == 2 && strategy.is_chief() == (w == 0);
}

bool tf_config_mismatch() {
  try {
    dist::MultiWorkerMirroredStrategy strategy;
  } catch (const dist::InvalidArgumentError& e) {
    std::cout << e.what() << "\n";
    const std::string what = e.what();
    return what.find("TF_CONFIG") != std::string::npos && what.find("rank") != std::string::npos;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool ok = mode == "funneled"             ? funneled()
                  : mode == "split"              ? split()
                  : mode == "tf_config"          ? tf_config()
                  : mode == "tf_config_mismatch" ? tf_config_mismatch()
                                                 : false;
  std::cout << (ok ? "PASS " : "FAIL ") << mode << std::endl;
  return ok ? 0 : 1;
}
