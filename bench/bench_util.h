// Helpers shared by the benchmark programs.
#pragma once

#include <benchmark/benchmark.h>

#include <atomic>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace distribute::bench {

// The process's CPU time (every thread's), in seconds.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// "CPU:0" ... "CPU:<n-1>": the devices of an n-replica MirroredStrategy.
inline std::vector<std::string> cpus(int n) {
  std::vector<std::string> devices;
  for (int i = 0; i < n; ++i) devices.push_back("CPU:" + std::to_string(i));
  return devices;
}

// Threads meeting at a counter, each waiting by `Wait::wait()` in a loop.
template <class Wait>
class CountingBarrier {
 public:
  explicit CountingBarrier(int n) : n_(n) {}
  void arrive_and_wait() {
    const int phase = phase_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      phase_.store(phase + 1, std::memory_order_release);
    } else {
      while (phase_.load(std::memory_order_acquire) == phase) Wait::wait();
    }
  }

 private:
  const int n_;
  alignas(64) std::atomic<int> count_{0};
  alignas(64) std::atomic<int> phase_{0};
};

struct PauseWait {
  static void wait() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
};
struct YieldWait {
  static void wait() { std::this_thread::yield(); }
};

// Threads meeting by spinning: the latency floor of any collective between
// two cores (one cache-line hand-off each way).
using SpinBarrier = CountingBarrier<PauseWait>;
// Threads meeting by spinning with sched_yield() in between: the floor of a
// meeting of more threads than cores without sleeping in the kernel (each
// round gives the core to a thread that has not arrived yet).
using YieldBarrier = CountingBarrier<YieldWait>;

// One iteration = one meeting of the benchmark thread and a partner thread
// at `barrier` (the partner arrives exactly as many times).
template <class Barrier>
void meet(benchmark::State& state, Barrier& barrier) {
  const auto meetings = state.max_iterations;
  std::thread partner([&] {
    for (benchmark::IterationCount i = 0; i < meetings; ++i) barrier.arrive_and_wait();
  });
  for (auto _ : state) barrier.arrive_and_wait();
  partner.join();
}

// The same with `partners` partner threads.
template <class Barrier>
void meet_all(benchmark::State& state, Barrier& barrier, int partners) {
  const auto meetings = state.max_iterations;
  std::vector<std::thread> threads;
  for (int p = 0; p < partners; ++p) {
    threads.emplace_back([&] {
      for (benchmark::IterationCount i = 0; i < meetings; ++i) barrier.arrive_and_wait();
    });
  }
  for (auto _ : state) barrier.arrive_and_wait();
  for (auto& t : threads) t.join();
}

}  // namespace distribute::bench
