// Checkpoint: serialization (docs/checkpoint_format.md), the atomic write,
// validation before any change, and the multi-worker protocol.
#include "distribute/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>
#include <functional>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <system_error>
#include <type_traits>
#include <utility>
#include <numeric>
#include <variant>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/crc32c.h"
#include "data/iterator_state.h"
#include "core/describe.h"
#include "core/element_count.h"
#include "distribute/errors.h"
#include "distribute/replica_context.h"
#include "distribute/strategy.h"
#include "strategy/context.h"

namespace distribute {

using internal::checkpoint_file_name;
using internal::checkpoint_numbers;
using internal::join;
using internal::quote_name;
using internal::read_file;
using internal::throw_io_error;
using internal::write_atomically;

// Tensor data is written as the host lays it out; the format says
// little-endian.
static_assert(std::endian::native == std::endian::little, "the checkpoint format stores little-endian data");

namespace {

namespace fs = std::filesystem;

// save()'s files: ckpt-<N>.dckpt.
constexpr const char* kName = "ckpt";

// ---- Format constants (docs/checkpoint_format.md) ----
constexpr char kMagic[8] = {'D', 'I', 'S', 'T', 'C', 'K', 'P', 'T'};
constexpr std::size_t kHeaderSize = 28;           // magic, version, count, file length, header CRC
constexpr std::size_t kHeaderCrcOffset = 24;      // the CRC covers bytes [0, 24)
constexpr std::size_t kMaxNameLength = 1u << 16;  // a sanity bound for reading

// Format dtype codes, fixed by the format (not by the DType enum's order).
std::uint32_t dtype_code(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 0;
    case DType::kFloat64:
      return 1;
    case DType::kInt32:
      return 2;
    case DType::kInt64:
      return 3;
  }
  return 0xFFFFFFFFu;
}
std::optional<DType> dtype_from_code(std::uint32_t code) {
  switch (code) {
    case 0:
      return DType::kFloat32;
    case 1:
      return DType::kFloat64;
    case 2:
      return DType::kInt32;
    case 3:
      return DType::kInt64;
    default:
      return std::nullopt;
  }
}

std::string hex32(std::uint32_t v) {
  char buf[11] = {'0', 'x'};
  const auto r = std::to_chars(buf + 2, buf + sizeof(buf), v, 16);
  return std::string(buf, r.ptr);
}


// ---- Little-endian encoding ----
class Writer {
 public:
  void u32(std::uint32_t v) { fixed(v, 4); }
  void u64(std::uint64_t v) { fixed(v, 8); }
  void bytes(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::size_t size() const { return out_.size(); }
  std::span<const std::byte> since(std::size_t offset) const {
    return std::span<const std::byte>(out_).subspan(offset);
  }
  std::vector<std::byte>& buffer() { return out_; }

 private:
  void fixed(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xFF));
  }
  std::vector<std::byte> out_;
};

std::uint64_t load_le(const std::byte* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint64_t>(p[i]);
  return v;
}
void store_le(std::byte* p, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}

// Bounds-checked reads over a whole file; `what_entry` names the entry being
// read in errors.
class Reader {
 public:
  Reader(std::span<const std::byte> data, std::string path) : data_(data), path_(std::move(path)) {}
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return data_.size() - pos_; }
  std::span<const std::byte> take(std::size_t n, const std::string& field, const std::string& where) {
    if (n > remaining()) {
      throw DataLossError("checkpoint " + path_ + ": " + where + " is malformed: its " + field + " (" +
                          std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                          ") runs past the end of the file (" + std::to_string(remaining()) + " bytes left)");
    }
    auto out = data_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::uint32_t u32(const std::string& field, const std::string& where) {
    return static_cast<std::uint32_t>(load_le(take(4, field, where).data(), 4));
  }
  std::uint64_t u64(const std::string& field, const std::string& where) {
    return load_le(take(8, field, where).data(), 8);
  }
  std::span<const std::byte> span(std::size_t from, std::size_t to) const { return data_.subspan(from, to - from); }

 private:
  std::span<const std::byte> data_;
  std::string path_;
  std::size_t pos_ = 0;
};

