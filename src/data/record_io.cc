#include "data/record_io.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <span>

#include "core/crc32c.h"
#include "distribute/errors.h"

namespace distribute::internal {
namespace {

constexpr std::size_t kDefaultBufferSize = 256 * 1024;
constexpr std::size_t kHeaderBytes = 12;           // length + its masked CRC
constexpr std::uint64_t kChunk = 1 << 20;          // data is read in chunks: a corrupt length allocates nothing
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

InputFile::InputFile(const std::string& path, std::size_t buffer_size, const char* who) : name_(path) {
  file_.reset(std::fopen(path.c_str(), "rb"));
  if (file_ == nullptr) {
    const int error = errno;
    const std::string message =
        std::string(who) + ": cannot open '" + path + "' for reading: " + std::strerror(error);
    if (error == ENOENT || error == ENOTDIR) throw NotFoundError(message);
    throw UnknownError(message);
  }
  const std::size_t size = buffer_size == 0 ? kDefaultBufferSize : buffer_size;
  buffer_ = std::make_unique<char[]>(size);
  std::setvbuf(file_.get(), buffer_.get(), _IOFBF, size);
}

InputFile::InputFile(std::FILE* file, std::string name) : file_(file), name_(std::move(name)) {}

InputFile::~InputFile() { std::free(line_); }

void InputFile::throw_read_error() const {
  throw UnknownError("cannot read '" + name_ + "' at offset " + std::to_string(offset_) + ": " +
                     std::strerror(errno));
}

std::size_t InputFile::read(std::uint64_t n, std::string& out) {
  std::size_t total = 0;
  while (n > 0) {
    const auto chunk = static_cast<std::size_t>(std::min(n, kChunk));
    const std::size_t before = out.size();
    out.resize(before + chunk);
    const std::size_t got = std::fread(out.data() + before, 1, chunk, file_.get());
    out.resize(before + got);
    total += got;
    offset_ += got;
    n -= got;
    if (got < chunk) {
      if (std::ferror(file_.get()) != 0) throw_read_error();
      break;
    }
  }
  return total;
}

std::optional<std::string> InputFile::read_line() {
  errno = 0;
  const ssize_t got = getdelim(&line_, &line_capacity_, '\n', file_.get());
  if (got < 0) {
    if (std::ferror(file_.get()) != 0) throw_read_error();
    return std::nullopt;
  }
  offset_ += static_cast<std::uint64_t>(got);
  std::string line(line_, static_cast<std::size_t>(got));
  const bool ended = !line.empty() && line.back() == '\n';
  if (ended) line.pop_back();
  std::erase(line, '\r');
  if (!ended && line.empty()) return std::nullopt;  // "...\n\r" at the end: nothing more
  return line;
}

std::uint32_t mask_crc32c(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

std::optional<std::string> read_tfrecord(InputFile& file) {
  const std::uint64_t start = file.offset();
  std::string header;
  const std::size_t got = file.read(kHeaderBytes, header);
  if (got == 0) return std::nullopt;
  if (got < kHeaderBytes) {
    throw_data_loss(file, start,
                    "the file ends inside the record's header (" + std::to_string(got) + " of 12 bytes)");
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
  if (file.read(4, footer) < 4) {
    throw_data_loss(file, start, "truncated: the file ends inside the data's checksum");
  }
  if (masked_crc_of(record.data(), record.size()) != load_le32(footer.data())) {
    throw_data_loss(file, start, "the data's checksum does not match");
  }
  return record;
}

}  // namespace distribute::internal
