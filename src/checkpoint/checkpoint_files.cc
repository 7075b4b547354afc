// Checkpoint files: names, listing, the atomic write and the whole read.
#include "checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

std::vector<std::uint64_t> listed_checkpoint_numbers(const std::string& directory, const std::string& name,
                                                     const char* method) {
  std::error_code ec;
  std::vector<std::uint64_t> numbers = checkpoint_numbers(directory, name, ec);
  if (ec == std::errc::no_such_file_or_directory) return {};
  if (ec) throw_io_error(std::string(method) + ": cannot list the directory", directory, ec.value());
  return numbers;
}

std::string NumberedNames::operator()() {
  const std::vector<std::uint64_t> listed = listed_checkpoint_numbers(directory_, name_, method_);
  last_ = std::max((listed.empty() ? 0 : listed.back()) + 1, last_ + 1);
  return checkpoint_file_name(name_, last_);
}

namespace {

// Creates a temporary file in `directory` under a name no other writer
// uses (this process's id and a counter; O_EXCL, and the next counter on a
// name that exists, say left by a crashed process that had the same id):
// two threads of one process, or the processes of a job sharing a file
// system, never write into each other's file. Its name is short and
// independent of the final one, which may be as long as a name can be.
int create_temporary(const std::string& directory, std::string& name) {
  static std::atomic<std::uint64_t> counter{0};
  constexpr int kAttempts = 1000;
  for (int attempt = 1;; ++attempt) {
    name = join(directory, ".dckpt-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1)) + ".tmp");
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST || attempt == kAttempts) return fd;
  }
}

// Renames `from` to `to` unless `to` exists: true when renamed, false when
// `to` exists (`from` is left); errno set on other failures (throws none).
// Where the file system refuses RENAME_NOREPLACE, link() then unlink() is
// just as exclusive; where it refuses hard links too, a check and a rename
// (not exclusive against another writer, which only such file systems
// allow).
int rename_exclusive(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 1;
  if (errno == EEXIST) return 0;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) return -1;
  if (::link(from.c_str(), to.c_str()) == 0) {
    ::unlink(from.c_str());
    return 1;
  }
  if (errno == EEXIST) return 0;
  if (errno != EPERM && errno != EOPNOTSUPP && errno != ENOSYS) return -1;
  if (::access(to.c_str(), F_OK) == 0) return 0;
  return ::rename(from.c_str(), to.c_str()) == 0 ? 1 : -1;
}

}  // namespace

TemporaryFile::TemporaryFile(const std::string& directory, std::span<const std::byte> data) : directory_(directory) {
  const int fd = create_temporary(directory, name_);
  if (fd < 0) {
    const int err = errno;
    throw_io_error("Checkpoint::save: cannot create a temporary file", name_, err);
  }
  try {
    write_all(fd, data);
    if (::fsync(fd) != 0) throw std::system_error(errno, std::generic_category());
  } catch (const std::system_error& e) {
    ::close(fd);
    ::unlink(name_.c_str());
    throw_io_error("Checkpoint::save: cannot write", name_, e.code().value());
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(name_.c_str());
    throw_io_error("Checkpoint::save: cannot write", name_, err);
  }
}

TemporaryFile::~TemporaryFile() {
  if (!committed_) ::unlink(name_.c_str());
}

bool TemporaryFile::commit(const std::string& path, bool replace) {
  bool overwrites = false;
  if (replace) {
    overwrites = ::access(path.c_str(), F_OK) == 0;
    if (::rename(name_.c_str(), path.c_str()) != 0) {
      const int err = errno;
      throw_io_error("Checkpoint::save: cannot rename " + quote_name(name_) + " to", path, err);
    }
  } else {
    const int renamed = rename_exclusive(name_, path);
    if (renamed == 0) return false;
    if (renamed < 0) {
      const int err = errno;
      throw_io_error("Checkpoint::save: cannot rename " + quote_name(name_) + " to", path, err);
    }
    ::unlink(name_.c_str());  // left by the link() fallback if its unlink failed; gone otherwise
  }
  committed_ = true;
  try {
    fsync_directory(directory_);
  } catch (const std::system_error& e) {
    // The rename may not survive a crash: report the save as failed and
    // take a new file back (a file it replaced is gone either way: the
    // complete new one stays in its place).
    if (!overwrites) ::unlink(path.c_str());
    throw_io_error("Checkpoint::save: cannot sync the directory", directory_, e.code().value());
  }
  return true;
}

std::vector<std::byte> read_file(const std::string& path) {
  // O_NONBLOCK: a FIFO (or a device) named by mistake must raise, not
  // block the open until a writer appears; only regular files are read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    throw_io_error("Checkpoint::restore: cannot open", path, err);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    throw_io_error("Checkpoint::restore: cannot open", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    throw FailedPreconditionError("Checkpoint::restore: expected a regular file, got " +
                                  std::string(S_ISDIR(st.st_mode) ? "a directory" : "a special file (FIFO, socket or device)") +
                                  " at " + quote_name(path));
  }
  std::vector<std::byte> data;
  data.reserve(static_cast<std::size_t>(st.st_size));
  std::byte buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      throw_io_error("Checkpoint::restore: cannot read", path, err);
    }
    if (n == 0) break;
    data.insert(data.end(), buffer, buffer + n);
  }
  return data;
}

}  // namespace distribute::internal
