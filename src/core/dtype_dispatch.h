// Calls a generic lambda with a value of the C++ type behind a DType, so that
// one template serves all four number types (a switch, not a type macro).
// kString has no arithmetic: it raises InvalidArgumentError (`what` names the
// operation); callers that support strings test for it first.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

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

// `x` as a To, defined for every value: a float that is NaN becomes 0 and
// one beyond To's range its nearest end (static_cast is undefined there);
// an integer narrowed wraps around in two's complement; everything else is
// static_cast.
template <class To, class From>
To convert_number(From x) {
  if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    static_assert(std::is_signed_v<To>, "the range's ends below are a signed type's");
    if (std::isnan(x)) return To{0};
    // -2^63 and 2^63 (2^31) are exact in float and double; max() may not be.
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());
    constexpr From hi = -lo;
    if (x <= lo) return std::numeric_limits<To>::min();
    if (x >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace distribute::internal
