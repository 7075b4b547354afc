// The element-wise sums behind all_reduce (collective_group.cc), compiled
// for baseline x86-64, AVX2 and AVX-512F, and the best this CPU runs chosen
// once per process. Every variant performs, for each element, the same IEEE
// operations in the same order (the replicas' values added in replica order,
// then one division for MEAN; no fused multiply-add, which would round
// differently), so the bits are the same whichever variant runs: workers on
// different CPUs still agree, and a result does not depend on alignment.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace distribute::internal {

enum class ReduceIsa { kBaseline, kAvx2, kAvx512 };

// "baseline", "avx2" or "avx512".
const char* reduce_isa_name(ReduceIsa isa);

// The variants this CPU can run, baseline first and the fastest last.
std::vector<ReduceIsa> available_reduce_isas();

// The variant named by `requested` ("baseline", "avx2", "avx512"), or the
// fastest available for "". Throws InvalidArgumentError for another name or
// for a variant this CPU cannot run.
ReduceIsa choose_reduce_isa(const std::string& requested);

// The process's variant: choose_reduce_isa(DISTRIBUTE_REDUCE_ISA), read once
// (the variable is for measuring the variants against each other).
ReduceIsa active_reduce_isa();

template <class T>
struct ReduceKernels {
  // out[i] = the sum over q of ins[q][i] for i in [begin, end), in replica
  // order; with `mean` then divided by ins.size() (truncating for integers).
  // `out` is none of the inputs.
  void (*range)(T* out, std::span<const T* const> ins, std::size_t begin, std::size_t end, bool mean);
  // In place: ios[q] is replica q's buffer, input and output; each gets the
  // reduction of all of them over [begin, end), bitwise equal to `range`'s.
  // The buffers are distinct; every input of an element is read before any
  // buffer is written.
  void (*in_place)(std::span<T* const> ios, std::size_t begin, std::size_t end, bool mean);
};

// The kernels of `isa`, which must be one of available_reduce_isas().
// Instantiated for float, double, std::int32_t and std::int64_t.
template <class T>
const ReduceKernels<T>& reduce_kernels(ReduceIsa isa);

template <class T>
const ReduceKernels<T>& reduce_kernels() {
  return reduce_kernels<T>(active_reduce_isa());
}

}  // namespace distribute::internal
