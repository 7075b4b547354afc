// The hash whose values checkpoints keep (a pipeline's fingerprint): pinned
// to FNV-1a's published 64-bit values, and its word steps to values computed
// independently (x ^ word, times the FNV prime, mod 2^64).
#include "core/fnv1a.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace distribute::internal {
namespace {

TEST(Fnv1a, BytesGiveThePublishedValues) {
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);  // the offset basis
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
  // Bytes above 127 are mixed as unsigned values.
  Fnv1a h;
  h.mix(0xffu);
  EXPECT_EQ(fnv1a("\xff"), h.value());
}

TEST(Fnv1a, WordsAreOneStepEach) {
  Fnv1a h;
  for (std::uint64_t v : {1u, 2u, 3u}) h.mix(v);
  EXPECT_EQ(h.value(), 0xd0aa6218672cf5abull);
  Fnv1a all_ones;
  all_ones.mix(~std::uint64_t{0});
  EXPECT_EQ(all_ones.value(), 0x509c41b379fe466eull);
}

TEST(Fnv1a, WordsTellEveryByteAndTheLength) {
  // 8-byte words in little-endian order (each step folded down), then the
  // bytes left over, then the length: "abcdefgh" + "ij" is the word
  // 0x6867666564636261, 'i', 'j', 10.
  Fnv1a h;
  h.mix(0x6867666564636261ull);
  const std::uint64_t unfolded = h.value();
  h = Fnv1a();
  h.mix_folded(0x6867666564636261ull);
  EXPECT_EQ(h.value(), unfolded ^ (unfolded >> 32));
  h.mix('i');
  h.mix('j');
  h.mix(10);
  EXPECT_EQ(fnv1a_words("abcdefghij"), h.value());
  // A change in any byte (in a word or in the tail) changes the value, and
  // so does a trailing zero byte.
  std::string text(21, 'x');
  const std::uint64_t base = fnv1a_words(text);
  for (std::size_t i = 0; i < text.size(); ++i) {
    std::string changed = text;
    changed[i] = 'y';
    EXPECT_NE(fnv1a_words(changed), base) << "byte " << i;
  }
  EXPECT_NE(fnv1a_words(std::string(8, '\0')), fnv1a_words(std::string(9, '\0')));
  // Two flips of words' top bits do not cancel (a multiply alone carries a
  // difference only upward: without the fold they would), nor do the sign
  // bits of two float32 values at the same offsets in their words.
  for (std::size_t first = 7; first < 32; first += 4) {
    for (std::size_t second = first + 4; second < 40; second += 4) {
      std::string flipped(40, 'x');
      flipped[first] = static_cast<char>(flipped[first] ^ 0x80);
      flipped[second] = static_cast<char>(flipped[second] ^ 0x80);
      EXPECT_NE(fnv1a_words(flipped), fnv1a_words(std::string(40, 'x'))) << first << ", " << second;
    }
  }
  EXPECT_NE(fnv1a_words(""), fnv1a_words(std::string(1, '\0')));
}

}  // namespace
}  // namespace distribute::internal
