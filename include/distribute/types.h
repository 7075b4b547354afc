// Basic enumerations shared by every layer: element types and reduction ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace distribute {

// Element type of a Tensor. Names follow TF's dtype names.
enum class DType : std::uint8_t {
  kFloat32,
  kFloat64,
  kInt32,
  kInt64,
  // Byte strings (TF's tf.string): lines of text, serialized records. Only
  // the operations that move elements support them (slicing, batching,
  // concat, stack, equality, printing, datasets, run's results); arithmetic,
  // casts, collectives, reduce, gather and variables raise
  // InvalidArgumentError for them, checkpoints UnimplementedError.
  kString,
};

// "float32", "float64", "int32", "int64", "string".
std::string_view dtype_name(DType dtype);

// Size of one element in bytes (for kString: of the std::string object that
// holds it).
std::size_t dtype_size(DType dtype);

// True for kFloat32 and kFloat64.
constexpr bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64;
}

// True for the four number types (not kString).
constexpr bool is_numeric(DType dtype) { return dtype != DType::kString; }

// Maps a C++ element type to its DType (float -> kFloat32, double -> kFloat64,
// int32_t -> kInt32, int64_t -> kInt64). Other types do not compile.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

// True when T is one of the four number element types (string tensors have
// their own constructors and Tensor::strings()).
template <class T>
concept TensorElement = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                        std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>;

// How values from several replicas are combined (TF's tf.distribute.ReduceOp).
enum class ReduceOp : std::uint8_t {
  SUM,   // element-wise sum over replicas
  MEAN,  // element-wise sum divided by the number of replicas (or elements, with an axis)
};

// "ReduceOp.SUM" / "ReduceOp.MEAN", as TF prints them.
std::string_view reduce_op_name(ReduceOp op);

}  // namespace distribute
