#include "distribute/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <ostream>
#include <sstream>
#include <utility>

#include <sys/mman.h>

#include "core/describe.h"
#include "core/dtype_dispatch.h"
#include "core/element_count.h"
#include "core/mutex.h"
#include "core/tensor_access.h"
#include "core/tensor_format.h"
#include "distribute/errors.h"
#include "distribute/internal/owner_process.h"

namespace distribute {
namespace {

// Buffers are aligned for vectorised loops over any element type; large ones
// on huge-page boundaries, and the kernel is asked to back them with huge
// pages (fewer TLB misses when streaming through tens of MiB).
constexpr std::size_t kAlignment = 64;
constexpr std::size_t kHugePage = 2 << 20;
constexpr std::size_t kHugeFromBytes = 4 << 20;

std::align_val_t alignment_for(std::size_t bytes) {
  return std::align_val_t{bytes >= kHugeFromBytes ? kHugePage : kAlignment};
}

// At least one byte, so that every tensor has a distinct buffer; rounded up
// to whole cache lines, so that no other allocation shares a line with the
// buffer (a tensor one thread reads must not sit next to data another thread
// writes).
std::byte* allocate_bytes(std::size_t bytes) {
  bytes = (std::max<std::size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  auto* p = static_cast<std::byte*>(::operator new(bytes, alignment_for(bytes)));
  if (bytes >= kHugeFromBytes) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // a hint only
  return p;
}

void free_bytes(std::byte* p, std::size_t bytes) {
  ::operator delete(p, alignment_for(std::max<std::size_t>(bytes, 1)));  // the threshold is a multiple of a line
}

std::shared_ptr<const std::byte> allocate_storage(std::size_t bytes) {
  return std::shared_ptr<const std::byte>(allocate_bytes(bytes),
                                          [bytes](const std::byte* q) { free_bytes(const_cast<std::byte*>(q), bytes); });
}

// count_elements(), raising InvalidArgumentError for a shape no tensor can
// have; `dtype` is the element type whose bytes must be countable too.
internal::ElementCount checked_count(const Shape& shape, DType dtype) {
  using Problem = internal::ElementCount::Problem;
  const internal::ElementCount count = internal::count_elements(shape, dtype);
  switch (count.problem) {
    case Problem::kNone:
      break;
    case Problem::kNegativeDimension:
      throw InvalidArgumentError("expected non-negative dimensions, got shape " + shape_string(shape) +
                                 " (dimension " + std::to_string(count.dimension) + " is " +
                                 std::to_string(shape[count.dimension]) + ")");
    case Problem::kTooManyElements:
      throw InvalidArgumentError("shape " + shape_string(shape) +
                                 " has too many elements: expected at most 2^63 - 1, got more in its first " +
                                 std::to_string(count.dimension + 1) + " dimensions");
    case Problem::kTooManyBytes:
      throw InvalidArgumentError("shape " + shape_string(shape) + " dtype " + std::string(dtype_name(dtype)) +
                                 " has too many elements: expected at most 2^63 - 1 bytes of data, got " +
                                 std::to_string(count.elements) + " elements of " +
                                 std::to_string(dtype_size(dtype)) + " bytes");
  }
  return count;
}

std::int64_t checked_num_elements(const Shape& shape, DType dtype) { return checked_count(shape, dtype).elements; }

// The bytes of a buffer for `shape` and `dtype`.
std::size_t checked_num_bytes(const Shape& shape, DType dtype) {
  return static_cast<std::size_t>(checked_count(shape, dtype).bytes);
}

using internal::describe;

int normalize_axis(int axis, int rank, const char* op) {
  if (axis < -rank || axis >= rank) {
    throw InvalidArgumentError(std::string(op) + ": expected axis in [" + std::to_string(-rank) + ", " +
                               std::to_string(rank) + ") for a tensor of rank " + std::to_string(rank) +
                               ", got axis " + std::to_string(axis));
  }
  return axis < 0 ? axis + rank : axis;
}

// Accumulator type of sums: double for floats, int64 for integers.
template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;

// Sums `x` viewed as [outer, n, inner] over its middle dimension; with `mean`
// the accumulated sum is divided by n (truncating for integers).
template <class T>
void sum_middle(const T* x, std::int64_t outer, std::int64_t n, std::int64_t inner, bool mean, T* out) {
  std::vector<Acc<T>> acc(static_cast<std::size_t>(inner));
  for (std::int64_t o = 0; o < outer; ++o) {
    std::fill(acc.begin(), acc.end(), Acc<T>{0});
    const T* block = x + o * n * inner;
    for (std::int64_t k = 0; k < n; ++k) {
      const T* row = block + k * inner;
      for (std::int64_t i = 0; i < inner; ++i) acc[static_cast<std::size_t>(i)] += row[i];
    }
    for (std::int64_t i = 0; i < inner; ++i) {
      Acc<T> v = acc[static_cast<std::size_t>(i)];
      if (mean) v = v / static_cast<Acc<T>>(n);
      out[o * inner + i] = static_cast<T>(v);
    }
  }
}

Tensor reduce_axis(const Tensor& t, int axis, bool mean, const char* op) {
  Shape out_shape;
  std::int64_t outer = 1, n = 1, inner = 1;
  if (axis == INT32_MIN) {  // all elements
    n = t.num_elements();
  } else {
    const int a = normalize_axis(axis, t.rank(), op);
    for (int i = 0; i < t.rank(); ++i) {
      if (i < a) outer *= t.shape()[static_cast<std::size_t>(i)];
      if (i == a) n = t.shape()[static_cast<std::size_t>(i)];
      if (i > a) inner *= t.shape()[static_cast<std::size_t>(i)];
      if (i != a) out_shape.push_back(t.shape()[static_cast<std::size_t>(i)]);
    }
  }
  if (!is_numeric(t.dtype())) internal::throw_not_numeric(t.dtype(), op);
  if (mean && n == 0 && !is_floating(t.dtype())) {
    throw InvalidArgumentError(std::string(op) + ": cannot take the mean of zero elements of an integer tensor (" +
                               describe(t) + ")");
  }
  void* out = nullptr;
  Tensor result = internal::allocate_tensor(t.dtype(), std::move(out_shape), &out);
  internal::dispatch_dtype(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    sum_middle(t.data<T>().data(), outer, n, inner, mean, static_cast<T*>(out));
  });
  return result;
}

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "operator+";
    case BinaryOp::kSub: return "operator-";
    case BinaryOp::kMul: return "operator*";
    case BinaryOp::kDiv: return "operator/";
  }
  return "?";
}