// ---- Encoding and decoding a checkpoint ----
struct NamedTensor {
  std::string name;
  Tensor value;
};

std::vector<std::byte> encode(const std::vector<NamedTensor>& entries) {
  Writer w;
  w.bytes(std::as_bytes(std::span<const char>(kMagic)));
  w.u32(Checkpoint::kFormatVersion);
  w.u32(static_cast<std::uint32_t>(entries.size()));
  w.u64(0);  // the file length, patched below
  w.u32(0);  // the header CRC, patched below
  for (const NamedTensor& e : entries) {
    const std::size_t start = w.size();
    w.u32(static_cast<std::uint32_t>(e.name.size()));
    w.bytes(std::as_bytes(std::span<const char>(e.name.data(), e.name.size())));
    w.u32(dtype_code(e.value.dtype()));
    w.u32(static_cast<std::uint32_t>(e.value.rank()));
    for (const std::int64_t d : e.value.shape()) w.u64(static_cast<std::uint64_t>(d));
    w.u64(e.value.bytes().size());
    w.bytes(e.value.bytes());
    w.u32(internal::crc32c(w.since(start)));
  }
  std::vector<std::byte>& out = w.buffer();
  store_le(out.data() + 16, out.size(), 8);
  store_le(out.data() + kHeaderCrcOffset, internal::crc32c(std::span<const std::byte>(out).first(kHeaderCrcOffset)), 4);
  return out;
}

