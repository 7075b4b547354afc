// The checkpoint file format (docs/checkpoint_format.md): named tensors to
// the bytes of one file and back.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "distribute/tensor.h"

namespace distribute::internal {

// The longest entry name, in bytes, the format allows (a bound for
// reading a damaged file; Checkpoint::track refuses longer names).
inline constexpr std::size_t kMaxCheckpointNameLength = std::size_t{1} << 16;

struct NamedTensor {
  std::string name;
  Tensor value;
};

// The bytes of a checkpoint file holding `entries` in order (the current
// format version, lengths and CRC32Cs filled in).
std::vector<std::byte> encode(const std::vector<NamedTensor>& entries);

// The entries of the checkpoint file `file` (read from `path`, which errors
// name) after every check of the format: magic, version, length, header
// and entry CRC32Cs, well-formed entries. Raises DataLossError
// (FailedPreconditionError for another format version).
std::vector<NamedTensor> decode(std::span<const std::byte> file, const std::string& path);

}  // namespace distribute::internal