template <class T>
T apply(BinaryOp op, T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    // Integers wrap around in two's complement, as TF's (the overflow of
    // signed arithmetic is undefined in C++: computed in unsigned).
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case BinaryOp::kAdd: return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
      case BinaryOp::kSub: return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
      case BinaryOp::kMul: return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
      case BinaryOp::kDiv:
        // (Integer operator/ is true division, in float64: not reached
        // with integers, kept defined for any caller.)
        if (y == 0) throw InvalidArgumentError("integer division by zero");
        if (y == -1) return static_cast<T>(U{0} - static_cast<U>(x));  // min / -1 wraps to min
        return x / y;
    }
  } else {
    switch (op) {
      case BinaryOp::kAdd: return x + y;
      case BinaryOp::kSub: return x - y;
      case BinaryOp::kMul: return x * y;
      case BinaryOp::kDiv: return x / y;
    }
  }
  return T{};
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    throw InvalidArgumentError(std::string(binary_op_name(op)) + ": expected operands of the same dtype, got " +
                               describe(a) + " and " + describe(b));
  }
  if (!is_numeric(a.dtype())) internal::throw_not_numeric(a.dtype(), binary_op_name(op));
  if (a.shape() != b.shape() && a.rank() != 0 && b.rank() != 0) {
    throw InvalidArgumentError(std::string(binary_op_name(op)) +
                               ": expected equal shapes or a scalar operand, got " + describe(a) + " and " +
                               describe(b));
  }
  if (op == BinaryOp::kDiv && !is_floating(a.dtype())) {
    // True division of integers, as TF's `/` does: the result is float64.
    return binary(op, a.cast(DType::kFloat64), b.cast(DType::kFloat64));
  }
  const Shape& shape = a.rank() != 0 ? a.shape() : b.shape();
  void* out = nullptr;
  Tensor result = internal::allocate_tensor(a.dtype(), shape, &out);
  internal::dispatch_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto x = a.data<T>();
    auto y = b.data<T>();
    T* o = static_cast<T*>(out);
    const std::int64_t n = result.num_elements();
    const bool bx = x.size() == 1 && a.rank() == 0, by = y.size() == 1 && b.rank() == 0;
    for (std::int64_t i = 0; i < n; ++i) {
      o[i] = apply(op, x[bx ? 0 : static_cast<std::size_t>(i)], y[by ? 0 : static_cast<std::size_t>(i)]);
    }
  });
  return result;
}

}  // namespace