// Parses and checks a whole checkpoint file; raises DataLossError or
// FailedPreconditionError (version) with the path and the problem.
std::vector<NamedTensor> decode(std::span<const std::byte> file, const std::string& path) {
  const std::string where = "checkpoint " + path + ": ";
  const std::size_t magic_bytes = std::min(file.size(), sizeof(kMagic));
  if (magic_bytes > 0 && std::memcmp(file.data(), kMagic, magic_bytes) != 0) {
    throw DataLossError(where + "not a distribute checkpoint: expected the file to start with the magic \"DISTCKPT\"");
  }
  if (file.size() < kHeaderSize) {
    throw DataLossError(where + "truncated: expected at least the " + std::to_string(kHeaderSize) +
                        "-byte header, got " + std::to_string(file.size()) + " bytes");
  }
  const auto version = static_cast<std::uint32_t>(load_le(file.data() + 8, 4));
  if (version != Checkpoint::kFormatVersion) {
    throw FailedPreconditionError(where + "format version " + std::to_string(version) +
                                  " is not supported: this library reads version " +
                                  std::to_string(Checkpoint::kFormatVersion));
  }
  const auto stored_header_crc = static_cast<std::uint32_t>(load_le(file.data() + kHeaderCrcOffset, 4));
  const std::uint32_t header_crc = internal::crc32c(file.first(kHeaderCrcOffset));
  if (stored_header_crc != header_crc) {
    throw DataLossError(where + "the header is corrupted: CRC32C " + hex32(header_crc) + " of its bytes, stored " +
                        hex32(stored_header_crc));
  }
  const auto count = static_cast<std::uint32_t>(load_le(file.data() + 12, 4));
  const std::uint64_t length = load_le(file.data() + 16, 8);
  if (length != file.size()) {
    throw DataLossError(where + (file.size() < length ? "truncated" : "longer than written") + ": expected " +
                        std::to_string(length) + " bytes (the length in its header), got " +
                        std::to_string(file.size()) + " bytes");
  }
  Reader in(file, path);
  in.take(kHeaderSize, "header", "the header");
  std::vector<NamedTensor> entries;
  std::set<std::string> names;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::string entry = "entry " + std::to_string(i);
    const std::size_t start = in.position();
    const std::uint32_t name_length = in.u32("name length", entry);
    if (name_length == 0 || name_length > kMaxNameLength) {
      throw DataLossError(where + entry + " is malformed: name length " + std::to_string(name_length) +
                          ", expected 1 to " + std::to_string(kMaxNameLength));
    }
    const auto name_bytes = in.take(name_length, "name", entry);
    std::string name(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
    const std::string named = entry + " (" + quote_name(name) + ")";
    const std::uint32_t code = in.u32("dtype", named);
    const std::uint32_t rank = in.u32("rank", named);
    if (rank > Shape::kMaxRank) {
      // Checked before reading the dimensions, so that a damaged rank does
      // not read far; the CRC is checked when the entry's extent is known.
      throw DataLossError(where + named + " is corrupted: rank " + std::to_string(rank) + ", at most " +
                          std::to_string(Shape::kMaxRank) + " is supported");
    }
    std::vector<std::uint64_t> dims(rank);
    for (auto& d : dims) d = in.u64("dimensions", named);
    const std::uint64_t data_length = in.u64("data length", named);
    const auto data = in.take(data_length, "data", named);
    const std::size_t end = in.position();
    const std::uint32_t stored_crc = in.u32("CRC32C", named);
    const std::uint32_t crc = internal::crc32c(in.span(start, end));
    if (crc != stored_crc) {
      throw DataLossError(where + named + " is corrupted: CRC32C " + hex32(crc) + " of its bytes, stored " +
                          hex32(stored_crc));
    }
    // The CRC matched: what follows is what was written, so a failure here
    // means a writer bug or a deliberately crafted file.
    const std::optional<DType> dtype = dtype_from_code(code);
    if (!dtype.has_value()) {
      throw DataLossError(where + named + " has the unknown dtype code " + std::to_string(code));
    }
    Shape shape;
    for (const std::uint64_t d : dims) {
      if (d > static_cast<std::uint64_t>(INT64_MAX)) {
        throw DataLossError(where + named + " has an impossible dimension " + std::to_string(d));
      }
      shape.push_back(static_cast<std::int64_t>(d));
    }
    // Tensor's own check (core/element_count.h), so that a shape the file
    // can hold but no tensor can is reported here, with the file and entry.
    // (No dimension is negative: each is at most INT64_MAX.)
    using Problem = internal::ElementCount::Problem;
    const internal::ElementCount shape_count = internal::count_elements(shape, *dtype);
    if (shape_count.problem == Problem::kTooManyElements) {
      throw DataLossError(where + named + " has an impossible shape " + shape_string(shape) +
                          ": expected at most 2^63 - 1 elements, got more in its first " +
                          std::to_string(shape_count.dimension + 1) + " dimensions");
    }
    if (shape_count.problem == Problem::kTooManyBytes) {
      throw DataLossError(where + named + " has an impossible shape: " + internal::describe(*dtype, shape) +
                          " needs more than 2^63 - 1 bytes of data, the entry has " + std::to_string(data_length));
    }
    if (static_cast<std::uint64_t>(shape_count.bytes) != data_length) {
      throw DataLossError(where + named + ": " + internal::describe(*dtype, shape) + " needs " +
                          std::to_string(shape_count.bytes) + " bytes of data, the entry has " +
                          std::to_string(data_length));
    }
    if (!names.insert(name).second) {
      throw DataLossError(where + named + " repeats the name of an earlier entry");
    }
    void* out = nullptr;
    Tensor value = internal::allocate_tensor(*dtype, shape, &out);
    if (!data.empty()) std::memcpy(out, data.data(), data.size());
    entries.push_back({std::move(name), std::move(value)});
  }
  if (in.remaining() != 0) {
    throw DataLossError(where + "malformed: " + std::to_string(in.remaining()) + " bytes after the last of " +
                        std::to_string(count) + " entries");
  }
  return entries;
}

}  // namespace

// ---- Checkpoint ----

Checkpoint::Checkpoint(CheckpointOptions options) : options_(options) {
  if (options_.max_to_keep.has_value() && *options_.max_to_keep < 1) {
    throw InvalidArgumentError(
        "CheckpointOptions::max_to_keep: expected at least 1 (or std::nullopt to keep every "
        "checkpoint), got " +
        std::to_string(*options_.max_to_keep));
  }
}

