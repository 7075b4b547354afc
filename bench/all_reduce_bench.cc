// all_reduce SUM of float32 between in-process replicas, against references
// measured in the same run:
//   BM_SpinMeeting        two threads meeting at a spinning barrier (the
//                         latency floor of a collective between two cores)
//   BM_YieldMeeting/4     four threads meeting at a barrier that spins with
//                         sched_yield (the floor of a 4-replica all_reduce
//                         on 2 cores that does not sleep in the kernel)
//   BM_Copy/S             one thread copying S bytes (STREAM-like copy)
//   BM_TwoThreadInPlace/S two threads, each summing its half of two S-byte
//                         buffers and writing the result into both (the
//                         in-place reference the issue names)
//   BM_TwoThreadShared/S  the same sums written once, into a third buffer
//                         (the bare form of the library's shared result)
//   BM_AllReduce/S/N      ReplicaContext::all_reduce of an S-byte tensor on
//                         N replicas, inside one run() per iteration batch
//   BM_AllReduceInPlace/S/N  the same with the tensor handed over:
//                         x = all_reduce(SUM, std::move(x)) on every replica
//                         (donation: from 64 KiB up, reduced in place)
//   BM_GradientStep/S     a training step's data flow on 2 replicas: each
//                         writes its whole S-byte buffer (as a backward
//                         pass writes its gradient), hands it to an
//                         in-place all_reduce (wrapped, donated), then reads
//                         the whole sum (as an optimizer does). Half of
//                         every buffer crosses between the cores each way,
//                         which BM_AllReduceInPlace (inputs already where
//                         the sums were written) never shows
//   BM_TwoThreadGradientStep/S  the same data flow without the library: two
//                         bare threads, two spinning barriers a step, each
//                         half summed in place by the reduction kernel the
//                         library uses (the reference for the above)
//   BM_ReduceKernel/<isa>/S  one thread running the library's in-place
//                         reduction kernel for <isa> (collectives/
//                         reduce_kernels.h: baseline, avx2, avx512) over
//                         two S-byte buffers: the arithmetic of a 2-replica
//                         in-place all_reduce without the threads (the
//                         all_reduce itself uses the fastest variant, or
//                         DISTRIBUTE_REDUCE_ISA's)
// Time per iteration is one all_reduce; bytes_per_second counts S (one
// replica's tensor: the algorithm bandwidth); cpu_us (BM_AllReduce,
// BM_YieldMeeting) is the whole process's CPU time per iteration, every
// thread's. Results are checked.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "core/reduce_kernels.h"
#include "distribute/distribute.h"

