// The reduction kernels of all_reduce (core/reduce_kernels.h): every
// instruction-set variant this CPU runs gives, bitwise, the element-by-element
// reference (the replicas' values added in replica order, then divided for
// MEAN), out of place and in place, for every dtype, replica count, length
// around the kernels' block and vector widths, and misaligned buffers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/reduce_kernels.h"
#include "distribute/errors.h"

namespace distribute::internal {
namespace {

using ::testing::HasSubstr;

template <class T>
std::vector<T> random_values(std::size_t count, std::mt19937& rng) {
  std::vector<T> v(count);
  if constexpr (std::is_floating_point_v<T>) {
    // Magnitudes spread over many binades, so that the order of the
    // additions changes the rounded result.
    std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
    std::uniform_int_distribution<int> exponent(-20, 20);
    for (T& x : v) x = static_cast<T>(std::ldexp(mantissa(rng), exponent(rng)));
  } else {
    std::uniform_int_distribution<std::int32_t> d(-1000000, 1000000);
    for (T& x : v) x = static_cast<T>(d(rng));
  }
  return v;
}

// The reference, one element at a time.
template <class T>
T reference(const std::vector<std::vector<T>>& inputs, std::size_t offset, std::size_t i, bool mean) {
  T s = inputs[0][offset + i];
  for (std::size_t q = 1; q < inputs.size(); ++q) s = static_cast<T>(s + inputs[q][offset + i]);
  if (mean) s = static_cast<T>(s / static_cast<T>(inputs.size()));
  return s;
}

// memcmp over n elements; an empty range is equal (memcmp must not see the
// null data() of an empty vector).
template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(T)) == 0;
}

template <class T>
void check_variant(ReduceIsa isa) {
  const ReduceKernels<T>& kernels = reduce_kernels<T>(isa);
  std::mt19937 rng(7);
  for (std::size_t replicas : {1u, 2u, 3u, 5u}) {
    for (std::size_t length : {0u, 1u, 7u, 17u, 2047u, 2048u, 2049u, 5003u}) {
      for (std::size_t misalign : {0u, 1u, 3u}) {
        for (bool mean : {false, true}) {
          SCOPED_TRACE(std::string(reduce_isa_name(isa)) + " replicas " + std::to_string(replicas) + " length " +
                       std::to_string(length) + " misaligned by " + std::to_string(misalign) + " elements" +
                       (mean ? " MEAN" : " SUM"));
          std::vector<std::vector<T>> inputs;
          for (std::size_t q = 0; q < replicas; ++q) inputs.push_back(random_values<T>(length + misalign, rng));
          std::vector<T> expected(length);
          for (std::size_t i = 0; i < length; ++i) expected[i] = reference(inputs, misalign, i, mean);

          // Out of place, over the whole range and over a middle part.
          std::vector<const T*> ins;
          for (const auto& in : inputs) ins.push_back(in.data() + misalign);
          std::vector<T> out(length + misalign, T{42});
          kernels.range(out.data() + misalign, ins, 0, length, mean);
          ASSERT_TRUE(same_bits(out.data() + misalign, expected.data(), length));
          const std::size_t lo = length / 3, hi = length - length / 4;
          std::vector<T> part(length + misalign, T{42});
          kernels.range(part.data() + misalign, ins, lo, hi, mean);
          for (std::size_t i = 0; i < length; ++i) {
            const T want = i >= lo && i < hi ? expected[i] : T{42};
            ASSERT_TRUE(same_bits(&part[misalign + i], &want, 1)) << "element " << i;
          }

          // In place: every buffer ends with the same bits.
          std::vector<std::vector<T>> buffers = inputs;
          std::vector<T*> ios;
          for (auto& b : buffers) ios.push_back(b.data() + misalign);
          kernels.in_place(ios, 0, length, mean);
          for (std::size_t q = 0; q < replicas; ++q) {
            ASSERT_TRUE(same_bits(buffers[q].data() + misalign, expected.data(), length))
                << "buffer of replica " << q;
          }
        }
      }
    }
  }
}

TEST(ReduceKernels, EveryVariantGivesTheReferenceBitwise) {
  for (ReduceIsa isa : available_reduce_isas()) {
    check_variant<float>(isa);
    check_variant<double>(isa);
    check_variant<std::int32_t>(isa);
    check_variant<std::int64_t>(isa);
  }
}

TEST(ReduceKernels, BaselineIsAlwaysAvailableAndFirst) {
  const std::vector<ReduceIsa> isas = available_reduce_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), ReduceIsa::kBaseline);
  EXPECT_EQ(choose_reduce_isa(""), isas.back());
  EXPECT_EQ(choose_reduce_isa("baseline"), ReduceIsa::kBaseline);
  for (ReduceIsa isa : isas) EXPECT_EQ(choose_reduce_isa(reduce_isa_name(isa)), isa);
}

TEST(ReduceKernels, TheProcessUsesWhatTheEnvironmentAsks) {
  const char* env = std::getenv("DISTRIBUTE_REDUCE_ISA");
  EXPECT_EQ(active_reduce_isa(), choose_reduce_isa(env != nullptr ? env : ""));
  if (env != nullptr) {
    EXPECT_STREQ(reduce_isa_name(active_reduce_isa()), env);
  }
}

TEST(ReduceKernels, AnUnknownOrUnavailableNameIsRejected) {
  try {
    choose_reduce_isa("sse9");
    FAIL() << "no error for 'sse9'";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'baseline', 'avx2' or 'avx512', got 'sse9'"));
  }
  const std::vector<ReduceIsa> isas = available_reduce_isas();
  for (ReduceIsa isa : {ReduceIsa::kAvx2, ReduceIsa::kAvx512}) {
    if (std::find(isas.begin(), isas.end(), isa) != isas.end()) continue;
    try {
      choose_reduce_isa(reduce_isa_name(isa));
      FAIL() << "no error for " << reduce_isa_name(isa) << ", which this CPU lacks";
    } catch (const InvalidArgumentError& e) {
      EXPECT_THAT(e.what(), HasSubstr("this CPU cannot run it (available: baseline"));
    }
  }
}

}  // namespace
}  // namespace distribute::internal