void Checkpoint::add(Entry entry) {
  if (entry.name.empty()) throw InvalidArgumentError("Checkpoint::track: expected a non-empty name");
  for (const Entry& e : entries_) {
    if (e.name == entry.name) {
      throw InvalidArgumentError("Checkpoint::track: the name " + quote_name(entry.name) +
                                 " is already tracked; every tracked value needs its own name");
    }
  }
  entries_.push_back(std::move(entry));
}

void Checkpoint::track(const std::string& name, Variable variable) { add({name, std::move(variable)}); }

void Checkpoint::track(const std::string& name, std::int64_t* value) {
  if (value == nullptr) throw InvalidArgumentError("Checkpoint::track(" + quote_name(name) + "): null pointer");
  add({name, value});
}

void Checkpoint::track(const std::string& name, std::uint64_t* value) {
  if (value == nullptr) throw InvalidArgumentError("Checkpoint::track(" + quote_name(name) + "): null pointer");
  add({name, value});
}

void Checkpoint::track(const std::string& name, std::int32_t* value) {
  if (value == nullptr) throw InvalidArgumentError("Checkpoint::track(" + quote_name(name) + "): null pointer");
  add({name, value});
}

void Checkpoint::track(const std::string& name, Tensor* tensor) {
  if (tensor == nullptr) throw InvalidArgumentError("Checkpoint::track(" + quote_name(name) + "): null pointer");
  add({name, tensor});
}

void Checkpoint::track(const std::string& name, DistributedIterator& iterator) {
  internal::IteratorAccess::check_replayable(iterator, "Checkpoint::track(" + quote_name(name) + ")");
  add({name, &iterator});
}

namespace {

// An iterator's position as a checkpoint entry: int64 [steps, rows,
// fingerprint, shuffle iterations...] (data/iterator_state.h).
Tensor position_tensor(const internal::IteratorPosition& p) {
  std::vector<std::int64_t> v{p.steps, p.rows, std::bit_cast<std::int64_t>(p.fingerprint)};
  for (std::uint64_t k : p.shuffle_iterations) v.push_back(std::bit_cast<std::int64_t>(k));
  const auto n = static_cast<std::int64_t>(v.size());
  return Tensor(std::move(v), Shape{n});
}

}  // namespace

// Every worker's `value`, in worker order (a collective when there are
// several workers; just `value` otherwise).
std::vector<std::int64_t> Checkpoint::over_workers(Strategy& strategy, std::int64_t value) {
  if (strategy.num_workers() <= 1) return {value};
  const Tensor all =
      strategy.gather_over_workers(Tensor(std::vector<std::int64_t>{value}, Shape{1}), 0, "checkpoint iterator");
  const auto v = all.data<std::int64_t>();
  return {v.begin(), v.end()};
}

namespace {

// A tracked iterator's rows summed over the workers (each reads its own
// shard), and its pipeline's fingerprint combined over them (with
// distribute_datasets_from_function each worker has its own pipeline).
std::int64_t total(const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); }

std::uint64_t combined(const std::vector<std::int64_t>& fingerprints) {
  if (fingerprints.size() == 1) return std::bit_cast<std::uint64_t>(fingerprints[0]);
  std::uint64_t h = 14695981039346656037ull;
  for (std::int64_t f : fingerprints) h = (h ^ std::bit_cast<std::uint64_t>(f)) * 1099511628211ull;
  return h;
}

internal::IteratorPosition position_of(const Tensor& t) {
  const auto v = t.data<std::int64_t>();
  internal::IteratorPosition p;
  p.steps = v[0];
  p.rows = v[1];
  p.fingerprint = std::bit_cast<std::uint64_t>(v[2]);
  for (std::size_t k = 3; k < v.size(); ++k) p.shuffle_iterations.push_back(std::bit_cast<std::uint64_t>(v[k]));
  return p;
}

}  // namespace

bool Checkpoint::untrack(const std::string& name) {
  return std::erase_if(entries_, [&](const Entry& e) { return e.name == name; }) > 0;
}

std::vector<std::string> Checkpoint::tracked_names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const Entry& e : entries_) names.push_back(e.name);
  return names;
}