namespace {
[[noreturn]] void throw_too_many_dims(std::size_t rank) {
  throw InvalidArgumentError("expected a shape of at most " + std::to_string(Shape::kMaxRank) + " dimensions, got " +
                             std::to_string(rank));
}
}  // namespace

Shape::Shape(const std::int64_t* first, const std::int64_t* last) {
  const auto n = static_cast<std::size_t>(last - first);
  if (n > kMaxRank) throw_too_many_dims(n);
  std::copy(first, last, dims_);
  size_ = n;
}

void Shape::push_back(std::int64_t dim) {
  if (size_ == kMaxRank) throw_too_many_dims(size_ + 1);
  dims_[size_++] = dim;
}

Shape::iterator Shape::insert(const_iterator pos, std::int64_t dim) {
  if (size_ == kMaxRank) throw_too_many_dims(size_ + 1);
  const auto at = static_cast<std::size_t>(pos - dims_);
  std::copy_backward(dims_ + at, dims_ + size_, dims_ + size_ + 1);
  dims_[at] = dim;
  ++size_;
  return dims_ + at;
}

Shape::iterator Shape::erase(const_iterator pos) noexcept {
  const auto at = static_cast<std::size_t>(pos - dims_);
  std::copy(dims_ + at + 1, dims_ + size_, dims_ + at);
  --size_;
  dims_[size_] = 0;
  return dims_ + at;
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape_string(shape); }

std::string shape_string(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

namespace internal {

ElementCount count_elements(const Shape& shape, DType dtype) {
  ElementCount out;
  std::int64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      out.problem = ElementCount::Problem::kNegativeDimension;
      out.dimension = i;
      return out;
    }
  }
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != 0 && n > std::numeric_limits<std::int64_t>::max() / shape[i]) {
      out.problem = ElementCount::Problem::kTooManyElements;
      out.dimension = i;
      return out;
    }
    n *= shape[i];
  }
  out.elements = n;
  const auto size = static_cast<std::int64_t>(dtype_size(dtype));
  if (n > std::numeric_limits<std::int64_t>::max() / size) {
    out.problem = ElementCount::Problem::kTooManyBytes;
    return out;
  }
  out.bytes = n * size;
  return out;
}

Tensor allocate_tensor(DType dtype, Shape shape, void** data) {
  const std::size_t bytes = checked_num_bytes(shape, dtype);
  if (dtype == DType::kString) {
    // The elements are live (empty) strings from the start, destroyed with
    // the buffer: writers assign them, never memcpy them.
    const std::size_t n = bytes / sizeof(std::string);
    std::byte* p = allocate_bytes(bytes);
    auto* first = reinterpret_cast<std::string*>(p);
    std::uninitialized_value_construct_n(first, n);
    std::shared_ptr<const std::byte> storage(p, [bytes, n](const std::byte* q) {
      std::destroy_n(reinterpret_cast<std::string*>(const_cast<std::byte*>(q)), n);
      free_bytes(const_cast<std::byte*>(q), bytes);
    });
    *data = p;
    return Tensor(std::move(storage), 0, std::move(shape), dtype);
  }
  auto storage = allocate_storage(bytes);
  *data = const_cast<std::byte*>(storage.get());
  return Tensor(std::move(storage), 0, std::move(shape), dtype);
}

void copy_elements(DType dtype, std::byte* dst, const std::byte* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (dtype == DType::kString) {
    const auto* from = reinterpret_cast<const std::string*>(src);
    std::copy(from, from + bytes / sizeof(std::string), reinterpret_cast<std::string*>(dst));
    return;
  }
  std::memcpy(dst, src, bytes);
}

// Aligned to a cache line: pools of different threads never share one.
struct alignas(64) BufferPool::State {
  std::size_t min_bytes = 0;
  std::size_t max_free = 0;
  Mutex mutex;
  std::vector<std::pair<std::size_t, std::byte*>> free GUARDED_BY(mutex);  // (bytes, buffer)
  bool closed GUARDED_BY(mutex) = false;
  // A forked child takes no lock another thread may have held at the fork:
  // its copy of the free list is left, and its buffers go straight back to
  // the allocator.
  OwnerProcess owner;
};

