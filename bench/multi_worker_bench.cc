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
// --in-process adds the reference issue 14 names, measured in the same job:
// after each repetition's batches, worker 0 runs a batch of the same
// all_reduce (a const tensor) between 2 replica threads of a local
// MirroredStrategy, while the other workers sleep; the ratio printed is the
// median over repetitions of each repetition's shared / in-process times,
// so the host's drift between two programs minutes apart stays out of it.
//
// Run (bench/run_multi_worker.sh does it):
//   mpirun -np 2 build/release/bench/multi_worker_bench [--in-process] [bytes...]
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
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

// A barrier of every worker that sleeps between its polls, so that a
// waiting worker leaves the cores to worker 0's in-process batch.
void sleeping_barrier() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// mpirun binds each worker to a core (2 workers or fewer: --bind-to core),
// and threads inherit their creator's binding: worker 0's in-process
// replicas get the whole machine while they run, as a program of its own
// would, and its own binding back afterwards.
class WholeMachine {
 public:
  WholeMachine() {
    sched_getaffinity(0, sizeof(saved_), &saved_);
    cpu_set_t all;
    CPU_ZERO(&all);
    for (std::size_t cpu = 0; cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &all);
    sched_setaffinity(0, sizeof(all), &all);  // the kernel keeps the online ones
  }
  ~WholeMachine() { sched_setaffinity(0, sizeof(saved_), &saved_); }
  WholeMachine(const WholeMachine&) = delete;
  WholeMachine& operator=(const WholeMachine&) = delete;

 private:
  cpu_set_t saved_;
};

}  // namespace

int main(int argc, char** argv) {
  dist::MultiWorkerMirroredStrategy strategy;  // initializes MPI (SERIALIZED)
  const int rank = strategy.worker_index();
  const int size = strategy.num_workers();
  // Sizes in bytes from the command line, else 4 KiB, 256 KiB, 4 MiB, 64 MiB.
  std::vector<std::int64_t> sizes;
  bool in_process = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--in-process") {
      in_process = true;
    } else if (const long long bytes = std::atoll(argv[i]); bytes >= 4 && bytes % 4 == 0) {
      sizes.push_back(bytes);
    } else {
      if (rank == 0)
        std::fprintf(stderr, "expected --in-process or a size in bytes (a multiple of 4), got '%s'\n", argv[i]);
      return 2;
    }
  }
  if (sizes.empty()) sizes = {4LL << 10, 256LL << 10, 4LL << 20, 64LL << 20};
  // Worker 0's 2 local replica threads for the in-process reference.
  std::optional<dist::MirroredStrategy> local;
  if (in_process && rank == 0) {
    const WholeMachine unbound;  // for the replica thread the strategy starts
    local.emplace(std::vector<std::string>{"CPU:0", "CPU:1"});
  }
  if (rank == 0) {
    std::printf("cross-worker all_reduce, %d workers x 1 replica, float32 SUM; medians of %d interleaved batches\n",
                size, kRepetitions);
    std::printf("%-10s %14s %14s %14s %10s %10s", "size", "MPI_Allreduce", "all_reduce", "shared", "overhead",
                "shared");
    if (in_process) std::printf(" %14s %14s", "in process", "shared / in");
    std::printf("\n");
    std::fflush(stdout);
  }
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
    int calls = 0;
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
      calls = std::clamp(static_cast<int>(0.05 / std::max(one, 1e-9)), 3, max_calls);
    });
    // Worker 0's in-process inputs, each made on its replica's thread.
    std::vector<std::optional<dist::Tensor>> local_inputs(2);
    std::vector<double> local_times, shared_ratios;
    for (int rep = 0; rep < kRepetitions; ++rep) {
      strategy.run([&] {
        dist::ReplicaContext* ctx = dist::get_replica_context();
        mpi_times.push_back(batch(calls, [&] {
          MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }));
        lib_times.push_back(batch(calls, [&] { ctx->all_reduce(dist::ReduceOp::SUM, input); }));
        shared_times.push_back(batch(calls, [&] { in_place(ctx); }));
      });
      if (!in_process) continue;
      if (rank == 0) {
        double t = 0;
        const WholeMachine unbound;  // for replica 0, this thread
        local->run([&] {
          dist::ReplicaContext* ctx = dist::get_replica_context();
          const int r = ctx->replica_id_in_sync_group();
          std::optional<dist::Tensor>& x = local_inputs[static_cast<std::size_t>(r)];
          if (!x)
            x.emplace(std::vector<float>(static_cast<std::size_t>(count), static_cast<float>(r + 1)),
                      dist::Shape{count});
          // Untimed calls first: the pooled output buffers' pages, and both
          // replicas in the loop before the clock starts.
          for (int i = 0; i < 3; ++i) ctx->all_reduce(dist::ReduceOp::SUM, *x);
          const double t0 = MPI_Wtime();
          for (int i = 0; i < calls; ++i) {
            const dist::Tensor sum = ctx->all_reduce(dist::ReduceOp::SUM, *x);
            if (i == 0 && sum.data<float>()[static_cast<std::size_t>(count - 1)] != 3.f) {
              throw std::logic_error("wrong in-process all_reduce result");
            }
          }
          if (r == 0) t = (MPI_Wtime() - t0) / calls;
        });
        local_times.push_back(t);
        shared_ratios.push_back(shared_times.back() / t);
      }
      sleeping_barrier();
    }
    if (rank == 0) {
      const double m = median(mpi_times), l = median(lib_times), sh = median(shared_times);
      std::printf("%-10lld %11.1f us %11.1f us %11.1f us %9.2fx %9.2fx", static_cast<long long>(bytes), m * 1e6,
                  l * 1e6, sh * 1e6, l / m, sh / m);
      if (in_process) std::printf(" %11.1f us %13.2fx", median(local_times) * 1e6, median(shared_ratios));
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
