// A shape's element and byte counts, checked for overflow: the one check
// behind Tensor's constructors and the checkpoint reader, which phrase their
// own errors from its result.
#pragma once

#include <cstddef>
#include <cstdint>

#include "distribute/tensor.h"
#include "distribute/types.h"

namespace distribute::internal {

struct ElementCount {
  enum class Problem {
    kNone,
    kNegativeDimension,  // shape[dimension] < 0
    kTooManyElements,    // the product of dimensions [0, dimension] exceeds 2^63 - 1
    kTooManyBytes,       // elements × the element size exceeds 2^63 - 1
  };
  Problem problem = Problem::kNone;
  std::size_t dimension = 0;  // for kNegativeDimension and kTooManyElements
  std::int64_t elements = 0;  // the product of the dimensions, when problem is kNone
  std::int64_t bytes = 0;     // elements × dtype_size(dtype), when problem is kNone

  bool ok() const { return problem == Problem::kNone; }
};

// The number of elements of `shape` and their bytes as `dtype`. As TF's
// TensorShape, every running product of the dimensions, outermost first,
// must fit in int64: (2^31, 2^32, 0) is rejected although a dimension is 0.
ElementCount count_elements(const Shape& shape, DType dtype);

}  // namespace distribute::internal