namespace {

namespace dist = distribute;

using distribute::bench::cpus;

constexpr int kWarmup = 4;

void BM_Copy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

// Two threads, each applying `half` to its half of [0, count) once per
// iteration of the timed loop, meeting at a barrier after each.
template <class Half>
void run_halves(benchmark::State& state, std::size_t count, Half& half) {
  std::barrier<> meet(2);
  const auto iterations = state.max_iterations;
  std::thread partner([&] {
    for (benchmark::IterationCount i = 0; i < iterations; ++i) {
      half(count / 2, count);
      meet.arrive_and_wait();
    }
  });
  for (auto _ : state) {
    half(0, count / 2);
    meet.arrive_and_wait();
  }
  partner.join();
}

void BM_TwoThreadInPlace(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  std::vector<float> a(count, 1.f), b(count, 2.f);
  auto half = [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) {
      const float s = a[i] + b[i];
      a[i] = s;
      b[i] = s;
    }
  };
  run_halves(state, count, half);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_TwoThreadShared(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  std::vector<float> a(count, 1.f), b(count, 2.f), c(count, 0.f);
  auto half = [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) c[i] = a[i] + b[i];
  };
  run_halves(state, count, half);
  if (c[0] != 3.f || c[count - 1] != 3.f) state.SkipWithError("wrong sum");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_ReduceKernel(benchmark::State& state, distribute::internal::ReduceIsa isa) {
  namespace di = distribute::internal;
  const std::vector<di::ReduceIsa> isas = di::available_reduce_isas();
  if (std::find(isas.begin(), isas.end(), isa) == isas.end()) {
    state.SkipWithError((std::string("this CPU cannot run the ") + di::reduce_isa_name(isa) + " kernels").c_str());
    return;
  }
  const auto count = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  std::vector<float> a(count, 0.f), b(count, 0.f);
  float* ios[2] = {a.data(), b.data()};
  const auto& kernels = di::reduce_kernels<float>(isa);
  for (auto _ : state) {
    kernels.in_place(std::span<float* const>(ios), 0, count, false);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

// Two threads meeting at a spinning barrier, one meeting per iteration: the
// floor of a small all_reduce's latency on this machine, in the same run.
void BM_SpinMeeting(benchmark::State& state) {
  distribute::bench::SpinBarrier barrier(2);
  distribute::bench::meet(state, barrier);
}

// Four threads meeting at a barrier that spins with sched_yield: on 2 cores
// (more threads than cores) the floor of a 4-replica all_reduce that does
// not sleep in the kernel. cpu_us: the process's CPU time per meeting.
void BM_YieldMeeting(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  distribute::bench::YieldBarrier barrier(n);
  const double cpu0 = distribute::bench::process_cpu_seconds();
  distribute::bench::meet_all(state, barrier, n - 1);
  state.counters["cpu_us"] = (distribute::bench::process_cpu_seconds() - cpu0) * 1e6 /
                             static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
}

void all_reduce_loop(benchmark::State& state, dist::ReplicaExecution execution) {
  const auto count = static_cast<std::int64_t>(state.range(0)) / static_cast<std::int64_t>(sizeof(float));
  const int n = static_cast<int>(state.range(1));
  dist::MirroredStrategy strategy(cpus(n), {}, execution);
  const float expected = static_cast<float>(n * (n + 1) / 2);
  // Run the timed loop inside one run() so that each iteration is one
  // all_reduce (replica 0 drives the benchmark loop, the others follow the
  // same count).
  const auto iterations = state.max_iterations;
  bool first = true;
  strategy.run([&] {
        dist::ReplicaContext* ctx = dist::get_replica_context();
        // Each replica makes its own input, as it computes its own gradients
        // (on its thread, in its allocator arena).
        const dist::Tensor x(
            std::vector<float>(static_cast<std::size_t>(count), static_cast<float>(ctx->replica_id_in_sync_group() + 1)),
            dist::Shape{count});
        // Warm-up, untimed: the first calls of a fresh strategy fault in the
        // pages of its pooled output buffers, which a training loop pays once.
        for (int i = 0; i < kWarmup; ++i) ctx->all_reduce(dist::ReduceOp::SUM, x);
        if (ctx->replica_id_in_sync_group() == 0) {
          const double cpu0 = distribute::bench::process_cpu_seconds();
          for (auto _ : state) {
            dist::Tensor sum = ctx->all_reduce(dist::ReduceOp::SUM, x);
            if (first && sum.data<float>()[static_cast<std::size_t>(count - 1)] != expected) {
              throw std::logic_error("wrong all_reduce result");
            }
            first = false;
          }
          // Every replica's CPU time per call (the process's; the others
          // run the same calls alongside).
          state.counters["cpu_us"] = (distribute::bench::process_cpu_seconds() - cpu0) * 1e6 /
                                     static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
        } else {
          for (benchmark::IterationCount i = 0; i < iterations; ++i) ctx->all_reduce(dist::ReduceOp::SUM, x);
        }
      });
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void BM_AllReduce(benchmark::State& state) { all_reduce_loop(state, dist::ReplicaExecution::THREADS); }
// The same with the replicas as fibers (ReplicaExecution::FIBERS): with
// more replicas than cores, one thread per core.
void BM_AllReduceFibers(benchmark::State& state) { all_reduce_loop(state, dist::ReplicaExecution::FIBERS); }

// Each replica's x grows by a factor N per call; elements hold (r + 1) * p
// with p = 1 + i % 7 at the start, so every element's value after k calls
// is known: replayed below with the same float additions in the same order
// (exact while it fits, then inf on every replica alike).
float in_place_expected(int n, float p, std::int64_t calls) {
  std::vector<float> e(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) e[static_cast<std::size_t>(q)] = static_cast<float>(q + 1) * p;
  for (std::int64_t k = 0; k < calls; ++k) {
    float sum = e[0];
    for (std::size_t q = 1; q < e.size(); ++q) sum += e[q];
    std::fill(e.begin(), e.end(), sum);
  }
  return e[0];
}

void BM_AllReduceInPlace(benchmark::State& state) {
  const auto count = static_cast<std::int64_t>(state.range(0)) / static_cast<std::int64_t>(sizeof(float));
  const int n = static_cast<int>(state.range(1));
  dist::MirroredStrategy strategy(cpus(n));
  const auto iterations = state.max_iterations;
  // Per replica: empty when the result is right and x never left its
  // buffer (from 64 KiB up), else the first problem found.
  std::vector<std::string> problems(static_cast<std::size_t>(n));
  strategy.run([&] {
        dist::ReplicaContext* ctx = dist::get_replica_context();
        const int r = ctx->replica_id_in_sync_group();
        std::string& problem = problems[static_cast<std::size_t>(r)];
        std::vector<float> v(static_cast<std::size_t>(count));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r + 1) * static_cast<float>(1 + i % 7);
        dist::Tensor x(std::move(v), dist::Shape{count});
        const void* buffer = x.bytes().data();
        auto check = [&](std::int64_t calls) {
          float expected[7];
          for (int p = 0; p < 7; ++p) expected[p] = in_place_expected(n, static_cast<float>(p + 1), calls);
          const auto d = x.data<float>();
          for (std::size_t i = 0; i < d.size() && problem.empty(); ++i) {
            if (d[i] != expected[i % 7]) {
              problem = "wrong sum after " + std::to_string(calls) + " calls at element " + std::to_string(i);
            }
          }
          const bool in_place = count * static_cast<std::int64_t>(sizeof(float)) < 64 * 1024 || x.bytes().data() == buffer;
          if (problem.empty() && !in_place) problem = "the result left the donated buffer";
        };
        // Warm-up, untimed, then a full check of the known values.
        for (int i = 0; i < kWarmup; ++i) x = ctx->all_reduce(dist::ReduceOp::SUM, std::move(x));
        check(kWarmup);
        std::int64_t calls = kWarmup;
        if (r == 0) {
          for (auto _ : state) {
            x = ctx->all_reduce(dist::ReduceOp::SUM, std::move(x));
            ++calls;
          }
        } else {
          for (benchmark::IterationCount i = 0; i < iterations; ++i) {
            x = ctx->all_reduce(dist::ReduceOp::SUM, std::move(x));
            ++calls;
          }
        }
        check(calls);
      });
  for (const std::string& problem : problems) {
    if (!problem.empty()) {
      state.SkipWithError(problem.c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

// The gradient's values of step `step` on replica `r` (exact in float).
// Cheap to write (vectorized), so that the step is its memory traffic.
inline float gradient_value(int r, std::int64_t step, std::size_t i) {
  return static_cast<float>(2 * (r + 1) + static_cast<int>(i & 3U)) + static_cast<float>(step % 5);
}
// Reads every element (as an optimizer does), in 16 independent sums so
// that the read is not bound by the latency of one chain of additions.
inline float read_all(std::span<const float> d) {
  float part[16] = {};
  std::size_t i = 0;
  for (; i + 16 <= d.size(); i += 16) {
    for (std::size_t k = 0; k < 16; ++k) part[k] += d[i + k];
  }
  for (; i < d.size(); ++i) part[0] += d[i];
  float total = 0;
  for (const float p : part) total += p;
  return total;
}
// The sum over 2 replicas of gradient_value.
inline float gradient_sum(std::int64_t step, std::size_t i) {
  return gradient_value(0, step, i) + gradient_value(1, step, i);
}

// Writes a gradient, all-reduces it in place, reads the sum: see the header.
void BM_GradientStep(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  dist::MirroredStrategy strategy(cpus(2));
  const auto iterations = state.max_iterations;
  std::vector<std::string> problems(2);
  strategy.run([&] {
    dist::ReplicaContext* ctx = dist::get_replica_context();
    const int r = ctx->replica_id_in_sync_group();
    std::string& problem = problems[static_cast<std::size_t>(r)];
    std::vector<float> g(count);
    std::int64_t step = 0;
    auto one_step = [&] {
      for (std::size_t i = 0; i < count; ++i) g[i] = gradient_value(r, step, i);
      // The wrap is the only owner of its buffer: donated, summed in place.
      dist::Tensor x = dist::Tensor::wrap(dist::DType::kFloat32, dist::Shape{static_cast<std::int64_t>(count)},
                                          g.data(), std::shared_ptr<const void>(g.data(), [](const void*) {}),
                                          /*writable=*/true);
      x = ctx->all_reduce(dist::ReduceOp::SUM, std::move(x));
      const auto d = x.data<float>();
      benchmark::DoNotOptimize(read_all(d));
      if (problem.empty() && (d.data() != g.data() || d[count - 1] != gradient_sum(step, count - 1))) {
        problem = "step " + std::to_string(step) + ": the sum is wrong or not in the buffer";
      }
      ++step;
    };
    for (int i = 0; i < kWarmup; ++i) one_step();
    if (r == 0) {
      for (auto _ : state) one_step();
    } else {
      for (benchmark::IterationCount i = 0; i < iterations; ++i) one_step();
    }
    for (std::size_t i = 0; i < count && problem.empty(); ++i) {
      if (g[i] != gradient_sum(step - 1, i)) problem = "wrong sum at element " + std::to_string(i);
    }
  });
  for (const std::string& problem : problems) {
    if (!problem.empty()) {
      state.SkipWithError(problem.c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

// The same data flow between two bare threads: the reference for
// BM_GradientStep.
void BM_TwoThreadGradientStep(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  std::vector<float> g0(count), g1(count);
  float* const both[2] = {g0.data(), g1.data()};
  const auto& kernels = distribute::internal::reduce_kernels<float>();
  distribute::bench::SpinBarrier barrier(2);
  const auto iterations = state.max_iterations;
  // Each thread writes and reads only its own buffer outside the two
  // barriers, so the next step's writes need no third one.
  auto one_step = [&](int r, std::int64_t step) {
    std::vector<float>& mine = r == 0 ? g0 : g1;
    for (std::size_t i = 0; i < count; ++i) mine[i] = gradient_value(r, step, i);
    barrier.arrive_and_wait();  // both written
    kernels.in_place(std::span<float* const>(both), r == 0 ? 0 : count / 2, r == 0 ? count / 2 : count, false);
    barrier.arrive_and_wait();  // both halves summed into both buffers
    benchmark::DoNotOptimize(read_all(mine));
  };
  std::int64_t steps = 0;
  std::thread partner([&] {
    for (benchmark::IterationCount i = 0; i < iterations + kWarmup; ++i) one_step(1, i);
  });
  for (int i = 0; i < kWarmup; ++i) one_step(0, steps++);
  for (auto _ : state) one_step(0, steps++);
  partner.join();
  for (std::size_t i = 0; i < count; ++i) {
    if (g0[i] != gradient_sum(steps - 1, i) || g1[i] != g0[i]) {
      state.SkipWithError(("wrong sum at element " + std::to_string(i)).c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}

void sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t s : {4LL << 10, 256LL << 10, 4LL << 20, 64LL << 20}) b->Arg(s);
}
void sizes_replicas(benchmark::internal::Benchmark* b) {
  for (std::int64_t s : {4LL << 10, 256LL << 10, 4LL << 20, 64LL << 20}) {
    for (std::int64_t n : {2, 4}) b->Args({s, n});
  }
}

BENCHMARK(BM_SpinMeeting)->UseRealTime();
BENCHMARK(BM_YieldMeeting)->Arg(4)->UseRealTime();
BENCHMARK(BM_Copy)->Apply(sizes)->UseRealTime();
BENCHMARK(BM_TwoThreadInPlace)->Apply(sizes)->UseRealTime();
BENCHMARK(BM_TwoThreadShared)->Apply(sizes)->UseRealTime();
BENCHMARK_CAPTURE(BM_ReduceKernel, baseline, distribute::internal::ReduceIsa::kBaseline)->Apply(sizes)->UseRealTime();
BENCHMARK_CAPTURE(BM_ReduceKernel, avx2, distribute::internal::ReduceIsa::kAvx2)->Apply(sizes)->UseRealTime();
BENCHMARK_CAPTURE(BM_ReduceKernel, avx512, distribute::internal::ReduceIsa::kAvx512)->Apply(sizes)->UseRealTime();
BENCHMARK(BM_AllReduce)->Apply(sizes_replicas)->UseRealTime();
BENCHMARK(BM_AllReduceFibers)->Apply(sizes_replicas)->UseRealTime();
BENCHMARK(BM_AllReduceInPlace)->Apply(sizes_replicas)->UseRealTime();
// 104 KiB: the digits MLP's gradients (tools/train); 4 MiB.
BENCHMARK(BM_TwoThreadGradientStep)->Arg(104 << 10)->Arg(4 << 20)->UseRealTime();
BENCHMARK(BM_GradientStep)->Arg(104 << 10)->Arg(4 << 20)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