Strategy& Checkpoint::strategy_for(const char* method) const {
  const internal::ThreadMode* mode = internal::current_mode();
  if (mode != nullptr && mode->replica != nullptr) {
    throw FailedPreconditionError(std::string("Checkpoint::") + method + ": called inside a replica function of " +
                                  mode->strategy->to_string() +
                                  "; call it in cross-replica context (outside strategy.run)");
  }
  Strategy* strategy = nullptr;
  const std::string* owner = nullptr;
  for (const Entry& e : entries_) {
    const auto* v = std::get_if<Variable>(&e.target);
    if (v == nullptr || v->distributed_strategy() == nullptr) continue;
    if (strategy != nullptr && strategy != v->distributed_strategy()) {
      throw InvalidArgumentError(std::string("Checkpoint::") + method + ": the tracked variables belong to " +
                                 "different strategies: " + quote_name(*owner) + " to " + strategy->to_string() + ", " +
                                 quote_name(e.name) + " to " + v->distributed_strategy()->to_string() +
                                 "; use one Checkpoint per strategy");
    }
    strategy = v->distributed_strategy();
    owner = &e.name;
  }
  Strategy& chosen = strategy != nullptr ? *strategy : get_strategy();
  // The workers of a multi-worker iterator agree on its steps through its
  // own strategy: saving or restoring it under another one (every worker
  // writing the file itself, say) is refused.
  for (const Entry& e : entries_) {
    const auto* it = std::get_if<DistributedIterator*>(&e.target);
    if (it == nullptr || !internal::IteratorAccess::across_workers(**it) ||
        internal::IteratorAccess::origin(**it) == chosen.id()) {
      continue;
    }
    throw FailedPreconditionError(std::string("Checkpoint::") + method + ": the tracked iterator " + quote_name(e.name) +
                                  " comes from strategy #" + std::to_string(internal::IteratorAccess::origin(**it)) +
                                  ", but the checkpoint would use " + chosen.to_string() +
                                  " (the tracked variables' strategy, else the current one); call " + method +
                                  " inside the iterator's strategy's scope");
  }
  return chosen;
}

std::string Checkpoint::commit(const std::string& directory, const char* method, bool create_directory,
                               const std::function<std::string()>& file_name,
                               const std::function<void(const std::string&)>& after_commit) {
  Strategy& strategy = strategy_for("save");
  // Every worker reads every value, in tracking order: reading a
  // SyncOnReadVariable in cross-replica context is a collective.
  std::vector<NamedTensor> values;
  values.reserve(entries_.size());
  for (const Entry& e : entries_) {
    Tensor value = std::visit(
        [&strategy](const auto& target) -> Tensor {
          using T = std::decay_t<decltype(target)>;
          if constexpr (std::is_same_v<T, Variable>) {
            return target.value();
          } else if constexpr (std::is_same_v<T, std::int64_t*>) {
            return Tensor(*target);
          } else if constexpr (std::is_same_v<T, std::uint64_t*>) {
            return Tensor(std::bit_cast<std::int64_t>(*target));
          } else if constexpr (std::is_same_v<T, std::int32_t*>) {
            return Tensor(static_cast<std::int64_t>(*target));
          } else if constexpr (std::is_same_v<T, DistributedIterator*>) {
            internal::IteratorPosition p = internal::IteratorAccess::position(*target);
            p.rows = total(over_workers(strategy, p.rows));
            p.fingerprint = combined(over_workers(strategy, std::bit_cast<std::int64_t>(p.fingerprint)));
            return position_tensor(p);
          } else {
            return *target;
          }
        },
        e.target);
    values.push_back({e.name, std::move(value)});
  }
  const std::vector<std::byte> bytes = encode(values);

  // The chief (the only worker, usually) writes.
  std::string path;
  std::exception_ptr failure;
  ErrorCode code = ErrorCode::kUnknown;
  std::string message;
  if (strategy.is_chief()) {
    try {
      if (create_directory) {
        std::error_code ec;
        fs::create_directories(directory, ec);
        if (ec) throw_io_error(std::string(method) + ": cannot create the directory", directory, ec.value());
      }
      struct stat st {};
      if (::stat(directory.c_str(), &st) != 0) throw_io_error(std::string(method) + ": directory", directory, errno);
      if (!S_ISDIR(st.st_mode)) throw_io_error(std::string(method) + ": directory", directory, ENOTDIR);
      path = join(directory, file_name());
      write_atomically(directory, path, bytes);
      if (after_commit) {
        try {
          after_commit(path);
        } catch (...) {
          std::error_code ignored;
          fs::remove(path, ignored);
          throw;
        }
      }
    } catch (const Error& e) {
      failure = std::current_exception();
      code = e.code();
      message = e.message();
    } catch (const std::exception& e) {
      failure = std::current_exception();
      message = e.what();
    }
  }
  if (strategy.num_workers() > 1) {
    // Every worker returns after the chief's commit, with its path, or
    // raises the chief's error.
    const Tensor status =
        strategy.broadcast_from_chief(Tensor(std::vector<std::int64_t>{failure ? static_cast<std::int64_t>(code) : 0}, Shape{1}));
    const auto s = status.data<std::int64_t>();
    // The chief's error message, or the path it wrote, as text.
    const std::string text = strategy.text_from_chief(failure ? message : path, "checkpoint save");
    if (s[0] != 0) {
      if (failure) std::rethrow_exception(failure);
      throw_error(static_cast<ErrorCode>(s[0]), "the chief (worker 0) could not save the checkpoint: " + text);
    }
    path = text;
  }
  if (failure) std::rethrow_exception(failure);
  return path;
}

