// Calls a generic lambda with a value of the C++ type behind a DType, so that
// one template serves all four element types (a switch, not a type macro).
#pragma once

#include <cstdint>

#include "distribute/types.h"

namespace distribute::internal {

template <class F>
decltype(auto) dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt32: return f(std::int32_t{});
    case DType::kInt64: return f(std::int64_t{});
  }
  return f(float{});  // unreachable: every enumerator is handled above
}

}  // namespace distribute::internal
