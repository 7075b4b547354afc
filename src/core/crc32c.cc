#include "core/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace distribute::internal {

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) {
  // crc32_iscsi neither inverts the register before nor after (its
  // crc32_iscsi_base is the bare table loop), so the standard CRC32C is
  // ~crc32_iscsi(data, ~0). It takes an int length: long inputs go in pieces.
  unsigned int reg = ~crc;
  while (!data.empty()) {
    const std::size_t n = std::min<std::size_t>(data.size(), INT_MAX);
    // The buffer is only read; the C signature lacks the const.
    auto* bytes = const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(data.data()));
    reg = crc32_iscsi(bytes, static_cast<int>(n), reg);
    data = data.subspan(n);
  }
  return ~reg;
}

}  // namespace distribute::internal
