// What a checkpoint costs, against the machine's memory bandwidth measured
// in the same run (BENCHMARKS.md, "Checkpoints"):
//   BM_Memcpy/<MiB>           a copy of the same bytes: the reference;
//   BM_Restore/<MiB>          Checkpoint::restore of one float32 variable of
//                             that size from a file in the page cache (read,
//                             CRC32C check, decode, assign);
//   BM_Save/<MiB>             Checkpoint::write of it: encode, write, fsync,
//                             rename (the disk's sync dominates);
//   BM_HashBytes / BM_HashWords/<MiB>  the byte-wise FNV-1a and the word-wise
//                             one that restore computes over the file when
//                             several workers compare what they read.
// Bytes/s are the checkpoint's payload. Under /tmp unless DISTRIBUTE_BENCH_DIR
// names another directory.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/fnv1a.h"
#include "distribute/distribute.h"

namespace dist = distribute;
namespace fs = std::filesystem;

namespace {

std::int64_t bytes_of(const benchmark::State& state) { return state.range(0) << 20; }

// A fresh directory, removed at the end of the benchmark.
class ScratchDirectory {
 public:
  ScratchDirectory() {
    const char* base = std::getenv("DISTRIBUTE_BENCH_DIR");
    path_ = fs::path(base != nullptr ? base : "/tmp") / ("checkpoint_bench-" + std::to_string(::getpid()));
    fs::create_directories(path_);
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

dist::Tensor filled(std::int64_t bytes) {
  std::vector<float> values(static_cast<std::size_t>(bytes) / sizeof(float));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) * 0.5f;
  return dist::Tensor(std::move(values), dist::Shape{bytes / static_cast<std::int64_t>(sizeof(float))});
}

void BM_Memcpy(benchmark::State& state) {
  const std::int64_t bytes = bytes_of(state);
  std::vector<char> from(static_cast<std::size_t>(bytes), 1), to(static_cast<std::size_t>(bytes));
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), from.size());
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

// A checkpoint tracking one float32 variable of `bytes`, in a scratch
// directory.
struct OneVariable {
  explicit OneVariable(std::int64_t bytes) : weights(filled(bytes)) { checkpoint.track("weights", weights); }
  ScratchDirectory dir;
  dist::Variable weights;
  dist::Checkpoint checkpoint;
};

void BM_Restore(benchmark::State& state) {
  OneVariable one(bytes_of(state));
  const std::string path = one.checkpoint.write(one.dir.file("ckpt.dckpt"));
  for (auto _ : state) one.checkpoint.restore(path);
  state.SetBytesProcessed(state.iterations() * bytes_of(state));
}

void BM_Save(benchmark::State& state) {
  OneVariable one(bytes_of(state));
  for (auto _ : state) one.checkpoint.write(one.dir.file("ckpt.dckpt"));
  state.SetBytesProcessed(state.iterations() * bytes_of(state));
}

template <std::uint64_t (*Hash)(std::string_view)>
void BM_Hash(benchmark::State& state) {
  const std::string data(static_cast<std::size_t>(bytes_of(state)), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(Hash(data));
  state.SetBytesProcessed(state.iterations() * bytes_of(state));
}

void BM_HashBytes(benchmark::State& state) { BM_Hash<dist::internal::fnv1a>(state); }
void BM_HashWords(benchmark::State& state) { BM_Hash<dist::internal::fnv1a_words>(state); }

BENCHMARK(BM_Memcpy)->Arg(4)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Restore)->Arg(4)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Save)->Arg(4)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_HashBytes)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_HashWords)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
