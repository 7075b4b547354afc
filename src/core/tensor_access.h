// Internal access to Tensor's representation, for the layers that recycle
// or write buffers (collectives); users never see it (include/distribute/
// tensor.h only forward-declares TensorAccess, its friend).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "core/dtype_dispatch.h"
#include "distribute/tensor.h"

namespace distribute::internal {

struct TensorAccess {
  static Tensor make(std::shared_ptr<const std::byte> storage, Shape shape, DType dtype) {
    return Tensor(std::move(storage), 0, std::move(shape), dtype);
  }
  static const std::shared_ptr<const std::byte>& storage(const Tensor& t) noexcept { return t.storage_; }
  static bool read_only(const Tensor& t) noexcept { return t.read_only_; }
  static const std::byte* raw(const Tensor& t) noexcept { return t.raw(); }
};

// InvalidArgumentError naming `what` unless `t` holds numbers: the check at
// the entry of every layer that treats tensors as bytes or numbers
// (collectives, transports).
inline void check_numeric(const Tensor& t, const char* what) {
  if (!is_numeric(t.dtype())) throw_not_numeric(t.dtype(), what);
}

// Copies `bytes` bytes of elements of `dtype` from `src` to `dst`, both
// inside tensor buffers (allocate_tensor's, whose string elements exist):
// memcpy for numbers, element assignment for kString.
void copy_elements(DType dtype, std::byte* dst, const std::byte* src, std::size_t bytes);

// The one exception to Tensor's immutability, for collectives that reduce
// into a handed-over (donated) tensor. Returns t's bytes, writable, when `t`
// is the only owner of its buffer and holds numbers (no other Tensor or view, on any thread,
// shares it: use_count() == 1), else nullptr. The caller must own `t` itself
// (no other thread reads or copies it during the call) and may write through
// the pointer only while no copy of `t` it made is read by anyone else.
// Memory: every access to the buffer by a thread before it dropped its last
// reference happens before the caller's accesses after this call.
std::byte* exclusive_bytes(const Tensor& t) noexcept;

// Recycles large output buffers: a buffer whose last Tensor is destroyed
// goes back to the pool (up to a few of them) instead of to the allocator, so
// that repeated collectives of one size do not pay for fresh pages (page
// faults) on every call. Thread-safe; buffers may outlive the pool.
// Defined in tensor.cc, next to the allocator it shares.
class BufferPool {
 public:
  // Pools buffers of at least `min_bytes` (smaller ones come straight from
  // the allocator), keeping up to `max_free` returned ones.
  explicit BufferPool(std::size_t min_bytes = 64 * 1024, std::size_t max_free = 4);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  // Like allocate_tensor; the contents are unspecified.
  Tensor allocate(DType dtype, Shape shape, void** data);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace distribute::internal