BufferPool::BufferPool(std::size_t min_bytes, std::size_t max_free) : state_(std::make_shared<State>()) {
  state_->min_bytes = min_bytes;
  state_->max_free = max_free;
}

BufferPool::~BufferPool() {
  if (state_->owner.forked_child()) {
    // Left whole: its free list may have been mid-update at the fork.
    (void)new std::shared_ptr<State>(std::move(state_));
    return;
  }
  MutexLock lock(state_->mutex);
  state_->closed = true;
  for (auto& [bytes, p] : state_->free) free_bytes(p, bytes);
  state_->free.clear();
}

Tensor BufferPool::allocate(DType dtype, Shape shape, void** data) {
  const std::size_t bytes = checked_num_bytes(shape, dtype);
  if (bytes < state_->min_bytes || dtype == DType::kString) return allocate_tensor(dtype, std::move(shape), data);
  std::byte* p = nullptr;
  {
    MutexLock lock(state_->mutex);
    // Most recently returned first: its lines are the likeliest to be cached.
    for (auto it = state_->free.rbegin(); it != state_->free.rend(); ++it) {
      if (it->first == bytes) {
        p = it->second;
        state_->free.erase(std::next(it).base());
        break;
      }
    }
  }
  if (p == nullptr) p = allocate_bytes(bytes);
  // The deleter hands the buffer back to the pool (under its mutex, which
  // orders the last reader's accesses before the next writer's).
  std::shared_ptr<const std::byte> storage(p, [state = state_, bytes](const std::byte* q) {
    auto* buffer = const_cast<std::byte*>(q);
    if (!state->owner.forked_child()) {
      MutexLock lock(state->mutex);
      if (!state->closed && state->free.size() < state->max_free) {
        state->free.emplace_back(bytes, buffer);
        return;
      }
    }
    free_bytes(buffer, bytes);
  });
  *data = p;
  return TensorAccess::make(std::move(storage), std::move(shape), dtype);
}

std::byte* exclusive_bytes(const Tensor& t) noexcept {
  // use_count() is a relaxed load. Reading 1 is conclusive: `t` holds a
  // reference, so the count cannot read 1 while anyone else holds one (a
  // reference that reached this thread did so through some synchronization,
  // so its increment is visible here), and nobody can take a new one (no
  // other thread may copy `t`; no weak_ptr to a Tensor buffer exists). A
  // stale value errs on the safe side: 2 or more means "not exclusive".
  const std::shared_ptr<const std::byte>& owner = TensorAccess::storage(t);
  if (owner == nullptr || TensorAccess::read_only(t) || !is_numeric(t.dtype()) || owner.use_count() != 1) {
    return nullptr;
  }
  // Reading 1 does not order the other owners' accesses before ours: a
  // thread that read the buffer, then dropped its reference (a release
  // decrement), must not race with our writes. Taking and dropping a
  // reference performs read-modify-writes on the count that continue the
  // release sequence of that last decrement, and the drop is acq_rel in
  // libstdc++ and libc++ (the increment too in libstdc++): it synchronizes
  // with every earlier release of the count. An atomic_thread_fence(acquire)
  // after the load would do the same in the C++ model, but ThreadSanitizer
  // does not model fences; these atomic operations it sees. (A copy taken
  // later by the caller would acquire too with libstdc++, whose increment is
  // acq_rel, but not with libc++, whose increment is relaxed.)
  {
    const std::shared_ptr<const std::byte> acquire = owner;
  }
  return const_cast<std::byte*>(TensorAccess::raw(t));
}

Tensor scalar_of(DType dtype, double value) {
  if (!is_numeric(dtype)) throw_not_numeric(dtype, "arithmetic with a number");
  return dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_floating_point_v<T>) {
      return Tensor(static_cast<T>(value));
    } else {
      const bool exact = std::isfinite(value) && value == std::trunc(value) &&
                         value >= static_cast<double>(std::numeric_limits<T>::min()) &&
                         // max() + 1 = -min() is exact as a double; max() itself may not be (int64).
                         value < -static_cast<double>(std::numeric_limits<T>::min());
      if (!exact) {
        std::ostringstream v;
        v << value;
        throw InvalidArgumentError("expected a number representable as " + std::string(dtype_name(dtype)) +
                                   ", got " + v.str());
      }
      return Tensor(static_cast<T>(value));
    }
  });
}

