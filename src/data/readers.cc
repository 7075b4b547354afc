// TF's file readers: TextLineDataset and TFRecordDataset (the file formats in
// record_io.h).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset_node.h"
#include "data/record_io.h"
#include "distribute/errors.h"

namespace distribute {
namespace internal {
namespace {

enum class FileFormat { kLines, kTFRecord };

const char* format_name(FileFormat format) {
  return format == FileFormat::kLines ? "TextLineDataset" : "TFRecordDataset";
}

// The records (or lines) of a list of files as string scalars.
class FileRecordsNode final : public DatasetNode {
 public:
  FileRecordsNode(FileFormat format, std::vector<std::string> paths, ReaderOptions options)
      : format_(format), paths_(std::move(paths)), options_(std::move(options)) {}

  std::unique_ptr<ElementIterator> make_iterator() const override {
    if (paths_.size() > 1 && (options_.num_parallel_reads > 1 || options_.num_parallel_reads == Dataset::kAutotune)) {
      return interleaved().node()->make_iterator();
    }
    return std::make_unique<It>(format_, paths_, static_cast<std::size_t>(options_.buffer_size), compression());
  }
  std::string describe() const override {
    return std::string(format_name(format_)) + "(" + std::to_string(paths_.size()) + " files)";
  }
  std::optional<int> static_min_rank() const override { return 0; }
  std::optional<ElementSpec> static_element_spec() const override {
    return ElementSpec{{TensorSpec{DType::kString, {}}}, false};
  }
  std::size_t num_files() const override { return paths_.size(); }
  std::shared_ptr<const DatasetNode> shard_files(int num_shards, int index) const override {
    std::vector<std::string> mine;
    for (std::size_t i = static_cast<std::size_t>(index); i < paths_.size(); i += static_cast<std::size_t>(num_shards)) {
      mine.push_back(paths_[i]);
    }
    return std::make_shared<FileRecordsNode>(format_, std::move(mine), options_);
  }

 private:
  class It final : public ElementIterator {
   public:
    It(FileFormat format, std::vector<std::string> paths, std::size_t buffer_size, Compression compression)
        : format_(format), paths_(std::move(paths)), buffer_size_(buffer_size), compression_(compression) {}
    std::optional<Element> next() override {
      while (true) {
        if (!file_.has_value()) {
          if (next_file_ >= paths_.size()) return std::nullopt;
          file_.emplace(paths_[next_file_++], buffer_size_, compression_, format_name(format_));
        }
        std::optional<std::string> record;
        try {
          record = format_ == FileFormat::kLines ? file_->read_line() : read_tfrecord(*file_);
        } catch (const DataLossError&) {
          file_.reset();  // as TF: after a damaged record the iteration goes on with the next file
          throw;
        }
        if (record.has_value()) return Element(Tensor(std::move(*record)));
        file_.reset();
      }
    }

   private:
    FileFormat format_;
    std::vector<std::string> paths_;
    std::size_t buffer_size_;
    Compression compression_;
    std::size_t next_file_ = 0;
    std::optional<InputFile> file_;
  };

  Compression compression() const {
    if (options_.compression_type == "ZLIB") return Compression::kZlib;
    if (options_.compression_type == "GZIP") return Compression::kGzip;
    return Compression::kNone;
  }

  // TF's num_parallel_reads: the files interleaved one record at a time.
  Dataset interleaved() const {
    ReaderOptions one = options_;
    one.num_parallel_reads = 0;
    const FileFormat format = format_;
    const std::int64_t cycle = options_.num_parallel_reads;
    return Dataset::from_tensor_slices(Tensor(paths_, Shape{static_cast<std::int64_t>(paths_.size())}))
        .interleave(
            [format, one](const Element& path) {
              return Dataset(std::make_shared<FileRecordsNode>(
                  format, std::vector<std::string>{path[0].strings()[0]}, one));
            },
            cycle, /*block_length=*/1, /*num_parallel_calls=*/cycle);
  }

  FileFormat format_;
  std::vector<std::string> paths_;
  ReaderOptions options_;
};

Dataset make_reader(FileFormat format, std::vector<std::string> filenames, ReaderOptions options) {
  const std::string who = format_name(format);
  if (filenames.empty()) throw InvalidArgumentError(who + ": expected at least one file name, got none");
  const std::string& c = options.compression_type;
  if (!c.empty() && c != "GZIP" && c != "ZLIB") {
    throw InvalidArgumentError(who + ": unsupported compression_type '" + c + "'; expected '', 'ZLIB' or 'GZIP'");
  }
  if (options.buffer_size < 0 || static_cast<std::uint64_t>(options.buffer_size) > InputFile::kMaxBufferSize) {
    throw InvalidArgumentError(who + ": expected 0 <= buffer_size <= 2^30 (bytes read at once; 0 for the default), got " +
                               std::to_string(options.buffer_size));
  }
  if (options.num_parallel_reads < 0 && options.num_parallel_reads != Dataset::kAutotune) {
    throw InvalidArgumentError(who + ": expected num_parallel_reads >= 0 or kAutotune, got " +
                               std::to_string(options.num_parallel_reads));
  }
  return Dataset(std::make_shared<FileRecordsNode>(format, std::move(filenames), std::move(options)));
}

}  // namespace
}  // namespace internal

Dataset TextLineDataset(std::vector<std::string> filenames, ReaderOptions options) {
  return internal::make_reader(internal::FileFormat::kLines, std::move(filenames), std::move(options));
}

Dataset TFRecordDataset(std::vector<std::string> filenames, ReaderOptions options) {
  return internal::make_reader(internal::FileFormat::kTFRecord, std::move(filenames), std::move(options));
}

}  // namespace distribute
