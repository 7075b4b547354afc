// How error messages name things: a tensor as "shape [2, 3] dtype float32",
// replicas or workers as "[0, 2]".
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "distribute/tensor.h"
#include "distribute/types.h"

namespace distribute::internal {

std::string describe(DType dtype, const Shape& shape);
std::string describe(const Tensor& t);
std::string list_ids(const std::vector<int>& ids);
// What an exception says: its what(), or a note that it is not a
// std::exception.
std::string what_of(const std::exception_ptr& e);

}  // namespace distribute::internal