Tensor scalar_of(DType dtype, std::int64_t value) {
  if (!is_numeric(dtype)) throw_not_numeric(dtype, "arithmetic with a number");
  return dispatch_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, std::int32_t>) {
      if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
        throw InvalidArgumentError("expected a number representable as int32, got " + std::to_string(value));
      }
    }
    return Tensor(static_cast<T>(value));
  });
}

void throw_dtype_mismatch(DType expected, DType got, const char* what) {
  throw InvalidArgumentError(std::string(what) + ": expected a tensor of dtype " + std::string(dtype_name(expected)) +
                             ", got dtype " + std::string(dtype_name(got)));
}

void throw_wrap_size_mismatch(const Shape& shape, std::size_t elements) {
  throw InvalidArgumentError("Tensor::wrap: expected " + std::to_string(checked_element_count(shape, DType::kInt64)) +
                             " elements for shape " + shape_string(shape) + ", got a vector of " +
                             std::to_string(elements));
}

std::int64_t checked_element_count(const Shape& shape, DType dtype) { return checked_num_elements(shape, dtype); }

void throw_ragged_rows(std::size_t expected, std::size_t got) {
  throw InvalidArgumentError("expected every row of the initializer to have " + std::to_string(expected) +
                             " elements, got a row of " + std::to_string(got));
}

}  // namespace internal

Tensor::Tensor() : Tensor(0.f) {}

Tensor::Tensor(std::string value) : Tensor(std::vector<std::string>{std::move(value)}, Shape{}) {}

Tensor::Tensor(std::vector<std::string> values, Shape shape) {
  const std::int64_t n = checked_num_elements(shape, DType::kString);
  if (static_cast<std::size_t>(n) != values.size()) {
    throw InvalidArgumentError("expected " + std::to_string(n) + " values for shape " + shape_string(shape) +
                               ", got " + std::to_string(values.size()));
  }
  void* out = nullptr;
  *this = internal::allocate_tensor(DType::kString, std::move(shape), &out);
  std::move(values.begin(), values.end(), static_cast<std::string*>(out));
}

std::span<const std::string> Tensor::strings() const {
  if (dtype_ != DType::kString) internal::throw_dtype_mismatch(DType::kString, dtype_, "Tensor::strings");
  return {reinterpret_cast<const std::string*>(raw()), static_cast<std::size_t>(num_elements_)};
}

Tensor::Tensor(std::shared_ptr<const std::byte> storage, std::size_t offset, Shape shape, DType dtype)
    : storage_(std::move(storage)),
      offset_(offset),
      shape_(std::move(shape)),
      num_elements_(checked_num_elements(shape_, dtype)),
      dtype_(dtype) {}

Tensor Tensor::wrap(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner, bool writable) {
  if (!is_numeric(dtype)) internal::throw_not_numeric(dtype, "Tensor::wrap");
  const std::int64_t elements = checked_num_elements(shape, dtype);
  if (elements > 0 && data == nullptr) {
    throw InvalidArgumentError("Tensor::wrap: expected a buffer of " + std::to_string(elements) + " elements of " +
                               std::string(dtype_name(dtype)) + ", got a null pointer");
  }
  if (reinterpret_cast<std::uintptr_t>(data) % dtype_size(dtype) != 0) {
    throw InvalidArgumentError("Tensor::wrap: expected a buffer aligned to " + std::to_string(dtype_size(dtype)) +
                               " bytes for " + std::string(dtype_name(dtype)) + ", got an address " +
                               std::to_string(reinterpret_cast<std::uintptr_t>(data) % dtype_size(dtype)) +
                               " bytes past a multiple");
  }
  // The aliasing constructor: the buffer pointer, with `owner`'s lifetime
  // (an empty owner still shares, so use_count() counts this tensor's copies).
  if (owner == nullptr) owner = std::make_shared<int>(0);
  std::shared_ptr<const std::byte> storage(std::move(owner), static_cast<const std::byte*>(data));
  Tensor t(std::move(storage), 0, std::move(shape), dtype);
  t.read_only_ = !writable;
  return t;
}