std::string Checkpoint::save(const std::string& directory) {
  return commit(
      directory, "Checkpoint::save", /*create_directory=*/false,
      [&] {
        std::error_code ec;
        const std::vector<std::uint64_t> existing = checkpoint_numbers(directory, kName, ec);
        if (ec) throw_io_error("Checkpoint::save: cannot list the directory", directory, ec.value());
        return checkpoint_file_name(kName, existing.empty() ? 1 : existing.back() + 1);
      },
      [&](const std::string&) {
        // Keep the newest max_to_keep (the one just written included). A
        // file that cannot be removed stays; the save itself succeeded.
        if (!options_.max_to_keep.has_value()) return;
        std::error_code ec;
        std::vector<std::uint64_t> kept = checkpoint_numbers(directory, kName, ec);
        const auto keep = static_cast<std::size_t>(*options_.max_to_keep);
        for (std::size_t i = 0; !ec && i + keep < kept.size(); ++i) {
          std::error_code ignored;
          fs::remove(join(directory, checkpoint_file_name(kName, kept[i])), ignored);
        }
      });
}

std::string Checkpoint::write(const std::string& path) {
  const fs::path p(path);
  if (!p.has_filename()) throw InvalidArgumentError("Checkpoint::write: expected a file path, got " + quote_name(path));
  const std::string directory = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  const std::string name = p.filename().string();
  return commit(directory, "Checkpoint::write", /*create_directory=*/false, [name] { return name; }, nullptr);
}

std::vector<std::pair<std::string, Tensor>> load_checkpoint(const std::string& path) {
  const std::vector<std::byte> file = read_file(path);
  std::vector<std::pair<std::string, Tensor>> out;
  for (NamedTensor& e : decode(file, path)) out.emplace_back(std::move(e.name), std::move(e.value));
  return out;
}

