// How error messages name things: a tensor as "shape [2, 3] dtype float32",
// replicas or workers as "[0, 2]".
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "distribute/tensor.h"
#include "distribute/types.h"

namespace distribute::internal {

std::string describe(DType dtype, const Shape& shape);
std::string describe(const Tensor& t);
std::string list_ids(const std::vector<int>& ids);
// "0x" and the lowercase hexadecimal digits of `v`, no leading zeros (a
// checksum or hash in a message).
std::string hex(std::uint64_t v);
// What an exception says: its what(), or a note that it is not a
// std::exception.
std::string what_of(const std::exception_ptr& e);
// The longest prefix of `text` of at most `max_bytes` bytes that does not
// end inside a UTF-8 character (a message cut to fit a report must stay
// decodable: Python decodes error messages as UTF-8).
std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes);

}  // namespace distribute::internal