Tensor Tensor::from_bytes(DType dtype, Shape shape, const void* data, std::size_t bytes) {
  const internal::ElementCount count = checked_count(shape, dtype);
  const std::int64_t n = count.elements;
  if (static_cast<std::size_t>(count.bytes) != bytes) {
    throw InvalidArgumentError("expected " + std::to_string(n) + " values for shape " + shape_string(shape) +
                               ", got " + std::to_string(bytes / dtype_size(dtype)));
  }
  void* out = nullptr;
  Tensor t = internal::allocate_tensor(dtype, std::move(shape), &out);
  if (bytes > 0) std::memcpy(out, data, bytes);
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  void* out = nullptr;
  Tensor t = internal::allocate_tensor(dtype, std::move(shape), &out);
  if (dtype != DType::kString) std::memset(out, 0, static_cast<std::size_t>(t.num_elements()) * dtype_size(dtype));
  return t;
}

std::int64_t Tensor::dim(int axis) const {
  return shape_[static_cast<std::size_t>(normalize_axis(axis, rank(), "Tensor::dim"))];
}

template <TensorElement T>
T Tensor::item() const {
  if (num_elements_ != 1) {
    throw InvalidArgumentError("Tensor::item: expected a tensor with one element, got " + describe(*this));
  }
  return internal::dispatch_dtype(
      dtype_,
      [&](auto zero) {
        using U = decltype(zero);
        return internal::convert_number<T>(data<U>()[0]);
      },
      "Tensor::item");
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template std::int32_t Tensor::item<std::int32_t>() const;
template std::int64_t Tensor::item<std::int64_t>() const;

std::span<const std::byte> Tensor::bytes() const noexcept {
  return {raw(), static_cast<std::size_t>(num_elements_) * dtype_size(dtype_)};
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  if (rank() == 0) throw InvalidArgumentError("Tensor::slice: expected a tensor of rank >= 1, got a scalar");
  if (begin < 0 || begin > end || end > shape_[0]) {
    throw InvalidArgumentError("Tensor::slice: expected 0 <= begin <= end <= " + std::to_string(shape_[0]) +
                               ", got [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  }
  Shape s = shape_;
  s[0] = end - begin;
  const std::size_t row_bytes =
      shape_[0] == 0 ? 0 : static_cast<std::size_t>(num_elements_ / shape_[0]) * dtype_size(dtype_);
  Tensor view(storage_, offset_ + static_cast<std::size_t>(begin) * row_bytes, std::move(s), dtype_);
  view.read_only_ = read_only_;
  return view;
}

Tensor Tensor::operator[](std::int64_t i) const {
  if (rank() == 0) throw InvalidArgumentError("Tensor::operator[]: expected a tensor of rank >= 1, got a scalar");
  if (i < 0 || i >= shape_[0]) {
    throw InvalidArgumentError("Tensor::operator[]: expected an index in [0, " + std::to_string(shape_[0]) +
                               "), got " + std::to_string(i));
  }
  Tensor row = slice(i, i + 1);
  row.shape_.erase(row.shape_.begin());
  return row;
}

Tensor Tensor::reshape(Shape shape) const {
  const std::int64_t n = checked_num_elements(shape, dtype_);
  if (n != num_elements_) {
    throw InvalidArgumentError("Tensor::reshape: expected a shape of " + std::to_string(num_elements_) +
                               " elements (from " + shape_string(shape_) + "), got " + shape_string(shape));
  }
  Tensor view(storage_, offset_, std::move(shape), dtype_);
  view.read_only_ = read_only_;
  return view;
}

bool Tensor::shares_buffer_with(const Tensor& other) const noexcept { return storage_ == other.storage_; }

Tensor Tensor::sum() const { return reduce_axis(*this, INT32_MIN, false, "Tensor::sum"); }
Tensor Tensor::sum(int axis) const { return reduce_axis(*this, axis, false, "Tensor::sum"); }
Tensor Tensor::mean() const { return reduce_axis(*this, INT32_MIN, true, "Tensor::mean"); }
Tensor Tensor::mean(int axis) const { return reduce_axis(*this, axis, true, "Tensor::mean"); }

Tensor Tensor::cast(DType dtype) const {
  if (dtype == dtype_) return *this;
  if (!is_numeric(dtype_) || !is_numeric(dtype)) {
    throw InvalidArgumentError("Tensor::cast: casting " + std::string(dtype_name(dtype_)) + " to " +
                               std::string(dtype_name(dtype)) + " is not supported (string tensors are not numbers)");
  }
  void* out = nullptr;
  Tensor result = internal::allocate_tensor(dtype, shape_, &out);
  internal::dispatch_dtype(dtype_, [&](auto from_zero) {
    using From = decltype(from_zero);
    internal::dispatch_dtype(dtype, [&](auto to_zero) {
      using To = decltype(to_zero);
      auto in = data<From>();
      To* o = static_cast<To*>(out);
      for (std::size_t i = 0; i < in.size(); ++i) o[i] = internal::convert_number<To>(in[i]);
    });
  });
  return result;
}

bool operator==(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() == DType::kString) return std::ranges::equal(a.strings(), b.strings());
  return internal::dispatch_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto x = a.data<T>();
    auto y = b.data<T>();
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!(x[i] == y[i])) return false;
    }
    return true;
  });
}

