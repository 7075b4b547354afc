// Reading TF's data files: a buffered input file, its lines (TextLineDataset)
// and its TFRecord framing (TFRecordDataset). The framing of one record:
//   uint64 length, little-endian
//   uint32 masked CRC32C of the 8 length bytes
//   length bytes of data
//   uint32 masked CRC32C of the data
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

namespace distribute::internal {

// How the file's bytes are stored (TF's compression_type "", "ZLIB", "GZIP").
enum class Compression { kNone, kZlib, kGzip };

// A file read sequentially through a buffer, decompressed on the way when
// it is ZLIB or GZIP. Not thread-safe.
class InputFile {
 public:
  static constexpr std::size_t kMaxBufferSize = std::size_t{1} << 30;

  // Opens `path` (NotFoundError naming `who` and the path, with the
  // system's reason, when it cannot). buffer_size 0: 256 KiB; at most
  // kMaxBufferSize (zlib counts in 32 bits).
  InputFile(const std::string& path, std::size_t buffer_size, Compression compression, const char* who);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& name() const noexcept { return name_; }
  // Bytes of the (decompressed) stream consumed so far.
  std::uint64_t offset() const noexcept { return offset_; }
  // Appends up to n bytes to `out`; returns how many (fewer only at the end
  // of the stream). UnknownError for a read error; DataLossError naming the
  // file for compressed data that is damaged or cut short.
  std::size_t read(std::uint64_t n, std::string& out);
  // The next line without its '\n', every '\r' in it dropped (as TF's
  // TextLineDataset does); nullopt at the end. A last line without '\n'
  // counts unless it is empty.
  std::optional<std::string> read_line();

 private:
  struct Closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  struct Inflater;  // zlib's stream (record_io.cc)

  // Replaces the buffer's consumed bytes with the next ones of the stream;
  // false at its end.
  bool fill();
  // Up to out.size() decompressed bytes into `out`; 0 at the stream's end.
  std::size_t inflate_into(std::string& out);
  std::size_t read_file(char* out, std::size_t n);

  std::unique_ptr<std::FILE, Closer> file_;
  std::string name_;
  std::size_t chunk_;
  std::string buffer_;  // stream bytes [offset_ - pos_, offset_ - pos_ + size)
  std::string spare_;   // the previous buffer, filled next (no allocation per fill)
  std::size_t pos_ = 0;
  std::uint64_t offset_ = 0;
  std::unique_ptr<Inflater> inflater_;  // with compression only
};

// TF's masking of a CRC32C stored in a TFRecord file.
std::uint32_t mask_crc32c(std::uint32_t crc);

// The next record of a TFRecord file, or nullopt at a clean end (the file
// ends between records). DataLossError naming the file and the record's
// offset for a checksum that does not match, or a file that ends inside a
// record (TF ends a file silently when it stops inside a record's 12-byte
// header; this reader reports that as data loss too).
std::optional<std::string> read_tfrecord(InputFile& file);

}  // namespace distribute::internal
