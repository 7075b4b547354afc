// What the fuzzers share: a scratch file for the readers that take a path.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace distribute::fuzz {

// A file of this process (on tmpfs when there is one), rewritten by every
// input and removed at exit.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& suffix) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    path_ = (dir / ("distribute-fuzz-" + std::to_string(::getpid()) + suffix)).string();
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }

  void write(const std::uint8_t* data, std::size_t size) const {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) std::abort();  // the fuzzer's own environment is broken
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    if (std::fclose(f) != 0) std::abort();
  }

 private:
  std::string path_;
};

}  // namespace distribute::fuzz
