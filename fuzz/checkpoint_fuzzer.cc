// Fuzzes the checkpoint reader: load_checkpoint() and Checkpoint::restore()
// on arbitrary file contents. A distribute::Error is the expected outcome of a
// bad file; anything else (another exception, a sanitizer report) is a bug.
//
// Input: one mode byte, then the file. With bit 0 of the mode set, the file's
// length field and CRC32Cs (header and every entry that can be walked) are
// made to match before reading, so that mutations reach the checks that come
// after the CRCs (dtype, shape, data length, names), which a random mutation
// of a real file almost never passes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/crc32c.h"
#include "distribute/checkpoint.h"
#include "distribute/errors.h"
#include "fuzz_util.h"

namespace {

using distribute::internal::crc32c;

std::uint64_t load_le(const std::uint8_t* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void store_le(std::uint8_t* p, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>((v >> (8 * i)) & 0xFF);
}
std::uint32_t crc_of(const std::vector<std::uint8_t>& b, std::size_t from, std::size_t to) {
  return crc32c(std::as_bytes(std::span<const std::uint8_t>(b.data() + from, to - from)));
}

// Sets the file length and the CRCs of docs/checkpoint_format.md, as far as
// the layout can be followed.
void repair(std::vector<std::uint8_t>& b) {
  constexpr std::size_t kHeader = 28;
  if (b.size() < kHeader) return;
  store_le(b.data() + 16, b.size(), 8);
  store_le(b.data() + 24, crc_of(b, 0, 24), 4);
  std::size_t at = kHeader;
  const auto count = static_cast<std::uint32_t>(load_le(b.data() + 12, 4));
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::size_t start = at;
    auto fits = [&](std::uint64_t n) { return n <= b.size() - at; };
    if (!fits(4)) return;
    const std::uint64_t name_length = load_le(b.data() + at, 4);
    at += 4;
    if (!fits(name_length)) return;
    at += name_length;
    if (!fits(8)) return;
    const std::uint64_t rank = load_le(b.data() + at + 4, 4);
    at += 8;
    if (rank > 8 || !fits(8 * rank + 8)) return;
    at += 8 * rank;
    const std::uint64_t data_length = load_le(b.data() + at, 8);
    at += 8;
    if (!fits(data_length)) return;
    at += data_length;
    if (!fits(4)) return;
    store_le(b.data() + at, crc_of(b, start, at), 4);
    at += 4;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const distribute::fuzz::ScratchFile file(".dckpt");
  if (size == 0) return 0;
  std::vector<std::uint8_t> bytes(data + 1, data + size);
  if ((data[0] & 1) != 0) repair(bytes);
  file.write(bytes.data(), bytes.size());
  try {
    distribute::load_checkpoint(file.path());
  } catch (const distribute::Error&) {
    return 0;
  }
  // A readable file: restore it into tracked values of each kind, which
  // checks its names, dtypes and shapes against them.
  std::int64_t step = 0;
  std::uint64_t seed = 0;
  std::int32_t epoch = 0;
  distribute::Tensor weights({0.f, 0.f});
  distribute::Checkpoint ckpt;
  ckpt.track("step", &step);
  ckpt.track("seed", &seed);
  ckpt.track("epoch", &epoch);
  ckpt.track("w", &weights);
  try {
    ckpt.restore(file.path());
  } catch (const distribute::Error&) {
  }
  return 0;
}
