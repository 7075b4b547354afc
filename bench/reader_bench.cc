// Reading TF's data files, against the bare read of the same bytes in the
// same run:
//   BM_ReadFile           fread of the file in 256 KiB pieces into one
//                         buffer (the page cache's bandwidth: the floor)
//   BM_TFRecordDataset/R  a full iteration of TFRecordDataset over the same
//                         file: every record's two CRC32Cs checked and each
//                         record made a string tensor (R: record bytes)
//   BM_TextLineDataset    a full iteration of TextLineDataset over a file of
//                         the same size (lines of 100 bytes)
// The files (32 MiB each) are written once into $TMPDIR (or /tmp) and
// removed at exit; bytes_per_second counts the file's bytes, and the element
// count is checked, so a reader that stops early cannot look fast.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "data/record_io.h"
#include "distribute/distribute.h"

namespace {

namespace dist = distribute;

constexpr std::size_t kFileBytes = 32u << 20;

struct File {
  std::string path;
  std::int64_t elements = 0;
  std::size_t bytes = 0;
};

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/distribute-reader-bench-" +
         std::to_string(::getpid()) + "-" + name;
}

void append_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

std::uint32_t masked(const std::string& bytes) {
  return dist::internal::mask_crc32c(dist::internal::crc32c(std::as_bytes(std::span(bytes.data(), bytes.size()))));
}

// Files removed at exit.
class Files {
 public:
  ~Files() {
    for (auto& [key, file] : files_) std::remove(file.path.c_str());
  }
  const File& get(const std::string& key, std::size_t record_bytes) {
    auto it = files_.find(key);
    if (it != files_.end()) return it->second;
    File f;
    f.path = temp_path(key);
    std::string content;
    content.reserve(kFileBytes + 64 * 1024);
    std::string record(record_bytes, 'x');
    while (content.size() < kFileBytes) {
      for (std::size_t i = 0; i < record.size(); ++i) record[i] = static_cast<char>('a' + (f.elements + static_cast<std::int64_t>(i)) % 26);
      if (key == "lines") {
        content += record;
        content += '\n';
      } else {
        std::string length;
        const std::uint64_t n = record.size();
        length.append(reinterpret_cast<const char*>(&n), sizeof n);
        content += length;
        append_u32(content, masked(length));
        content += record;
        append_u32(content, masked(record));
      }
      ++f.elements;
    }
    std::FILE* out = std::fopen(f.path.c_str(), "wb");
    bool written = out != nullptr && std::fwrite(content.data(), 1, content.size(), out) == content.size();
    if (out != nullptr) written = std::fclose(out) == 0 && written;
    if (!written) {
      std::remove(f.path.c_str());
      throw std::runtime_error("cannot write " + f.path);
    }
    f.bytes = content.size();
    return files_.emplace(key, f).first->second;
  }

 private:
  std::map<std::string, File> files_;
};

Files& files() {
  static Files f;
  return f;
}

void BM_ReadFile(benchmark::State& state) {
  const File& f = files().get("records1000", 1000);
  std::vector<char> buffer(256 << 10);
  for (auto _ : state) {
    std::FILE* in = std::fopen(f.path.c_str(), "rb");
    if (in == nullptr) {
      state.SkipWithError("cannot open the file");
      break;
    }
    std::setvbuf(in, nullptr, _IONBF, 0);
    std::size_t total = 0, got = 0;
    while ((got = std::fread(buffer.data(), 1, buffer.size(), in)) > 0) total += got;
    std::fclose(in);
    if (total != f.bytes) {
      state.SkipWithError("short read");
      break;
    }
    benchmark::DoNotOptimize(buffer.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(f.bytes));
}
BENCHMARK(BM_ReadFile)->UseRealTime()->Unit(benchmark::kMillisecond);

void iterate(benchmark::State& state, const File& f, const dist::Dataset& ds) {
  for (auto _ : state) {
    std::int64_t n = 0;
    for (const dist::Element& e : ds) {
      benchmark::DoNotOptimize(e);
      ++n;
    }
    if (n != f.elements) {
      state.SkipWithError(("expected " + std::to_string(f.elements) + " elements, got " + std::to_string(n)).c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(f.bytes));
  state.SetItemsProcessed(state.iterations() * f.elements);
}

void BM_TFRecordDataset(benchmark::State& state) {
  const auto record = static_cast<std::size_t>(state.range(0));
  const File& f = files().get("records" + std::to_string(record), record);
  iterate(state, f, dist::TFRecordDataset({f.path}));
}
BENCHMARK(BM_TFRecordDataset)->Arg(100)->Arg(1000)->Arg(100000)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_TextLineDataset(benchmark::State& state) {
  const File& f = files().get("lines", 100);
  iterate(state, f, dist::TextLineDataset({f.path}));
}
BENCHMARK(BM_TextLineDataset)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
