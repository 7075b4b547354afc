// FNV-1a (64-bit): the stable hash behind what replicas and workers compare
// (collective signatures, layout checksums, structure checks) and what
// checkpoints record (a pipeline's fingerprint). Its values are saved, so
// its constants and its byte-at-a-time form for text never change. Not a
// defence against deliberate collisions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace distribute::internal {

class Fnv1a {
 public:
  // One step of the hash: a whole word, as one value.
  void mix(std::uint64_t v) noexcept { h_ = (h_ ^ v) * kPrime; }
  // One step per byte of `text` (the classic byte-wise FNV-1a).
  void mix_bytes(std::string_view text) noexcept {
    for (const char c : text) mix(static_cast<unsigned char>(c));
  }
  std::uint64_t value() const noexcept { return h_; }

 private:
  static constexpr std::uint64_t kOffsetBasis = 14695981039346656037ull;
  static constexpr std::uint64_t kPrime = 1099511628211ull;
  std::uint64_t h_ = kOffsetBasis;
};

// The byte-wise FNV-1a of `text`.
inline std::uint64_t fnv1a(std::string_view text) noexcept {
  Fnv1a h;
  h.mix_bytes(text);
  return h.value();
}

// The bytes of `data` mixed a little-endian 8-byte word per step, then the
// bytes left over one per step, then the length: about 8 times faster than
// fnv1a() over large buffers, for values compared within one run and never
// saved (the workers' comparison of the checkpoint file each one read).
inline std::uint64_t fnv1a_words(std::string_view data) noexcept {
  Fnv1a h;
  std::size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    std::uint64_t word = 0;
    for (std::size_t b = 0; b < 8; ++b) word |= std::uint64_t{static_cast<unsigned char>(data[i + b])} << (8 * b);
    h.mix(word);
  }
  h.mix_bytes(data.substr(i));
  h.mix(data.size());
  return h.value();
}

}  // namespace distribute::internal
