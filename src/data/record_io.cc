#include "data/record_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>

#include <zlib.h>

#include "core/crc32c.h"
#include "distribute/errors.h"

namespace distribute::internal {
namespace {

constexpr std::size_t kDefaultBufferSize = 256 * 1024;
constexpr std::size_t kHeaderBytes = 12;  // length + its masked CRC
constexpr std::uint32_t kMaskDelta = 0xa282ead8u;

std::uint64_t load_le64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::uint32_t load_le32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::uint32_t masked_crc_of(const char* data, std::size_t n) {
  return mask_crc32c(crc32c(std::as_bytes(std::span<const char>(data, n))));
}

[[noreturn]] void throw_data_loss(const InputFile& file, std::uint64_t record, const std::string& what) {
  throw DataLossError("TFRecordDataset: corrupted record at offset " + std::to_string(record) + " of '" +
                      file.name() + "': " + what);
}

}  // namespace

// zlib's inflate over the file's bytes: ZLIB (RFC 1950) or GZIP (RFC 1952,
// members one after the other, as gzip writes them).
struct InputFile::Inflater {
  explicit Inflater(Compression compression) : gzip(compression == Compression::kGzip) {
    // 15: the largest window; +16: a gzip header and trailer instead of zlib's.
    if (inflateInit2(&stream, gzip ? 15 + 16 : 15) != Z_OK) throw InternalError("zlib: inflateInit2 failed");
  }
  ~Inflater() { inflateEnd(&stream); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  z_stream stream{};
  bool gzip;
  std::string input;       // compressed bytes read from the file
  bool file_ended = false;
  bool stream_ended = false;  // the last member's trailer was read
};

InputFile::InputFile(const std::string& path, std::size_t buffer_size, Compression compression, const char* who)
    : name_(path), chunk_(buffer_size == 0 ? kDefaultBufferSize : buffer_size) {
  file_.reset(std::fopen(path.c_str(), "rb"));
  if (file_ == nullptr) {
    const int error = errno;
    const std::string message = std::string(who) + ": cannot open '" + path + "' for reading: " + std::strerror(error);
    if (error == ENOENT || error == ENOTDIR) throw NotFoundError(message);
    throw UnknownError(message);
  }
  // The file is read in chunk_-byte pieces into buffer_: stdio's own buffer
  // would only add a copy.
  std::setvbuf(file_.get(), nullptr, _IONBF, 0);
  if (compression != Compression::kNone) inflater_ = std::make_unique<Inflater>(compression);
}

InputFile::~InputFile() = default;

std::size_t InputFile::read_file(char* out, std::size_t n) {
  const std::size_t got = std::fread(out, 1, n, file_.get());
  if (got < n && std::ferror(file_.get()) != 0) {
    throw UnknownError("cannot read '" + name_ + "': " + std::strerror(errno));
  }
  return got;
}

bool InputFile::fill() {
  // The buffer is consumed: on an error it stays so (nothing stale is read
  // again by a later call).
  buffer_.clear();
  pos_ = 0;
  std::string& next = spare_;  // (its capacity kept from earlier fills)
  next.resize(chunk_);
  const std::size_t produced = inflater_ == nullptr ? read_file(next.data(), chunk_) : inflate_into(next);
  next.resize(produced);
  buffer_.swap(next);  // the consumed buffer is the next spare
  return produced > 0;
}

std::size_t InputFile::inflate_into(std::string& out) {
  Inflater& z = *inflater_;
  std::size_t produced = 0;
  while (produced == 0) {
    if (z.stream.avail_in == 0 && !z.file_ended) {
      z.input.resize(chunk_);
      z.input.resize(read_file(z.input.data(), chunk_));
      z.file_ended = z.input.empty();
      z.stream.next_in = reinterpret_cast<Bytef*>(z.input.data());
      z.stream.avail_in = static_cast<uInt>(z.input.size());
    }
    if (z.stream_ended) {
      // After a member's trailer: the end, or another gzip member.
      if (z.stream.avail_in == 0 && z.file_ended) break;
      if (z.stream.avail_in == 0) continue;
      if (!z.gzip) {
        throw DataLossError("'" + name_ + "': " + std::to_string(z.stream.avail_in) +
                            " bytes after the end of the ZLIB stream");
      }
      inflateReset(&z.stream);
      z.stream_ended = false;
    }
    z.stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    z.stream.avail_out = static_cast<uInt>(chunk_ - produced);
    const int status = inflate(&z.stream, Z_NO_FLUSH);
    produced = chunk_ - z.stream.avail_out;
    if (status == Z_STREAM_END) {
      z.stream_ended = true;
    } else if (status == Z_BUF_ERROR && z.stream.avail_in == 0 && z.file_ended) {
      if (z.stream.total_in == 0) break;  // an empty file: an empty stream
      throw DataLossError("'" + name_ + "': the " + std::string(z.gzip ? "GZIP" : "ZLIB") +
                          " stream ends early (the file is cut short), after " + std::to_string(offset_) +
                          " decompressed bytes were read");
    } else if (status != Z_OK && status != Z_BUF_ERROR) {
      throw DataLossError("'" + name_ + "': not valid " + std::string(z.gzip ? "GZIP" : "ZLIB") + " data (" +
                          (z.stream.msg != nullptr ? z.stream.msg : "zlib error " + std::to_string(status)) +
                          ")");
    }
  }
  return produced;
}

std::size_t InputFile::read(std::uint64_t n, std::string& out) {
  std::size_t total = 0;
  while (n > 0) {
    if (pos_ == buffer_.size() && !fill()) break;
    const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(n, buffer_.size() - pos_));
    out.append(buffer_, pos_, take);
    pos_ += take;
    offset_ += take;
    total += take;
    n -= take;
  }
  return total;
}

std::optional<std::string> InputFile::read_line() {
  std::string line;
  bool any = false;
  while (true) {
    if (pos_ == buffer_.size() && !fill()) break;
    any = true;
    const std::size_t newline = buffer_.find('\n', pos_);
    const std::size_t end = newline == std::string::npos ? buffer_.size() : newline;
    line.append(buffer_, pos_, end - pos_);
    offset_ += end - pos_;
    pos_ = end;
    if (newline != std::string::npos) {
      ++pos_;
      ++offset_;
      std::erase(line, '\r');
      return line;
    }
  }
  std::erase(line, '\r');
  if (!any || line.empty()) return std::nullopt;  // "...\n\r" at the end: nothing more
  return line;
}

std::uint32_t mask_crc32c(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

std::optional<std::string> read_tfrecord(InputFile& file) {
  const std::uint64_t start = file.offset();
  std::string header;
  const std::size_t got = file.read(kHeaderBytes, header);
  if (got == 0) return std::nullopt;
  if (got < kHeaderBytes) {
    throw_data_loss(file, start, "the file ends inside the record's header (" + std::to_string(got) + " of 12 bytes)");
  }
  const std::uint64_t length = load_le64(header.data());
  const std::uint32_t length_crc = load_le32(header.data() + 8);
  if (masked_crc_of(header.data(), 8) != length_crc) {
    throw_data_loss(file, start, "the length's checksum does not match (not a TFRecord file, or damaged)");
  }
  std::string record;
  if (file.read(length, record) < length) {
    throw_data_loss(file, start,
                    "truncated: the record holds " + std::to_string(length) + " bytes, the file ends after " +
                        std::to_string(record.size()));
  }
  std::string footer;
  if (file.read(4, footer) < 4) throw_data_loss(file, start, "truncated: the file ends inside the data's checksum");
  if (masked_crc_of(record.data(), record.size()) != load_le32(footer.data())) {
    throw_data_loss(file, start, "the data's checksum does not match");
  }
  return record;
}

}  // namespace distribute::internal
