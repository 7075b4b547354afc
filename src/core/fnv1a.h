// FNV-1a (64-bit): the stable hash behind what replicas and workers compare
// (collective signatures, layout checksums, structure checks) and what
// checkpoints record (a pipeline's fingerprint). Its values are saved, so
// its constants and its byte-at-a-time form for text never change. Not a
// defence against deliberate collisions.
#pragma once

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

}  // namespace distribute::internal
