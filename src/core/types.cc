#include "distribute/types.h"

#include <string>

#include "core/dtype_dispatch.h"
#include "distribute/errors.h"

namespace distribute {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kString: return "string";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kString: return sizeof(std::string);
  }
  return 0;
}

namespace internal {
void throw_not_numeric(DType dtype, const char* what) {
  throw InvalidArgumentError(std::string(what) + ": expected a tensor of a number dtype (float32, float64, int32, int64), got dtype " +
                             std::string(dtype_name(dtype)));
}
}  // namespace internal

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "ReduceOp.SUM";
    case ReduceOp::MEAN: return "ReduceOp.MEAN";
  }
  return "ReduceOp.?";
}

}  // namespace distribute
