// The checkpoint file format of docs/checkpoint_format.md: encoding a list
// of named tensors into the bytes of one file, and decoding (and checking)
// such bytes.
#include "checkpoint/checkpoint_codec.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

#include "checkpoint/checkpoint_files.h"
#include "core/crc32c.h"
#include "core/describe.h"
#include "core/element_count.h"
#include "distribute/checkpoint.h"
#include "distribute/errors.h"

namespace distribute::internal {

// Tensor data is written as the host lays it out; the format says
// little-endian.
static_assert(std::endian::native == std::endian::little, "the checkpoint format stores little-endian data");

namespace {

// ---- Format constants (docs/checkpoint_format.md) ----
constexpr char kMagic[8] = {'D', 'I', 'S', 'T', 'C', 'K', 'P', 'T'};
constexpr std::size_t kHeaderSize = 28;           // magic, version, count, file length, header CRC
constexpr std::size_t kHeaderCrcOffset = 24;      // the CRC covers bytes [0, 24)

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
    case DType::kString:
      break;  // not in the format: encode() refuses string tensors
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

}  // namespace

std::vector<std::byte> encode(const std::vector<NamedTensor>& entries) {
  Writer w;
  w.bytes(std::as_bytes(std::span<const char>(kMagic)));
  w.u32(Checkpoint::kFormatVersion);
  w.u32(static_cast<std::uint32_t>(entries.size()));
  w.u64(0);  // the file length, patched below
  w.u32(0);  // the header CRC, patched below
  for (const NamedTensor& e : entries) {
    if (!is_numeric(e.value.dtype())) {
      throw UnimplementedError("Checkpoint: cannot save '" + e.name + "': the format holds number tensors, got dtype " +
                               std::string(dtype_name(e.value.dtype())));
    }
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
namespace {

// Checks the fixed header (magic, version, header CRC, file length) and
// returns the entry count it holds.
std::uint32_t check_header(std::span<const std::byte> file, const std::string& where) {
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
    throw DataLossError(where + "the header is corrupted: CRC32C " + hex(header_crc) + " of its bytes, stored " +
                        hex(stored_header_crc));
  }
  const std::uint64_t length = load_le(file.data() + 16, 8);
  if (length != file.size()) {
    throw DataLossError(where + (file.size() < length ? "truncated" : "longer than written") + ": expected " +
                        std::to_string(length) + " bytes (the length in its header), got " +
                        std::to_string(file.size()) + " bytes");
  }
  return static_cast<std::uint32_t>(load_le(file.data() + 12, 4));
}

// One entry's fields as stored, its CRC checked.
struct RawEntry {
  std::string name;
  std::string named;  // "entry 3 ('name')", for messages
  std::uint32_t code = 0;
  std::vector<std::uint64_t> dims;
  std::span<const std::byte> data;
};

RawEntry read_raw_entry(Reader& in, const std::string& where, std::uint32_t index) {
  const std::string entry = "entry " + std::to_string(index);
  const std::size_t start = in.position();
  const std::uint32_t name_length = in.u32("name length", entry);
  if (name_length == 0 || name_length > kMaxCheckpointNameLength) {
    throw DataLossError(where + entry + " is malformed: name length " + std::to_string(name_length) +
                        ", expected 1 to " + std::to_string(kMaxCheckpointNameLength));
  }
  RawEntry raw;
  const auto name_bytes = in.take(name_length, "name", entry);
  raw.name.assign(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
  raw.named = entry + " (" + quote_name(raw.name) + ")";
  raw.code = in.u32("dtype", raw.named);
  const std::uint32_t rank = in.u32("rank", raw.named);
  if (rank > Shape::kMaxRank) {
    // Checked before reading the dimensions, so that a damaged rank does
    // not read far; the CRC is checked when the entry's extent is known.
    throw DataLossError(where + raw.named + " is corrupted: rank " + std::to_string(rank) + ", at most " +
                        std::to_string(Shape::kMaxRank) + " is supported");
  }
  raw.dims.resize(rank);
  for (auto& d : raw.dims) d = in.u64("dimensions", raw.named);
  const std::uint64_t data_length = in.u64("data length", raw.named);
  raw.data = in.take(data_length, "data", raw.named);
  const std::size_t end = in.position();
  const std::uint32_t stored_crc = in.u32("CRC32C", raw.named);
  const std::uint32_t crc = internal::crc32c(in.span(start, end));
  if (crc != stored_crc) {
    throw DataLossError(where + raw.named + " is corrupted: CRC32C " + hex(crc) + " of its bytes, stored " +
                        hex(stored_crc));
  }
  return raw;
}

// The tensor of an entry whose CRC matched: what follows is what was
// written, so a failure here means a writer bug or a deliberately crafted
// file.
Tensor tensor_of(const RawEntry& raw, const std::string& where) {
  const std::optional<DType> dtype = dtype_from_code(raw.code);
  if (!dtype.has_value()) {
    throw DataLossError(where + raw.named + " has the unknown dtype code " + std::to_string(raw.code));
  }
  Shape shape;
  for (const std::uint64_t d : raw.dims) {
    if (d > static_cast<std::uint64_t>(INT64_MAX)) {
      throw DataLossError(where + raw.named + " has an impossible dimension " + std::to_string(d));
    }
    shape.push_back(static_cast<std::int64_t>(d));
  }
  // Tensor's own check (core/element_count.h), so that a shape the file
  // can hold but no tensor can is reported here, with the file and entry.
  // (No dimension is negative: each is at most INT64_MAX.)
  using Problem = internal::ElementCount::Problem;
  const internal::ElementCount shape_count = internal::count_elements(shape, *dtype);
  if (shape_count.problem == Problem::kTooManyElements) {
    throw DataLossError(where + raw.named + " has an impossible shape " + shape_string(shape) +
                        ": expected at most 2^63 - 1 elements, got more in its first " +
                        std::to_string(shape_count.dimension + 1) + " dimensions");
  }
  if (shape_count.problem == Problem::kTooManyBytes) {
    throw DataLossError(where + raw.named + " has an impossible shape: " + internal::describe(*dtype, shape) +
                        " needs more than 2^63 - 1 bytes of data, the entry has " + std::to_string(raw.data.size()));
  }
  if (static_cast<std::uint64_t>(shape_count.bytes) != raw.data.size()) {
    throw DataLossError(where + raw.named + ": " + internal::describe(*dtype, shape) + " needs " +
                        std::to_string(shape_count.bytes) + " bytes of data, the entry has " +
                        std::to_string(raw.data.size()));
  }
  void* out = nullptr;
  Tensor value = internal::allocate_tensor(*dtype, shape, &out);
  if (!raw.data.empty()) std::memcpy(out, raw.data.data(), raw.data.size());
  return value;
}

}  // namespace

std::vector<NamedTensor> decode(std::span<const std::byte> file, const std::string& path) {
  const std::string where = "checkpoint " + path + ": ";
  const std::uint32_t count = check_header(file, where);
  Reader in(file, path);
  in.take(kHeaderSize, "header", "the header");
  std::vector<NamedTensor> entries;
  std::set<std::string> names;
  for (std::uint32_t i = 0; i < count; ++i) {
    RawEntry raw = read_raw_entry(in, where, i);
    Tensor value = tensor_of(raw, where);
    if (!names.insert(raw.name).second) {
      throw DataLossError(where + raw.named + " repeats the name of an earlier entry");
    }
    entries.push_back({std::move(raw.name), std::move(value)});
  }
  if (in.remaining() != 0) {
    throw DataLossError(where + "malformed: " + std::to_string(in.remaining()) + " bytes after the last of " +
                        std::to_string(count) + " entries");
  }
  return entries;
}

}  // namespace distribute::internal
