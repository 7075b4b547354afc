// Fuzzes the CSV reader, load_csv(). A distribute::Error is the expected
// outcome of a bad file; anything else (another exception, a sanitizer
// report) is a bug.
//
// Input: one options byte (bit 0: a header line; bit 1: ';' instead of ','
// as the delimiter; bit 2: a tab), then the file.
#include <cstddef>
#include <cstdint>

#include "distribute/dataset.h"
#include "distribute/errors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const distribute::fuzz::ScratchFile file(".csv");
  if (size == 0) return 0;
  distribute::CsvOptions options;
  options.header = (data[0] & 1) != 0;
  if ((data[0] & 2) != 0) options.delimiter = ';';
  if ((data[0] & 4) != 0) options.delimiter = '\t';
  file.write(data + 1, size - 1);
  try {
    const distribute::Tensor table = distribute::load_csv(file.path(), options);
    // What a reader of the table does first.
    if (table.rank() != 2 || table.data<double>().size() != static_cast<std::size_t>(table.num_elements())) {
      __builtin_trap();
    }
  } catch (const distribute::Error&) {
  }
  return 0;
}
