// Fuzzes the readers of TF's data files: TFRecordDataset's framing,
// parse_example's tf.train.Example decoding of each record, and
// TextLineDataset. A distribute::Error (DataLossError for a damaged file,
// InvalidArgumentError for a record that is not the spec's Example) is the
// expected outcome of bad input; anything else (another exception, a
// sanitizer report) is a bug.
//
// Input: one options byte (bit 0: read the file as text lines instead;
// bit 1: a default value for every feature, so that missing features
// parse; bits 2-3: compression 1 ZLIB, 2 GZIP, else none), then the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "distribute/dataset.h"
#include "distribute/errors.h"
#include "distribute/parsing.h"
#include "fuzz_util.h"

namespace {

using distribute::DType;
using distribute::Tensor;

distribute::FeatureSpec spec(bool defaults) {
  distribute::FeatureSpec s{
      {"id", {{1}, DType::kInt64, std::nullopt}},
      {"xy", {{2}, DType::kFloat32, std::nullopt}},
      {"name", {{}, DType::kString, std::nullopt}},
  };
  if (defaults) {
    s.at("id").default_value = Tensor(std::vector<std::int64_t>{0}, {1});
    s.at("xy").default_value = Tensor{0.f, 0.f};
    s.at("name").default_value = Tensor(std::string());
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const distribute::fuzz::ScratchFile file(".tfrecord");
  if (size == 0) return 0;
  const bool lines = (data[0] & 1) != 0;
  static const distribute::FeatureSpec without = spec(false), with = spec(true);
  const distribute::FeatureSpec& features = (data[0] & 2) != 0 ? with : without;
  file.write(data + 1, size - 1);
  try {
    distribute::ReaderOptions options;
    const int compression = (data[0] >> 2) & 3;
    options.compression_type = compression == 1 ? "ZLIB" : compression == 2 ? "GZIP" : "";
    options.buffer_size = 4096;  // refills (and their edges) even in small inputs
    const distribute::Dataset records = lines ? distribute::TextLineDataset({file.path()}, options)
                                              : distribute::TFRecordDataset({file.path()}, options);
    std::size_t bytes = 0;
    for (const distribute::Element& e : records) {
      const Tensor& record = e.tensor();
      if (record.dtype() != DType::kString || record.rank() != 0) __builtin_trap();
      bytes += record.strings()[0].size();
      // Records are never longer than the file (when it is not compressed).
      if (compression == 0 && bytes > size) __builtin_trap();
      try {
        const auto parsed = distribute::parse_single_example(record, features);
        if (parsed.at("xy").shape() != distribute::Shape{2} || parsed.at("id").data<std::int64_t>().size() != 1) {
          __builtin_trap();
        }
      } catch (const distribute::InvalidArgumentError&) {
      }
    }
  } catch (const distribute::DataLossError&) {
  }
  return 0;
}
