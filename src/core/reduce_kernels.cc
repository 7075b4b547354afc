#include "core/reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "distribute/errors.h"

namespace distribute::internal {
namespace {

// Elements summed per block: the block of the output stays in L1 while every
// replica's input is added to it.
constexpr std::size_t kBlock = 2048;

// The loops, written once and inlined into one function per instruction set
// (below), which the compiler vectorizes for that set.
template <class T>
[[gnu::always_inline]] inline void range_body(T* out, std::span<const T* const> ins, std::size_t begin,
                                              std::size_t end, bool mean) {
  const auto n = static_cast<T>(ins.size());
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t e = std::min(end, b + kBlock);
    if (ins.size() == 2) {
      const T* x = ins[0];
      const T* y = ins[1];
      for (std::size_t i = b; i < e; ++i) out[i] = x[i] + y[i];
    } else {
      std::memcpy(out + b, ins[0] + b, (e - b) * sizeof(T));
      for (std::size_t q = 1; q < ins.size(); ++q) {
        const T* x = ins[q];
        for (std::size_t i = b; i < e; ++i) out[i] += x[i];
      }
    }
    if (mean) {
      for (std::size_t i = b; i < e; ++i) out[i] /= n;
    }
  }
}

template <class T>
[[gnu::always_inline]] inline void in_place_body(std::span<T* const> ios, std::size_t begin, std::size_t end,
                                                 bool mean) {
  const auto n = static_cast<T>(ios.size());
  if (ios.size() == 2) {
    // The two-thread reference loop: one pass reading both, writing both.
    T* __restrict x = ios[0];
    T* __restrict y = ios[1];
    if (mean) {
      for (std::size_t i = begin; i < end; ++i) {
        const T s = static_cast<T>(x[i] + y[i]) / n;
        x[i] = s;
        y[i] = s;
      }
    } else {
      for (std::size_t i = begin; i < end; ++i) {
        const T s = x[i] + y[i];
        x[i] = s;
        y[i] = s;
      }
    }
    return;
  }
  // Sum a block in L1, then write it into every buffer.
  T sum[kBlock];
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t len = std::min(end, b + kBlock) - b;
    std::memcpy(sum, ios[0] + b, len * sizeof(T));
    for (std::size_t q = 1; q < ios.size(); ++q) {
      const T* x = ios[q] + b;
      for (std::size_t i = 0; i < len; ++i) sum[i] += x[i];
    }
    if (mean) {
      for (std::size_t i = 0; i < len; ++i) sum[i] /= n;
    }
    for (T* io : ios) std::memcpy(io + b, sum, len * sizeof(T));
  }
}

// One pair of kernels per instruction set. Only these functions carry a
// target attribute: whatever they call that is not inlined (memcpy, a
// standard header's helper) stays baseline code, so no instruction of a set
// the CPU may lack leaks into code shared with the baseline path.
#define DISTRIBUTE_REDUCE_VARIANT(name, attributes)                                                               \
  template <class T>                                                                                               \
  attributes void range_##name(T* out, std::span<const T* const> ins, std::size_t begin, std::size_t end,        \
                               bool mean) {                                                                        \
    range_body(out, ins, begin, end, mean);                                                                        \
  }                                                                                                                \
  template <class T>                                                                                               \
  attributes void in_place_##name(std::span<T* const> ios, std::size_t begin, std::size_t end, bool mean) {      \
    in_place_body(ios, begin, end, mean);                                                                          \
  }

DISTRIBUTE_REDUCE_VARIANT(baseline, )
#if defined(__x86_64__)
#define DISTRIBUTE_REDUCE_X86 1
DISTRIBUTE_REDUCE_VARIANT(avx2, __attribute__((target("avx2"))))
DISTRIBUTE_REDUCE_VARIANT(avx512, __attribute__((target("avx512f"))))
#endif
#undef DISTRIBUTE_REDUCE_VARIANT

bool cpu_supports(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kBaseline: return true;
#ifdef DISTRIBUTE_REDUCE_X86
    case ReduceIsa::kAvx2: __builtin_cpu_init(); return __builtin_cpu_supports("avx2");
    case ReduceIsa::kAvx512: __builtin_cpu_init(); return __builtin_cpu_supports("avx512f");
#else
    case ReduceIsa::kAvx2:
    case ReduceIsa::kAvx512: return false;
#endif
  }
  return false;
}

}  // namespace

const char* reduce_isa_name(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kBaseline: return "baseline";
    case ReduceIsa::kAvx2: return "avx2";
    case ReduceIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

std::vector<ReduceIsa> available_reduce_isas() {
  std::vector<ReduceIsa> isas;
  for (ReduceIsa isa : {ReduceIsa::kBaseline, ReduceIsa::kAvx2, ReduceIsa::kAvx512}) {
    if (cpu_supports(isa)) isas.push_back(isa);
  }
  return isas;
}

ReduceIsa choose_reduce_isa(const std::string& requested) {
  const std::vector<ReduceIsa> isas = available_reduce_isas();
  if (requested.empty()) return isas.back();
  std::string names;
  for (ReduceIsa isa : isas) {
    if (requested == reduce_isa_name(isa)) return isa;
    names += (names.empty() ? "" : ", ") + std::string(reduce_isa_name(isa));
  }
  for (ReduceIsa isa : {ReduceIsa::kAvx2, ReduceIsa::kAvx512}) {
    if (requested == reduce_isa_name(isa)) {
      throw InvalidArgumentError("DISTRIBUTE_REDUCE_ISA=" + requested + ", but this CPU cannot run it (available: " +
                                 names + ")");
    }
  }
  throw InvalidArgumentError("DISTRIBUTE_REDUCE_ISA must be 'baseline', 'avx2' or 'avx512', got '" + requested + "'");
}

ReduceIsa active_reduce_isa() {
  static const ReduceIsa isa = [] {
    const char* env = std::getenv("DISTRIBUTE_REDUCE_ISA");
    return choose_reduce_isa(env != nullptr ? env : "");
  }();
  return isa;
}

template <class T>
const ReduceKernels<T>& reduce_kernels(ReduceIsa isa) {
  static const ReduceKernels<T> baseline{&range_baseline<T>, &in_place_baseline<T>};
#ifdef DISTRIBUTE_REDUCE_X86
  static const ReduceKernels<T> avx2{&range_avx2<T>, &in_place_avx2<T>};
  static const ReduceKernels<T> avx512{&range_avx512<T>, &in_place_avx512<T>};
  if (isa == ReduceIsa::kAvx2) return avx2;
  if (isa == ReduceIsa::kAvx512) return avx512;
#endif
  (void)isa;
  return baseline;
}

template const ReduceKernels<float>& reduce_kernels<float>(ReduceIsa);
template const ReduceKernels<double>& reduce_kernels<double>(ReduceIsa);
template const ReduceKernels<std::int32_t>& reduce_kernels<std::int32_t>(ReduceIsa);
template const ReduceKernels<std::int64_t>& reduce_kernels<std::int64_t>(ReduceIsa);

}  // namespace distribute::internal