std::string Tensor::to_string() const {
  std::string values = internal::format_numpy(dtype_, shape_, raw());
  if (values.find('\n') != std::string::npos) values.insert(0, "\n");
  return "Tensor(" + values + ", shape=" + shape_string(shape_) + ", dtype=" + std::string(dtype_name(dtype_)) + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

Tensor operator+(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kAdd, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kSub, a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMul, a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kDiv, a, b); }

Tensor concat(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) throw InvalidArgumentError("concat: expected at least one tensor, got none");
  const Tensor& first = tensors[0];
  if (first.rank() == 0) throw InvalidArgumentError("concat: expected tensors of rank >= 1, got a scalar at index 0");
  std::int64_t rows = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const bool same_inner = t.rank() == first.rank() &&
                            std::equal(t.shape().begin() + 1, t.shape().end(), first.shape().begin() + 1);
    if (t.dtype() != first.dtype() || !same_inner) {
      throw InvalidArgumentError("concat: expected tensors of dtype " + std::string(dtype_name(first.dtype())) +
                                 " and equal dimensions except axis 0 (tensor 0 has " + describe(first) +
                                 "), got tensor " + std::to_string(i) + " with " + describe(t));
    }
    rows += t.dim(0);
  }
  if (tensors.size() == 1) return first;
  Shape shape = first.shape();
  shape[0] = rows;
  // Consecutive views of one buffer (slices of a batch, rows of
  // from_tensor_slices) join into one view, without copying.
  bool adjacent = true;
  for (std::size_t i = 1; i < tensors.size() && adjacent; ++i) {
    const Tensor& prev = tensors[i - 1];
    adjacent = tensors[i].storage_ == first.storage_ && tensors[i].offset_ == prev.offset_ + prev.bytes().size();
  }
  if (adjacent) {
    Tensor joined(first.storage_, first.offset_, std::move(shape), first.dtype());
    joined.read_only_ = first.read_only_;
    return joined;
  }
  void* out = nullptr;
  Tensor result = internal::allocate_tensor(first.dtype(), std::move(shape), &out);
  auto* dst = static_cast<std::byte*>(out);
  for (const Tensor& t : tensors) {
    auto b = t.bytes();
    internal::copy_elements(first.dtype(), dst, b.data(), b.size());
    dst += b.size();
  }
  return result;
}

Tensor stack(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) throw InvalidArgumentError("stack: expected at least one tensor, got none");
  const Tensor& first = tensors[0];
  for (std::size_t i = 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dtype() != first.dtype() || t.shape() != first.shape()) {
      throw InvalidArgumentError("stack: expected tensors of equal shape and dtype (tensor 0 has " + describe(first) +
                                 "), got tensor " + std::to_string(i) + " with " + describe(t));
    }
  }
  std::vector<Tensor> rows;
  rows.reserve(tensors.size());
  Shape row_shape = first.shape();
  row_shape.insert(row_shape.begin(), 1);
  for (const Tensor& t : tensors) rows.push_back(t.reshape(row_shape));
  if (rows.size() == 1) return rows[0];
  return concat(rows);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.dtype() == DType::kString) return a == b;
  return internal::dispatch_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto x = a.data<T>();
    auto y = b.data<T>();
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double xi = static_cast<double>(x[i]), yi = static_cast<double>(y[i]);
      if (xi == yi) continue;  // also equal infinities
      if (!std::isfinite(xi) || !std::isfinite(yi)) return false;  // as numpy: inf is close only to itself
      if (!(std::fabs(xi - yi) <= atol + rtol * std::fabs(yi))) return false;
    }
    return true;
  });
}

}  // namespace distribute