void Checkpoint::restore(const std::string& path, const RestoreOptions& options) {
  Strategy& strategy = strategy_for("restore");
  // Everything is read and checked before any state changes.
  std::vector<Tensor> restored(entries_.size());
  std::exception_ptr failure;
  try {
    const std::vector<std::byte> file = read_file(path);
    std::vector<NamedTensor> saved = decode(file, path);
    std::map<std::string, Tensor> by_name;
    for (NamedTensor& e : saved) by_name.emplace(std::move(e.name), std::move(e.value));
    std::vector<std::string> missing;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const auto it = by_name.find(entries_[i].name);
      if (it == by_name.end()) {
        missing.push_back(quote_name(entries_[i].name));
        continue;
      }
      restored[i] = std::move(it->second);
      by_name.erase(it);
    }
    auto list = [](const std::vector<std::string>& names) {
      std::string out;
      for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
      return out;
    };
    if (!missing.empty()) {
      throw NotFoundError("checkpoint " + path + " has no entry for the tracked " + list(missing) +
                          " (was it saved by a Checkpoint tracking other names?)");
    }
    if (!by_name.empty() && !options.expect_partial) {
      std::vector<std::string> unexpected;
      for (const auto& [name, value] : by_name) unexpected.push_back(quote_name(name));
      throw InvalidArgumentError("checkpoint " + path + " holds " + list(unexpected) +
                                 ", which this Checkpoint does not track; track the same names as the Checkpoint "
                                 "that saved it, or restore with RestoreOptions::expect_partial to leave them out");
    }
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const auto [dtype, shape] = std::visit(
          [](const auto& target) -> std::pair<DType, Shape> {
            using T = std::decay_t<decltype(target)>;
            if constexpr (std::is_same_v<T, Variable>) {
              return {target.dtype(), target.shape()};
            } else if constexpr (std::is_same_v<T, Tensor*>) {
              return {target->dtype(), target->shape()};
            } else if constexpr (std::is_same_v<T, DistributedIterator*>) {
              const auto n = 3 + internal::IteratorAccess::position(*target).shuffle_iterations.size();
              return {DType::kInt64, Shape{static_cast<std::int64_t>(n)}};
            } else {
              return {DType::kInt64, Shape{}};
            }
          },
          entries_[i].target);
      if (std::holds_alternative<DistributedIterator*>(entries_[i].target) &&
          (restored[i].dtype() != dtype || restored[i].shape() != shape)) {
        throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) +
                                   " was saved from another input pipeline than the tracked iterator's (its position "
                                   "is " + internal::describe(restored[i].dtype(), restored[i].shape()) +
                                   ", the tracked iterator's " + internal::describe(dtype, shape) +
                                   ": another number of shuffles)");
      }
      if (restored[i].dtype() != dtype || restored[i].shape() != shape) {
        throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) + " was saved with " +
                                   internal::describe(restored[i].dtype(), restored[i].shape()) + ", the tracked value has " +
                                   internal::describe(dtype, shape));
      }
      if (std::holds_alternative<DistributedIterator*>(entries_[i].target) && position_of(restored[i]).steps < 0) {
        throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) +
                                   " holds a position of " + std::to_string(position_of(restored[i]).steps) +
                                   " steps, expected at least 0");
      }
      if (std::holds_alternative<std::int32_t*>(entries_[i].target)) {
        const auto v = restored[i].item<std::int64_t>();
        if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max()) {
          throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) +
                                     " holds " + std::to_string(v) +
                                     ", the tracked int32 expects a value in [-2147483648, 2147483647]");
        }
      }
    }
  } catch (...) {
    failure = std::current_exception();
  }
  if (strategy.num_workers() > 1) {
    // No worker changes anything unless every worker's checks passed
    // (assigning a SyncOnReadVariable is a collective, too).
    const Tensor failed = strategy.gather_over_workers(Tensor({failure ? std::int64_t{1} : std::int64_t{0}}), 0);
    if (failure) std::rethrow_exception(failure);
    std::string workers;
    const auto flags = failed.data<std::int64_t>();
    for (std::size_t w = 0; w < flags.size(); ++w) {
      if (flags[w] != 0) workers += (workers.empty() ? "" : ", ") + std::to_string(w);
    }
    if (!workers.empty()) {
      throw AbortedError("Checkpoint::restore(" + path + "): worker(s) " + workers +
                         " could not restore it (their errors say why); no worker changed its state");
    }
  }
  if (failure) std::rethrow_exception(failure);
  // A tracked iterator's pipeline must be the one its position was saved
  // from (checked over the workers: every worker gets the same verdict).
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    auto* const* it = std::get_if<DistributedIterator*>(&entries_[i].target);
    if (it == nullptr) continue;
    const std::uint64_t mine =
        combined(over_workers(strategy, std::bit_cast<std::int64_t>(internal::IteratorAccess::fingerprint(**it))));
    if (mine != position_of(restored[i]).fingerprint) {
      throw InvalidArgumentError("checkpoint " + path + ": " + quote_name(entries_[i].name) +
                                 " was saved from another input pipeline than the tracked iterator's (" +
                                 internal::IteratorAccess::describe(**it) +
                                 "); restore it into an iterator of the same pipeline definition");
    }
  }
  // Iterators are replayed into new ones before anything changes, each
  // worker on its own (a replay fails when the pipeline ends before the
  // saved position, or raises the pipeline's own error); then the workers
  // agree on the outcome.
  std::vector<std::optional<DistributedIterator>> replayed(entries_.size());
  try {
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      if (auto* const* it = std::get_if<DistributedIterator*>(&entries_[i].target)) {
        replayed[i].emplace(internal::IteratorAccess::at(**it, position_of(restored[i]),
                                                         "checkpoint " + path + ": " + quote_name(entries_[i].name)));
      }
    }
  } catch (...) {
    failure = std::current_exception();
  }
  if (strategy.num_workers() > 1) {
    const Tensor failed = strategy.gather_over_workers(Tensor({failure ? std::int64_t{1} : std::int64_t{0}}), 0);
    if (failure) std::rethrow_exception(failure);
    for (std::int64_t f : failed.data<std::int64_t>()) {
      if (f != 0) {
        throw AbortedError("Checkpoint::restore(" + path + "): a worker could not replay a tracked iterator (its "
                           "error says why); no worker changed its state");
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
  // The replayed steps must hold the saved rows (summed over the workers:
  // every worker gets the same verdict): a partial batch inside the
  // stream is cut differently for another replica count.
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (!replayed[i].has_value()) continue;
    const internal::IteratorPosition saved = position_of(restored[i]);
    const std::int64_t rows = total(over_workers(strategy, internal::IteratorAccess::position(*replayed[i]).rows));
    if (rows != saved.rows) {
      throw InvalidArgumentError(
          "checkpoint " + path + ": " + quote_name(entries_[i].name) + " was saved after " +
          std::to_string(saved.steps) + " steps holding " + std::to_string(saved.rows) +
          " rows, and the same steps hold " + std::to_string(rows) + " rows split into " +
          std::to_string(internal::IteratorAccess::num_replicas(*replayed[i])) + " local replica(s)" +
          ": a partial batch inside the stream (batch without drop_remainder, then repeat) is cut differently for "
          "another replica count; restore with the replica count it was saved with");
    }
  }
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (replayed[i].has_value()) {
      *std::get<DistributedIterator*>(entries_[i].target) = std::move(*replayed[i]);
      continue;
    }
    std::visit(
        [&value = restored[i]](const auto& target) {
          using T = std::decay_t<decltype(target)>;
          if constexpr (std::is_same_v<T, Variable>) {
            Variable v = target;  // a handle: assigns the tracked variable
            v.assign(value);
          } else if constexpr (std::is_same_v<T, std::int64_t*>) {
            *target = value.item<std::int64_t>();
          } else if constexpr (std::is_same_v<T, std::uint64_t*>) {
            *target = std::bit_cast<std::uint64_t>(value.item<std::int64_t>());
          } else if constexpr (std::is_same_v<T, std::int32_t*>) {
            *target = static_cast<std::int32_t>(value.item<std::int64_t>());  // in range: checked above
          } else if constexpr (std::is_same_v<T, DistributedIterator*>) {
            // replaced above
          } else {
            *target = value;
          }
        },
        entries_[i].target);
  }
}

std::optional<std::string> latest_checkpoint(const std::string& directory) {
  std::error_code ec;
  const std::vector<std::uint64_t> numbers = checkpoint_numbers(directory, kName, ec);
  if (ec || numbers.empty()) return std::nullopt;
  return join(directory, checkpoint_file_name(kName, numbers.back()));
}

}  // namespace distribute
