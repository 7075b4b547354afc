// Checkpoint files (docs/checkpoint_format.md for their contents): the
// <name>-<N>.dckpt naming, listing a directory, the atomic write, the whole
// read, and the errors they raise. Shared by Checkpoint and
// CheckpointManager.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <vector>

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

// Writes `data` as `path` (in `directory`) atomically: a synced temporary
// file (<directory>/.dckpt-<pid>-<k>.tmp, a name of its own: concurrent
// writers never share one) renamed into
// place, then the directory synced (leveldb's SetCurrentFile). With
// `replace`, an existing file of that name is replaced; without, the rename
// is exclusive and false is returned, nothing written, if `path` exists (a
// concurrent writer took the name). On failure the temporary file is not
// left, nor a new final file (one that replaced an existing file of that
// name stays), and the error names the path.
bool write_atomically(const std::string& directory, const std::string& path, std::span<const std::byte> data,
                      bool replace);

// The whole file; errors name the path.
std::vector<std::byte> read_file(const std::string& path);

}  // namespace distribute::internal
