#include "core/describe.h"

namespace distribute::internal {

std::string describe(DType dtype, const Shape& shape) {
  return "shape " + shape_string(shape) + " dtype " + std::string(dtype_name(dtype));
}

std::string describe(const Tensor& t) { return describe(t.dtype(), t.shape()); }

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
