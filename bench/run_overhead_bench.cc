// The cost of Strategy::run of a trivial function, against two bare
// references measured in the same run:
//   BM_StdBarrier   two threads meeting at a std::barrier (spins, then futex)
//   BM_SpinBarrier  two threads meeting at a spinning barrier
// (one iteration = one meeting, like one run() call).
// and the CPU that idle replica threads use (BM_IdleReplicaCpu: CPU seconds
// per wall second of a 4-replica strategy left idle, after a run).
//
// Every run() result is checked (the replicas must return their ids), so a
// broken dispatch cannot look fast.
#include <benchmark/benchmark.h>

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
using distribute::bench::SpinBarrier;

void BM_Run(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  dist::MirroredStrategy strategy(cpus(n));
  for (auto _ : state) {
    auto ids = strategy.run([] { return dist::get_replica_context()->replica_id_in_sync_group(); });
    if (ids[n - 1] != n - 1) throw std::logic_error("run returned a wrong replica id");
    benchmark::DoNotOptimize(ids);
  }
  state.counters["replicas"] = n;
}
BENCHMARK(BM_Run)->Arg(1)->Arg(2)->Arg(4)->UseRealTime();

void BM_RunVoid(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  dist::MirroredStrategy strategy(cpus(n));
  std::atomic<long> calls{0};
  for (auto _ : state) strategy.run([&] { calls.fetch_add(1, std::memory_order_relaxed); });
  if (calls.load() != static_cast<long>(state.iterations()) * n) throw std::logic_error("lost replica calls");
}
BENCHMARK(BM_RunVoid)->Arg(2)->Arg(4)->UseRealTime();

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

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU used by the replica threads of an idle strategy: after the spin window
// they must sleep (counter cpu_per_wall near 0).
void BM_IdleReplicaCpu(benchmark::State& state) {
  dist::MirroredStrategy strategy(cpus(4));
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
BENCHMARK(BM_IdleReplicaCpu)->Iterations(5)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
