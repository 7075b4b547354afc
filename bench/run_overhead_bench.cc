// The cost of Strategy::run of a trivial function, against three bare
// references measured in the same run:
//   BM_StdBarrier   two threads meeting at a std::barrier (spins, then futex)
//   BM_SpinBarrier  two threads meeting at a spinning barrier
//   BM_YieldBarrier/4  four threads (on this 2-core machine: more than
//                   cores) meeting at a barrier that spins with sched_yield,
//                   the floor of BM_Run/4 without sleeping in the kernel
// (one iteration = one meeting, like one run() call); run() after the
// caller worked between runs (BM_RunAfterWork); and the CPU that idle
// replica threads use (BM_IdleReplicaCpu: CPU seconds per wall second of a
// 4-replica strategy left idle, after a run). The counter cpu_us of BM_Run
// and BM_YieldBarrier is the whole process's CPU time per iteration (every
// thread's).
//
// Every run() result is checked (the replicas must return their ids), so a
// broken dispatch cannot look fast.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <ctime>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "distribute/distribute.h"

namespace {

namespace dist = distribute;

using distribute::bench::cpus;
using distribute::bench::meet;
using distribute::bench::process_cpu_seconds;
using distribute::bench::SpinBarrier;

// Sets cpu_us: the process's CPU time per iteration since `cpu0`.
void count_cpu(benchmark::State& state, double cpu0) {
  state.counters["cpu_us"] =
      (process_cpu_seconds() - cpu0) * 1e6 / static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
}

void run_loop(benchmark::State& state, dist::ReplicaExecution execution) {
  const int n = static_cast<int>(state.range(0));
  dist::MirroredStrategy strategy(cpus(n), {}, execution);
  strategy.run([] {});  // the threads started
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    auto ids = strategy.run([] { return dist::get_replica_context()->replica_id_in_sync_group(); });
    if (ids[n - 1] != n - 1) throw std::logic_error("run returned a wrong replica id");
    benchmark::DoNotOptimize(ids);
  }
  count_cpu(state, cpu0);
  state.counters["replicas"] = n;
}
void BM_Run(benchmark::State& state) { run_loop(state, dist::ReplicaExecution::THREADS); }
BENCHMARK(BM_Run)->Arg(1)->Arg(2)->Arg(4)->UseRealTime();
// The replicas as fibers (ReplicaExecution::FIBERS): 4 replicas on 2 cores
// run on 2 threads.
void BM_RunFibers(benchmark::State& state) { run_loop(state, dist::ReplicaExecution::FIBERS); }
BENCHMARK(BM_RunFibers)->Arg(4)->UseRealTime();

void BM_RunVoid(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  dist::MirroredStrategy strategy(cpus(n));
  std::atomic<long> calls{0};
  for (auto _ : state) strategy.run([&] { calls.fetch_add(1, std::memory_order_relaxed); });
  if (calls.load() != static_cast<long>(state.iterations()) * n) throw std::logic_error("lost replica calls");
}
BENCHMARK(BM_RunVoid)->Arg(2)->Arg(4)->UseRealTime();

// run() after the caller worked for G microseconds (arg G; a busy loop on
// the clock, standing for what a training loop does between steps: an
// evaluation, Python code, logging). Time per iteration is the run() call
// alone (manual time): a replica thread that went to sleep during the gap
// costs its wake-up here. cpu_us counts the whole process, the caller's G
// microseconds of work included, so that what the idle replica threads
// spend while waiting for the next run shows as cpu_us - G.
void BM_RunAfterWork(benchmark::State& state) {
  const auto work = std::chrono::microseconds(state.range(0));
  dist::MirroredStrategy strategy(cpus(2));
  strategy.run([] {});
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    const auto work_end = std::chrono::steady_clock::now() + work;
    while (std::chrono::steady_clock::now() < work_end) {
    }
    const auto start = std::chrono::steady_clock::now();
    auto ids = strategy.run([] { return dist::get_replica_context()->replica_id_in_sync_group(); });
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (ids[1] != 1) throw std::logic_error("run returned a wrong replica id");
  }
  count_cpu(state, cpu0);
}
// A fixed count: with manual time the library would otherwise run the
// caller's work until the run() calls alone add up to its minimum time.
BENCHMARK(BM_RunAfterWork)->Arg(0)->Arg(20)->Arg(100)->Arg(200)->Arg(500)->Arg(2000)->Iterations(2000)->UseManualTime();

void BM_StdBarrier(benchmark::State& state) {
  std::barrier<> barrier(2);
  meet(state, barrier);
}
BENCHMARK(BM_StdBarrier)->UseRealTime();

void BM_SpinBarrier(benchmark::State& state) {
  SpinBarrier barrier(2);
  meet(state, barrier);
}
BENCHMARK(BM_SpinBarrier)->UseRealTime();

void BM_YieldBarrier(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  distribute::bench::YieldBarrier barrier(n);
  const double cpu0 = process_cpu_seconds();
  distribute::bench::meet_all(state, barrier, n - 1);
  count_cpu(state, cpu0);
}
BENCHMARK(BM_YieldBarrier)->Arg(4)->UseRealTime();

// CPU used by the replica threads of an idle strategy: after the spin window
// they must sleep (counter cpu_per_wall near 0). Arg 1: the replicas as
// fibers.
void BM_IdleReplicaCpu(benchmark::State& state) {
  dist::MirroredStrategy strategy(cpus(4), {},
                                  state.range(0) == 1 ? dist::ReplicaExecution::FIBERS : dist::ReplicaExecution::THREADS);
  double cpu = 0, wall = 0;
  for (auto _ : state) {
    strategy.run([] {});
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin window
    const double c0 = process_cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cpu += process_cpu_seconds() - c0;
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  }
  state.counters["cpu_per_wall"] = cpu / wall;
}
BENCHMARK(BM_IdleReplicaCpu)->Arg(0)->Arg(1)->Iterations(5)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
