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
  // A word's step, then the state folded down (fnv1a_words).
  void mix_folded(std::uint64_t v) noexcept {
    mix(v);
    h_ ^= h_ >> 32;
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

// A 64-bit hash of `data` for values compared within one run and never
// saved (the workers' comparison of the checkpoint file each one read):
// little-endian 8-byte words, each mixed as FNV-1a mixes a value and then
// folded down (h ^= h >> 32: a multiply alone carries a difference only
// upward, so two flips of a word's top bit would cancel), then the bytes
// left over, then the length. About 3.4 times faster than fnv1a() over large
// buffers (BENCHMARKS.md, "Checkpoints").
inline std::uint64_t fnv1a_words(std::string_view data) noexcept {
  Fnv1a h;
  std::size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    std::uint64_t word = 0;
    for (std::size_t b = 0; b < 8; ++b) word |= std::uint64_t{static_cast<unsigned char>(data[i + b])} << (8 * b);
    h.mix_folded(word);
  }
  h.mix_bytes(data.substr(i));
  h.mix(data.size());
  return h.value();
}

}  // namespace distribute::internal
