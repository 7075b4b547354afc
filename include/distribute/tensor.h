// Tensor: an immutable, reference-counted, contiguous n-dimensional array.
//
// A Tensor has a dtype (float32, float64, int32, int64, string), a shape, and a
// row-major buffer that is never written after the Tensor is built. Copying a
// Tensor copies a reference to the same buffer (O(1), no data copy); slicing
// along axis 0 and reshaping are zero-copy views of the same buffer. Because
// the data is immutable, Tensors may be read from any number of threads at
// once without synchronization, and one buffer may back the value of every
// replica (a Mirrored value costs the memory of one).
//
// Operations that produce new values (arithmetic, sum, concat, ...) allocate a
// new buffer. Invalid input raises InvalidArgumentError naming both operands'
// shapes and dtypes.
//
// Construction:
//   Tensor a{5.f, 6.f};                    // float32, shape (2,)
//   Tensor b{{1, 2}, {3, 4}};              // int32,   shape (2, 2)
//   Tensor c(std::vector<double>{...}, {2, 3});
//   Tensor d = Tensor::scalar(11.f);       // float32, shape ()
// The dtype follows the C++ element type: float -> float32, double -> float64,
// int32_t -> int32, int64_t -> int64. As with std::vector, braces pick the
// list constructor: Tensor{5.f} has shape (1,), Tensor(5.f) has shape ().
//
// String tensors (TF's tf.string, byte strings: lines, serialized records):
//   Tensor s(std::string("hello"));                        // string, shape ()
//   Tensor v(std::vector<std::string>{"a", "bc"}, {2});    // string, shape (2,)
//   v.strings()[1] == "bc"
// They support what moves elements (views, concat, stack, batching,
// equality, printing as TF does: b'hello'); arithmetic, sum/mean, cast,
// item, wrap and collectives raise InvalidArgumentError for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "distribute/types.h"

namespace distribute {

// Dimensions of a tensor, outermost first; a scalar has an empty shape. A
// small inline array (no heap allocation: tensors are copied per element in
// input pipelines), with the parts of std::vector's interface that shapes
// need. At most kMaxRank dimensions (InvalidArgumentError beyond).
class Shape {
 public:
  static constexpr std::size_t kMaxRank = 8;
  using value_type = std::int64_t;
  using iterator = std::int64_t*;
  using const_iterator = const std::int64_t*;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : Shape(dims.begin(), dims.end()) {}
  Shape(const std::vector<std::int64_t>& dims) : Shape(dims.data(), dims.data() + dims.size()) {}  // NOLINT
  Shape(const std::int64_t* first, const std::int64_t* last);

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::int64_t& operator[](std::size_t i) noexcept { return dims_[i]; }
  std::int64_t operator[](std::size_t i) const noexcept { return dims_[i]; }
  std::int64_t front() const noexcept { return dims_[0]; }
  std::int64_t back() const noexcept { return dims_[size_ - 1]; }
  std::int64_t* data() noexcept { return dims_; }
  const std::int64_t* data() const noexcept { return dims_; }
  iterator begin() noexcept { return dims_; }
  iterator end() noexcept { return dims_ + size_; }
  const_iterator begin() const noexcept { return dims_; }
  const_iterator end() const noexcept { return dims_ + size_; }

  void push_back(std::int64_t dim);
  // Inserts `dim` before `pos`; returns an iterator to it.
  iterator insert(const_iterator pos, std::int64_t dim);
  // Removes the dimension at `pos`.
  iterator erase(const_iterator pos) noexcept;

  operator std::vector<std::int64_t>() const { return {begin(), end()}; }  // NOLINT

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    if (a.size_ != b.size_) return false;
    for (std::size_t i = 0; i < a.size_; ++i) {
      if (a.dims_[i] != b.dims_[i]) return false;
    }
    return true;
  }

 private:
  std::int64_t dims_[kMaxRank] = {};
  std::size_t size_ = 0;
};

