// Numeric CSV files and the shipped digits data set.
#include <charconv>
#include <fstream>
#include <string>
#include <vector>

#include "distribute/dataset.h"
#include "distribute/errors.h"

#ifndef DISTRIBUTE_SOURCE_DATA_DIR
#define DISTRIBUTE_SOURCE_DATA_DIR ""
#endif
#ifndef DISTRIBUTE_INSTALL_DATA_DIR
#define DISTRIBUTE_INSTALL_DATA_DIR ""
#endif

namespace distribute {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

Tensor load_csv(const std::string& path, const CsvOptions& options) {
  std::ifstream in(path);
  if (!in) throw NotFoundError("load_csv: cannot open '" + path + "'");
  std::vector<double> values;
  std::int64_t columns = -1, rows = 0, line_number = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_number;
    if (options.header && line_number == 1) continue;
    if (trim(line).empty()) continue;
    std::int64_t fields = 0;
    std::string_view rest(line);
    while (true) {
      const auto cut = rest.find(options.delimiter);
      const std::string_view field = trim(rest.substr(0, cut));
      double v = 0;
      const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
      if (field.empty() || ec != std::errc() || ptr != field.data() + field.size()) {
        throw InvalidArgumentError("load_csv: " + path + ":" + std::to_string(line_number) + ": expected a number in field " +
                                   std::to_string(fields + 1) + ", got '" + std::string(field) + "'");
      }
      values.push_back(v);
      ++fields;
      if (cut == std::string_view::npos) break;
      rest.remove_prefix(cut + 1);
    }
    if (columns >= 0 && fields != columns) {
      throw InvalidArgumentError("load_csv: " + path + ":" + std::to_string(line_number) + ": expected " +
                                 std::to_string(columns) + " fields (as on the first row), got " + std::to_string(fields));
    }
    columns = fields;
    ++rows;
  }
  if (in.bad()) throw DataLossError("load_csv: error while reading '" + path + "'");
  if (rows == 0) throw InvalidArgumentError("load_csv: expected at least one row of numbers in '" + path + "', got none");
  return Tensor(std::move(values), {rows, columns});
}

std::string default_digits_path() {
  for (const char* dir : {DISTRIBUTE_INSTALL_DATA_DIR, DISTRIBUTE_SOURCE_DATA_DIR}) {
    if (*dir == '\0') continue;
    const std::string path = std::string(dir) + "/digits.csv";
    if (std::ifstream(path).good()) return path;
  }
  return std::string(DISTRIBUTE_SOURCE_DATA_DIR) + "/digits.csv";
}

Digits load_digits() { return load_digits(default_digits_path()); }

Digits load_digits(const std::string& path) {
  const Tensor table = load_csv(path);
  if (table.dim(1) != 65) {
    throw InvalidArgumentError("load_digits: expected 65 columns (64 pixels and a label) in '" + path + "', got " +
                               std::to_string(table.dim(1)));
  }
  const std::int64_t n = table.dim(0);
  auto cells = table.data<double>();
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  images.reserve(static_cast<std::size_t>(n * 64));
  labels.reserve(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t c = 0; c < 64; ++c) images.push_back(static_cast<float>(cells[static_cast<std::size_t>(r * 65 + c)]));
    const double label = cells[static_cast<std::size_t>(r * 65 + 64)];
    if (label < 0 || label > 9 || label != static_cast<double>(static_cast<std::int32_t>(label))) {
      throw InvalidArgumentError("load_digits: " + path + ":" + std::to_string(r + 1) +
                                 ": expected a label 0..9 in the last column, got " + std::to_string(label));
    }
    labels.push_back(static_cast<std::int32_t>(label));
  }
  return {Tensor(std::move(images), {n, 64}), Tensor(std::move(labels), {n})};
}

}  // namespace distribute
