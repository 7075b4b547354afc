// Reference for bench/all_reduce_bench.cc: Open MPI's (or any MPI's)
// MPI_Allreduce of float32 SUM, in place, between the processes of
// MPI_COMM_WORLD on this machine. Standalone: MPI C API only, no Google
// Benchmark and no dependency on the library.
//
// For each buffer size S (4 KiB, 256 KiB, 4 MiB, 64 MiB) every rank r fills
// its buffer with r + 1, all ranks meet at an MPI_Barrier, and the call
//   MPI_Allreduce(MPI_IN_PLACE, buf, S / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD)
// is timed with MPI_Wtime; every element must then equal size*(size+1)/2.
// After a warm-up, enough calls are timed for about 0.5 s (at least 5). A
// call's time is that of the slowest rank (the collective is done when every
// rank has its result). Rank 0 prints one line per size, shaped like Google
// Benchmark's console output so the figures sit in one table with
// all_reduce_bench's:
//   MPI_Allreduce/S/N median T us  algbw B GB/s  (B' GiB/s, K calls)
// T is the median call time, algbw = S / T (one rank's buffer: the same
// algorithm bandwidth as all_reduce_bench's bytes_per_second, which Google
// Benchmark prints in GiB/s as "G/s").
//
// Run: mpirun -np 2 build/release/bench/mpi_allreduce_bench
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr double kTargetSeconds = 0.5;
constexpr long kMinCalls = 5;
constexpr long kMaxCalls = 1'000'000;
constexpr int kWarmupCalls = 5;

struct Result {
  double median_seconds = 0;
  long calls = 0;
  long bad_elements = 0;  // summed over all ranks
};

void fill(std::vector<float>& buf, float value) { std::fill(buf.begin(), buf.end(), value); }

long count_bad(const std::vector<float>& buf, float expected) {
  return static_cast<long>(std::count_if(buf.begin(), buf.end(), [expected](float v) { return v != expected; }));
}

// One timed call on every rank: barrier, MPI_Allreduce, local elapsed time.
double timed_call(std::vector<float>& buf, int count) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Result run_size(std::size_t bytes, int rank, int size) {
  const std::size_t elements = bytes / sizeof(float);
  const int count = static_cast<int>(elements);
  const auto mine = static_cast<float>(rank + 1);
  const auto expected = static_cast<float>(size * (size + 1) / 2);
  std::vector<float> buf(elements);
  Result r;
  long bad = 0;

  // Warm-up; the median of its call times (so that the cold first call does
  // not count), the largest over ranks, sets the number of timed calls, the
  // same on every rank.
  std::vector<double> warmup(kWarmupCalls);
  for (double& t : warmup) {
    fill(buf, mine);
    t = timed_call(buf, count);
    bad += count_bad(buf, expected);
  }
  double warm = median(std::move(warmup));
  MPI_Allreduce(MPI_IN_PLACE, &warm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double wanted = warm > 0 ? std::ceil(kTargetSeconds / warm) : static_cast<double>(kMaxCalls);
  r.calls = std::clamp(static_cast<long>(std::min(wanted, static_cast<double>(kMaxCalls))), kMinCalls, kMaxCalls);

  std::vector<double> times(static_cast<std::size_t>(r.calls));
  for (double& t : times) {
    fill(buf, mine);  // in place: refill so every call sums the same inputs
    t = timed_call(buf, count);
    bad += count_bad(buf, expected);
  }
  MPI_Allreduce(MPI_IN_PLACE, times.data(), static_cast<int>(r.calls), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&bad, &r.bad_elements, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  r.median_seconds = median(std::move(times));
  return r;
}

std::string format_time(double seconds) {
  char out[32];
  if (seconds < 1e-3) {
    std::snprintf(out, sizeof out, "%.1f us", seconds * 1e6);
  } else {
    std::snprintf(out, sizeof out, "%.2f ms", seconds * 1e3);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string first_line(version, static_cast<std::size_t>(std::max(length, 0)));
    first_line = first_line.substr(0, first_line.find_first_of("\n,"));
    std::printf("MPI_Allreduce float32 SUM in place, %d ranks, %s\n", size, first_line.c_str());
    std::printf("time = median per call (slowest rank), algbw = buffer bytes / time\n");
    std::fflush(stdout);
  }

  int failed = 0;
  for (std::size_t bytes : {std::size_t{4} << 10, std::size_t{256} << 10, std::size_t{4} << 20, std::size_t{64} << 20}) {
    const Result r = run_size(bytes, rank, size);
    if (rank == 0) {
      const double gbps = static_cast<double>(bytes) / r.median_seconds;
      std::printf("MPI_Allreduce/%zu/%d median %s  algbw %.2f GB/s  (%.2f GiB/s, %ld calls)%s\n", bytes, size,
                  format_time(r.median_seconds).c_str(), gbps / 1e9, gbps / (1024.0 * 1024.0 * 1024.0), r.calls,
                  r.bad_elements == 0 ? "" : "  WRONG RESULT");
      if (r.bad_elements != 0) {
        std::fprintf(stderr, "MPI_Allreduce/%zu/%d: %ld elements differ from %d\n", bytes, size, r.bad_elements,
                     size * (size + 1) / 2);
      }
      std::fflush(stdout);
    }
    if (r.bad_elements != 0) failed = 1;
  }

  MPI_Finalize();
  return failed;
}