// TF's shape text: "()", "(2,)", "(2, 3)".
std::string shape_string(const Shape& shape);
std::ostream& operator<<(std::ostream& os, const Shape& shape);

class Tensor;

namespace internal {
// Allocates a tensor whose buffer the caller fills through *data before the
// tensor is shared with anyone (the only way to write a Tensor's buffer).
Tensor allocate_tensor(DType dtype, Shape shape, void** data);
// A rank-0 tensor of `dtype` holding `value`; InvalidArgumentError when the
// value is not exactly representable in dtype (1.5 as int32, 2^40 as int32).
Tensor scalar_of(DType dtype, double value);
Tensor scalar_of(DType dtype, std::int64_t value);
[[noreturn]] void throw_dtype_mismatch(DType expected, DType got, const char* what);

// The representation of a Tensor for the library's own layers
// (src/core/tensor_access.h: buffer pools, donation); not part of the API.
struct TensorAccess;
[[noreturn]] void throw_ragged_rows(std::size_t expected, std::size_t got);
[[noreturn]] void throw_wrap_size_mismatch(const Shape& shape, std::size_t elements);
// The element count of `shape` (InvalidArgumentError when a dimension is
// negative or the count, or its bytes as `dtype`, overflows).
std::int64_t checked_element_count(const Shape& shape, DType dtype);

}  // namespace internal

class Tensor {
 public:
  // A float32 scalar holding 0.
  Tensor();

  // A rank-0 tensor.
  template <TensorElement T>
  explicit Tensor(T value) : Tensor(std::vector<T>{value}, Shape{}) {}

  // A rank-1 tensor of the listed values.
  template <TensorElement T>
  Tensor(std::initializer_list<T> values)
      : Tensor(std::vector<T>(values), Shape{static_cast<std::int64_t>(values.size())}) {}

  // A rank-2 tensor; every row must have the same length (else InvalidArgumentError).
  template <TensorElement T>
  Tensor(std::initializer_list<std::initializer_list<T>> rows);

  // `values` laid out row-major in `shape`; the element count must equal the
  // product of the dimensions (else InvalidArgumentError).
  template <TensorElement T>
  Tensor(std::vector<T> values, Shape shape);

  // A rank-0 string tensor.
  explicit Tensor(std::string value);
  // Strings laid out row-major in `shape` (element count as above).
  Tensor(std::vector<std::string> values, Shape shape);

  template <TensorElement T>
  static Tensor scalar(T value) {
    return Tensor(value);
  }
  // A tensor of `shape` filled with zeros (empty strings for kString).
  static Tensor zeros(DType dtype, Shape shape);
  // A tensor of `shape` whose elements `fill` writes: fill(std::span<T>) is
  // called once, on the calling thread, with the new buffer (contents
  // unspecified until fill writes them) before anyone else can see it. The
  // way to produce a computed tensor without an intermediate copy, e.g. a
  // matrix product written through an Eigen::Map. If fill throws, the tensor
  // is discarded and the exception propagates.
  template <TensorElement T, class Fill>
  static Tensor generate(Shape shape, Fill&& fill);

  // Zero-copy wrapping of a caller's buffer (a std::vector's, an Eigen
  // matrix's, a numpy array's, a torch tensor's): `data` holds
  // num_elements(shape) elements of `dtype`, row-major and contiguous, and
  // stays valid while `owner` lives; the tensor and every copy or view of it
  // keep `owner` alive (released when the last one goes, on whichever thread
  // drops it). O(1) whatever the size; `data` must be aligned for the dtype
  // (InvalidArgumentError otherwise, and for a null `data` with elements).
  //
  // Who may write the buffer: the library never writes it, except when the
  // tensor is handed to an in-place (donated) all_reduce as the only owner of
  // its buffer and `writable` is true: then the result is written into the
  // caller's buffer (as MPI_IN_PLACE does). Otherwise the buffer must not
  // change while any Tensor of it is alive (the library reads it from any
  // thread, and Tensors are immutable): the caller may write it again once
  // every Tensor of it is gone (owner released), or after a donated
  // all_reduce returned it as the result (reduced in place). A collective
  // that did not reduce it in place may still be read by the other
  // replicas after this replica's call returned (a small all_reduce has no
  // closing barrier): write it only after the next collective of every
  // replica has begun, e.g. after another collective call returned.
  static Tensor wrap(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner,
                     bool writable = false);
  // A std::vector moved in (no copy): the tensor owns it.
  template <TensorElement T>
  static Tensor wrap(std::vector<T>&& values, Shape shape);

  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  int rank() const noexcept { return static_cast<int>(shape_.size()); }
  std::int64_t num_elements() const noexcept { return num_elements_; }
  // Size of dimension `axis`; negative axes count from the end.
  std::int64_t dim(int axis) const;

