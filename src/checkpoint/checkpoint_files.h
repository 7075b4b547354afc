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

// What latest() gives on worker 0 of `strategy`, on every worker: the same
// file name, joined with each worker's own `directory`; worker 0's error on
// every worker. With several workers it is a collective. Raises
// FailedPreconditionError inside a replica function (`method` names the
// call in errors). latest_checkpoint(directory, strategy) and
// CheckpointManager::restore_or_initialize use it.
std::optional<std::string> chiefs_latest(Strategy& strategy, const std::string& directory, const char* method,
                                         const std::function<std::optional<std::string>()>& latest);

// The whole file; errors name the path.
std::vector<std::byte> read_file(const std::string& path);

}  // namespace distribute::internal
