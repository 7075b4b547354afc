// Formatting of tensor values as text identical to numpy's str().
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "distribute/types.h"

namespace distribute::internal {

// Text of the values exactly as numpy's str() prints them with default print
// options (numpy >= 1.14, non-legacy: precision=8, floatmode='maxprec',
// suppress=False, threshold=1000, edgeitems=3, linewidth=75, separator ' ').
//
// rank 0 (shape empty): str() of the numpy scalar (float32 11 -> "11.0",
//   0.1f -> "0.1", 1e20 -> "1e+20", int -> "5", nan -> "nan", inf -> "inf",
//   -0.0 -> "-0.0").
// rank >= 1: str() of the ndarray ("[5. 6.]", "[1 2]", "[[1 2]\n [3 4]]",
//   "[]" when any dim is 0, "[1.5 2. ]", "[1.e+00 1.e+04]", summarization
//   with "..." over 1000 elements, line wrapping at 75 columns).
//
// kString: each element as Python's repr() of bytes (b'abc', b'a\nb'),
//   unpadded, as numpy prints an array of bytes objects.
//
// `data` points to prod(shape) contiguous row-major elements of `dtype`.
std::string format_numpy(DType dtype, std::span<const std::int64_t> shape, const void* data);

}  // namespace distribute::internal