  // Typed read access; InvalidArgumentError when T does not match dtype().
  template <TensorElement T>
  std::span<const T> data() const;
  // The elements of a string tensor; InvalidArgumentError for other dtypes.
  std::span<const std::string> strings() const;
  // The single element of a tensor with one element, converted to T.
  template <TensorElement T>
  T item() const;
  // The buffer's bytes (for kString: the std::string objects, which only
  // internal::copy_elements may copy).
  std::span<const std::byte> bytes() const noexcept;

  // Zero-copy views of the same buffer.
  // Rows [begin, end) along axis 0 (0 <= begin <= end <= dim(0)).
  Tensor slice(std::int64_t begin, std::int64_t end) const;
  // Row i along axis 0, with rank one less.
  Tensor operator[](std::int64_t i) const;
  // The same elements in another shape of equal element count.
  Tensor reshape(Shape shape) const;
  // True when both tensors are views of one buffer.
  bool shares_buffer_with(const Tensor& other) const noexcept;

  // Reductions. Over all elements they return a scalar; along an axis the
  // axis is removed. sum keeps the dtype (float sums accumulate in double).
  // mean keeps the dtype (integer means truncate, as tf.reduce_mean does) and
  // raises InvalidArgumentError for an empty integer tensor.
  Tensor sum() const;
  Tensor sum(int axis) const;
  Tensor mean() const;
  Tensor mean(int axis) const;

  // The elements converted to another dtype (as static_cast does).
  Tensor cast(DType dtype) const;

  // Exact equality of dtype, shape and every element (NaN != NaN).
  friend bool operator==(const Tensor& a, const Tensor& b);

  // TF's str(): "Tensor([5. 6.], shape=(2,), dtype=float32)", values in
  // numpy's layout.
  std::string to_string() const;

 private:
  friend Tensor internal::allocate_tensor(DType, Shape, void**);
  friend struct internal::TensorAccess;
  friend Tensor concat(const std::vector<Tensor>& tensors);

  Tensor(std::shared_ptr<const std::byte> storage, std::size_t offset, Shape shape, DType dtype);
  static Tensor from_bytes(DType dtype, Shape shape, const void* data, std::size_t bytes);
  const std::byte* raw() const noexcept { return storage_.get() + offset_; }

