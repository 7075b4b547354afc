// CRC32C (Castagnoli, the checksum of iSCSI, leveldb and TF's checkpoints)
// through Intel's ISA-L (Debian's libisal-dev), which picks the fastest
// implementation the CPU supports at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace distribute::internal {

// The CRC32C of `data` ("123456789" gives 0xE3069283), continuing from the
// CRC32C `crc` of the bytes before it: crc32c(a + b) == crc32c(b, crc32c(a)).
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);

}  // namespace distribute::internal
