#include "core/describe.h"

#include <charconv>

namespace distribute::internal {

std::string describe(DType dtype, const Shape& shape) {
  return "shape " + shape_string(shape) + " dtype " + std::string(dtype_name(dtype));
}

std::string describe(const Tensor& t) { return describe(t.dtype(), t.shape()); }

std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  // Back over continuation bytes (10xxxxxx) to the start of the character
  // the cut falls in, which is left out whole.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0u) == 0x80u) --end;
  return text.substr(0, end);
}

std::string hex(std::uint64_t v) {
  char text[2 + 16] = {'0', 'x'};
  const auto end = std::to_chars(text + 2, text + sizeof(text), v, 16).ptr;
  return std::string(text, end);
}

std::string list_ids(const std::vector<int>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace distribute::internal