  std::shared_ptr<const std::byte> storage_;
  std::size_t offset_ = 0;  // bytes from the start of storage_
  Shape shape_;
  std::int64_t num_elements_ = 1;
  DType dtype_ = DType::kFloat32;
  bool read_only_ = false;  // wraps a caller's buffer the library must never write
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Element-wise arithmetic. Operands must have the same dtype and either the
// same shape or one of them rank 0 (broadcast). A C++ number operand takes
// the tensor's dtype and must be exactly representable in it. Division of
// integer tensors is true division and returns float64, as in TF.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);

namespace internal {
template <class S>
Tensor scalar_like(const Tensor& t, S value) {
  if constexpr (std::is_floating_point_v<S>) {
    return scalar_of(t.dtype(), static_cast<double>(value));
  } else {
    return scalar_of(t.dtype(), static_cast<std::int64_t>(value));
  }
}
}  // namespace internal

template <class S>
  requires std::is_arithmetic_v<S>
Tensor operator+(const Tensor& a, S b) { return a + internal::scalar_like(a, b); }
template <class S>
  requires std::is_arithmetic_v<S>
Tensor operator+(S a, const Tensor& b) { return internal::scalar_like(b, a) + b; }
template <class S>
  requires std::is_arithmetic_v<S>
Tensor operator-(const Tensor& a, S b) { return a - internal::scalar_like(a, b); }
template <class S>
  requires std::is_arithmetic_v<S>
Tensor operator-(S a, const Tensor& b) { return internal::scalar_like(b, a) - b; }
template <class S>
  requires std::is_arithmetic_v<S>
Tensor operator*(const Tensor& a, S b) { return a * internal::scalar_like(a, b); }
template <class S>
  requires std::is_arithmetic_v<S>
Tensor operator*(S a, const Tensor& b) { return internal::scalar_like(b, a) * b; }
template <class S>
  requires std::is_arithmetic_v<S>
Tensor operator/(const Tensor& a, S b) { return a / internal::scalar_like(a, b); }
template <class S>
  requires std::is_arithmetic_v<S>
Tensor operator/(S a, const Tensor& b) { return internal::scalar_like(b, a) / b; }

// Joins tensors of equal dtype and rank >= 1 along axis 0; all dimensions but
// the first must match. A single tensor, or tensors that are adjacent views
// of one buffer (consecutive slices), are joined without a copy.
Tensor concat(const std::vector<Tensor>& tensors);
// Stacks tensors of equal dtype and shape along a new axis 0 (without a copy
// when they are consecutive rows of one buffer).
Tensor stack(const std::vector<Tensor>& tensors);

// True when shapes and dtypes are equal and |a - b| <= atol + rtol * |b|
// element-wise (numpy's allclose); string tensors must be equal.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// ---------------------------------------------------------------------------
// Template definitions.

template <TensorElement T>
Tensor::Tensor(std::vector<T> values, Shape shape)
    : Tensor(from_bytes(dtype_of_v<T>, std::move(shape), values.data(), values.size() * sizeof(T))) {}

template <TensorElement T>
Tensor::Tensor(std::initializer_list<std::initializer_list<T>> rows) : Tensor() {
  std::vector<T> values;
  const std::size_t cols = rows.size() == 0 ? 0 : rows.begin()->size();
  values.reserve(rows.size() * cols);
  for (const auto& row : rows) {
    if (row.size() != cols) internal::throw_ragged_rows(cols, row.size());
    values.insert(values.end(), row.begin(), row.end());
  }
  *this = Tensor(std::move(values),
                 Shape{static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(cols)});
}

template <TensorElement T, class Fill>
Tensor Tensor::generate(Shape shape, Fill&& fill) {
  void* data = nullptr;
  Tensor t = internal::allocate_tensor(dtype_of_v<T>, std::move(shape), &data);
  std::forward<Fill>(fill)(std::span<T>(static_cast<T*>(data), static_cast<std::size_t>(t.num_elements())));
  return t;
}

template <TensorElement T>
Tensor Tensor::wrap(std::vector<T>&& values, Shape shape) {
  auto owned = std::make_shared<std::vector<T>>(std::move(values));
  const T* data = owned->data();
  if (static_cast<std::size_t>(internal::checked_element_count(shape, dtype_of_v<T>)) != owned->size()) {
    internal::throw_wrap_size_mismatch(shape, owned->size());
  }
  return wrap(dtype_of_v<T>, std::move(shape), data, std::move(owned), /*writable=*/true);
}

template <TensorElement T>
std::span<const T> Tensor::data() const {
  if (dtype_of_v<T> != dtype_) internal::throw_dtype_mismatch(dtype_of_v<T>, dtype_, "Tensor::data");
  return {reinterpret_cast<const T*>(raw()), static_cast<std::size_t>(num_elements_)};
}

}  // namespace distribute
