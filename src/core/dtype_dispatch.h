// Calls a generic lambda with a value of the C++ type behind a DType, so that
// one template serves all four number types (a switch, not a type macro).
// kString has no arithmetic: it raises InvalidArgumentError (`what` names the
// operation); callers that support strings test for it first.
#pragma once

#include <cstdint>

#include "distribute/types.h"

namespace distribute::internal {

// InvalidArgumentError: `what` needs a number dtype and got `dtype` (string).
[[noreturn]] void throw_not_numeric(DType dtype, const char* what);

template <class F>
decltype(auto) dispatch_dtype(DType dtype, F&& f, const char* what = "this operation") {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt32: return f(std::int32_t{});
    case DType::kInt64: return f(std::int64_t{});
    case DType::kString: throw_not_numeric(dtype, what);
  }
  return f(float{});  // unreachable: every enumerator is handled above
}

}  // namespace distribute::internal
