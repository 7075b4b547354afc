// Checkpoint files: names, listing, the atomic write and the whole read.
#include "checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <system_error>

#include "distribute/errors.h"

namespace distribute::internal {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSuffix = ".dckpt";

void write_all(int fd, std::span<const std::byte> data) {
  while (!data.empty()) {
    const std::size_t chunk = std::min<std::size_t>(data.size(), std::size_t{1} << 30);
    const ssize_t n = ::write(fd, data.data(), chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category());
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
}

void fsync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category());
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::system_error(err, std::generic_category());
  }
  ::close(fd);
}

}  // namespace

std::string quote_name(const std::string& s) {
  // Names read from a damaged file may hold anything: show bytes outside
  // printable ASCII as \xNN.
  std::string out = "'";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) {
      out += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    }
  }
  return out + "'";
}

void throw_io_error(const std::string& what, const std::string& path, int err) {
  const std::string message = what + " " + quote_name(path) + ": " + std::generic_category().message(err);
  switch (err) {
    case ENOENT:
      throw NotFoundError(message);
    case ENOTDIR:
    case EISDIR:
    case EACCES:
    case EPERM:
    case EROFS:
      throw FailedPreconditionError(message);
    default:
      throw UnavailableError(message);
  }
}

std::string join(const std::string& directory, const std::string& file) {
  return (fs::path(directory) / file).string();
}

std::string checkpoint_file_name(const std::string& name, std::uint64_t number) {
  return name + "-" + std::to_string(number) + kSuffix;
}

std::vector<std::uint64_t> checkpoint_numbers(const std::string& directory, const std::string& name,
                                              std::error_code& ec) {
  std::vector<std::uint64_t> numbers;
  const std::string prefix = name + "-";
  const std::string suffix = kSuffix;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (file.size() <= prefix.size() + suffix.size() || file.compare(0, prefix.size(), prefix) != 0 ||
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const char* first = file.data() + prefix.size();
    const char* last = file.data() + file.size() - suffix.size();
    std::uint64_t n = 0;
    const auto r = std::from_chars(first, last, n);
    // Digits only, and the canonical spelling (no leading zeros), so that
    // the number names exactly one file.
    if (r.ec != std::errc() || r.ptr != last || *first == '+' || (*first == '0' && last - first > 1)) continue;
    numbers.push_back(n);
  }
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

// Writes `data` as `path` atomically: a synced temporary file renamed into
// place, then the directory synced (leveldb's SetCurrentFile). On failure
// neither the temporary nor the final file is left.
void write_atomically(const std::string& directory, const std::string& path, std::span<const std::byte> data) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_io_error("Checkpoint::save: cannot create", tmp, errno);
  try {
    write_all(fd, data);
    if (::fsync(fd) != 0) throw std::system_error(errno, std::generic_category());
  } catch (const std::system_error& e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw_io_error("Checkpoint::save: cannot write", tmp, e.code().value());
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io_error("Checkpoint::save: cannot write", tmp, err);
  }
  const bool overwrites = ::access(path.c_str(), F_OK) == 0;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io_error("Checkpoint::save: cannot rename " + quote_name(tmp) + " to", path, err);
  }
  try {
    fsync_directory(directory);
  } catch (const std::system_error& e) {
    // The rename may not survive a crash: report the save as failed and
    // take a new file back (a file it replaced is gone either way: the
    // complete new one stays in its place).
    if (!overwrites) ::unlink(path.c_str());
    throw_io_error("Checkpoint::save: cannot sync the directory", directory, e.code().value());
  }
}

std::vector<std::byte> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io_error("Checkpoint::restore: cannot open", path, errno);
  std::vector<std::byte> data;
  std::byte buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw_io_error("Checkpoint::restore: cannot read", path, err);
    }
    if (n == 0) break;
    data.insert(data.end(), buffer, buffer + n);
  }
  ::close(fd);
  return data;
}

}  // namespace distribute::internal
