#include "distribute/types.h"

namespace distribute {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "ReduceOp.SUM";
    case ReduceOp::MEAN: return "ReduceOp.MEAN";
  }
  return "ReduceOp.?";
}

}  // namespace distribute
