// Checkpoint files (docs/checkpoint_format.md for their contents): the
// <name>-<N>.dckpt naming, listing a directory, the atomic write, the whole
// read, and the errors they raise. Shared by Checkpoint and
// CheckpointManager.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace distribute {
class Strategy;
}

namespace distribute::internal {

// 'name' quoted, bytes outside printable ASCII as \xNN (names read from a
// damaged file may hold anything).
std::string quote_name(const std::string& s);

// Raises the error class for `err` (NotFoundError for ENOENT,
// FailedPreconditionError for permission, read-only or not-a-directory
// errors, UnavailableError otherwise): "<what> '<path>': <reason>".
[[noreturn]] void throw_io_error(const std::string& what, const std::string& path, int err);

std::string join(const std::string& directory, const std::string& file);

// "<name>-<number>.dckpt".
std::string checkpoint_file_name(const std::string& name, std::uint64_t number);

// The numbers N of the <name>-N.dckpt files in `directory`, ascending
// (canonical spellings only: no sign, no leading zeros); none, with `ec`
// set, if it cannot be listed.
std::vector<std::uint64_t> checkpoint_numbers(const std::string& directory, const std::string& name,
                                              std::error_code& ec);

// The same, for a caller that reads "no such directory" as "no checkpoint
// yet": none then; any other failure to list (permissions, not a
// directory, I/O) raises, `method` naming the call.
std::vector<std::uint64_t> listed_checkpoint_numbers(const std::string& directory, const std::string& name,
                                                     const char* method);

// The file names of a numbered save, one per call (one per attempt: another
// writer may take a number first): "<name>-<N>.dckpt" with N above every
// number listed in `directory` and above every number this object gave
// before (a listing that lags, on a network file system, must not name a
// taken number again). A missing directory lists as empty; other listing
// errors raise, `method` naming the call.
class NumberedNames {
 public:
  NumberedNames(std::string directory, std::string name, const char* method)
      : directory_(std::move(directory)), name_(std::move(name)), method_(method) {}
  std::string operator()();

 private:
  std::string directory_;
  std::string name_;
  const char* method_;
  std::uint64_t last_ = 0;
};

// A synced temporary file in `directory` holding `data`, to be renamed
// into place (leveldb's SetCurrentFile): <directory>/.dckpt-<pid>-<k>.tmp,
// a name of its own created exclusively, so concurrent writers never share
// one. The destructor removes it unless commit() renamed it. Errors name
// the path.
class TemporaryFile {
 public:
  TemporaryFile(const std::string& directory, std::span<const std::byte> data);
  ~TemporaryFile();
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  // Renames the file to `path` (in the directory) and syncs the directory.
  // With `replace`, over an existing file of that name; without, the
  // rename is exclusive and returns false, changing nothing, when `path`
  // exists (another writer took the name: commit again under another).
  // If the directory sync fails, a new file is taken back (one that
  // replaced a file stays: the old one is gone either way) and it raises.
  bool commit(const std::string& path, bool replace);
  const std::string& name() const noexcept { return name_; }

 private:
  std::string directory_;
  std::string name_;
  bool committed_ = false;
};

// Runs `chief` on worker 0 of `strategy` only, and gives every worker its
// outcome: the path it returned (a file in `directory`) as that file's name
// joined with each worker's own `directory` (a shared file system may be
// mounted elsewhere on another host), or none; or its error, which worker 0
// rethrows and every other worker raises with the same code, as
// "<failed>: <worker 0's message>". With one worker it is chief(); with
// several, a collective (`method` names it in its own errors: a deadline).
std::optional<std::string> from_worker_zero(Strategy& strategy, const std::string& directory, const char* method,
                                            const std::string& failed,
                                            const std::function<std::optional<std::string>()>& chief);

// What latest() gives on worker 0 of `strategy`, on every worker
// (from_worker_zero). Raises FailedPreconditionError inside a replica
// function (`method` names the call in errors).
// latest_checkpoint(directory, strategy) and
// CheckpointManager::restore_or_initialize use it.
std::optional<std::string> chiefs_latest(Strategy& strategy, const std::string& directory, const char* method,
                                         const std::function<std::optional<std::string>()>& latest);

// The whole file; errors name the path.
std::vector<std::byte> read_file(const std::string& path);

}  // namespace distribute::internal
