// Cross-worker all_reduce of MultiWorkerMirroredStrategy (one replica per
// worker) against raw MPI_Allreduce, measured interleaved in the same
// processes: for every size, repetitions alternate a batch of
// MPI_Allreduce(MPI_IN_PLACE, float32 SUM) calls on MPI_COMM_WORLD with a
// batch of ReplicaContext::all_reduce(SUM) calls (a const tensor: the result
// in a new buffer) and a batch of in-place calls of a block from
// Strategy::experimental_allocate_shared (over the host's shared memory:
// summed straight from every worker's block), all inside one run(). A
// batch's time per call is the slowest rank's; the figure is the median over
// repetitions. Results are checked once per size.
//
// Run (bench/run_multi_worker.sh does it):
//   mpirun -np 2 build/release/bench/multi_worker_bench [bytes...]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

#include "distribute/distribute.h"

namespace {

namespace dist = distribute;

constexpr int kRepetitions = 9;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of `calls` calls of `body` on the slowest rank.
template <class F>
double batch(int calls, F&& body) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < calls; ++i) body();
  double t = (MPI_Wtime() - t0) / calls;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  dist::MultiWorkerMirroredStrategy strategy;  // initializes MPI (SERIALIZED)
  const int rank = strategy.worker_index();
  const int size = strategy.num_workers();
  if (rank == 0) {
    std::printf("cross-worker all_reduce, %d workers x 1 replica, float32 SUM; medians of %d interleaved batches\n",
                size, kRepetitions);
    std::printf("%-10s %14s %14s %14s %10s %10s\n", "size", "MPI_Allreduce", "all_reduce", "shared", "overhead",
                "shared");
    std::fflush(stdout);
  }
  // Sizes in bytes from the command line, else 4 KiB, 256 KiB, 4 MiB, 64 MiB.
  std::vector<std::int64_t> sizes{4LL << 10, 256LL << 10, 4LL << 20, 64LL << 20};
  if (argc > 1) sizes.clear();
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  for (std::int64_t bytes : sizes) {
    const std::int64_t count = bytes / 4;
    const int max_calls = bytes <= (256 << 10) ? 2000 : bytes <= (4 << 20) ? 50 : 5;
    std::vector<float> raw(static_cast<std::size_t>(count), 1.f);
    const dist::Tensor input(std::vector<float>(static_cast<std::size_t>(count), static_cast<float>(rank + 1)),
                             dist::Shape{count});
    std::vector<double> mpi_times, lib_times, shared_times;
    const std::shared_ptr<std::byte> block = strategy.experimental_allocate_shared(static_cast<std::size_t>(bytes))[0];
    std::fill_n(reinterpret_cast<float*>(block.get()), count, static_cast<float>(rank + 1));
    auto in_place = [&](dist::ReplicaContext* ctx) {
      // A wrap of its own (the donated tensor's only owner), O(1).
      dist::Tensor t = dist::Tensor::wrap(dist::DType::kFloat32, dist::Shape{count}, block.get(),
                                          std::make_shared<std::shared_ptr<std::byte>>(block), /*writable=*/true);
      t = ctx->all_reduce(dist::ReduceOp::SUM, std::move(t));
      return t;
    };
    strategy.run([&] {
      dist::ReplicaContext* ctx = dist::get_replica_context();
      const dist::Tensor check = ctx->all_reduce(dist::ReduceOp::SUM, input);
      if (check.data<float>()[static_cast<std::size_t>(count - 1)] != static_cast<float>(size * (size + 1) / 2)) {
        throw std::logic_error("wrong all_reduce result");
      }
      const dist::Tensor summed = in_place(ctx);
      if (summed.bytes().data() != block.get() ||
          summed.data<float>()[static_cast<std::size_t>(count - 1)] != static_cast<float>(size * (size + 1) / 2)) {
        throw std::logic_error("wrong in-place all_reduce result");
      }
      // Zeros from here on: sums that stay finite and the same every call.
      std::fill_n(reinterpret_cast<float*>(block.get()), count, 0.f);
      // At most max_calls a batch, fewer where one call is slow (a TCP link:
      // bench/run_net_bench.sh): a batch of about 50 ms, at least 3 calls.
      const double one = batch(1, [&] { ctx->all_reduce(dist::ReduceOp::SUM, input); });
      const int calls = std::clamp(static_cast<int>(0.05 / std::max(one, 1e-9)), 3, max_calls);
      for (int rep = 0; rep < kRepetitions; ++rep) {
        mpi_times.push_back(batch(calls, [&] {
          MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }));
        lib_times.push_back(batch(calls, [&] { ctx->all_reduce(dist::ReduceOp::SUM, input); }));
        shared_times.push_back(batch(calls, [&] { in_place(ctx); }));
      }
    });
    if (rank == 0) {
      const double m = median(mpi_times), l = median(lib_times), sh = median(shared_times);
      std::printf("%-10lld %11.1f us %11.1f us %11.1f us %9.2fx %9.2fx\n", static_cast<long long>(bytes), m * 1e6,
                  l * 1e6, sh * 1e6, l / m, sh / m);
      std::fflush(stdout);
    }
  }
  return 0;
}
