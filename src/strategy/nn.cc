#include "distribute/nn.h"

#include <string>

#include "core/describe.h"
#include "core/dtype_dispatch.h"
#include "distribute/errors.h"
#include "distribute/replica_context.h"
#include "distribute/strategy.h"

namespace distribute::nn {
namespace {

// TF's _get_num_replicas_in_sync: the replica context's, else the scope's
// strategy's, else 1.
int num_replicas_in_sync() {
  if (const ReplicaContext* ctx = get_replica_context()) return ctx->num_replicas_in_sync();
  if (has_strategy()) return get_strategy().num_replicas_in_sync();
  return 1;
}

void require_replica_context(const char* function) {
  if (has_strategy() && in_cross_replica_context()) {
    throw FailedPreconditionError(std::string(function) +
                                  ": called in cross-replica context (inside a strategy's scope), expected a replica "
                                  "context: call it inside strategy.run");
  }
}

// The dtype of the result: the loss's for floats, float32 for int32 and
// float64 for int64 (TF's loss of Python ints is a float).
DType result_dtype(DType loss) {
  if (loss == DType::kInt32) return DType::kFloat32;
  if (loss == DType::kInt64) return DType::kFloat64;
  return loss;
}

// The sum of loss[i] * weight[broadcast i], in double; `weight_shape` is the
// weights' shape as adjusted by weight_shape_for.
double weighted_sum(const Tensor& loss, const Tensor* weight, const Shape& weight_shape = {}) {
  const Tensor l = loss.cast(DType::kFloat64);
  const double* x = l.data<double>().data();
  const auto n = static_cast<std::size_t>(l.num_elements());
  double total = 0;
  if (weight == nullptr) {
    for (std::size_t i = 0; i < n; ++i) total += x[i];
    return total;
  }
  const Tensor w = weight->cast(DType::kFloat64);
  const double* y = w.data<double>().data();
  if (weight_shape.size() == 0) {
    for (std::size_t i = 0; i < n; ++i) total += x[i];
    return total * y[0];
  }
  // Same rank, each weight dimension equal or 1: walk the loss's index and
  // map it onto the weights' (stride 0 along their 1-dimensions).
  const int rank = loss.rank();
  std::vector<std::int64_t> index(static_cast<std::size_t>(rank), 0), stride(static_cast<std::size_t>(rank), 0);
  std::int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    const auto u = static_cast<std::size_t>(d);
    stride[u] = weight_shape[u] == 1 ? 0 : s;
    s *= weight_shape[u];
  }
  std::int64_t at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    total += x[i] * y[at];
    for (int d = rank - 1; d >= 0; --d) {  // next index, row-major
      const auto u = static_cast<std::size_t>(d);
      at += stride[u];
      if (++index[u] < loss.shape()[u]) break;
      at -= stride[u] * index[u];
      index[u] = 0;
    }
  }
  return total;
}

// The weights' shape, brought to the loss's rank as TF's
// squeeze_or_expand_dimensions does (one trailing dimension of 1 dropped, or
// one added: [b, 1] weights for a [b] loss, [b] weights for a [b, t] loss),
// then checked to broadcast: each dimension equal to the loss's or 1.
Shape weight_shape_for(const Tensor& loss, const Tensor& weight) {
  Shape shape = weight.shape();
  if (weight.rank() == loss.rank() + 1 && weight.shape()[shape.size() - 1] == 1) {
    Shape dropped;
    for (std::size_t d = 0; d + 1 < shape.size(); ++d) dropped.push_back(shape[d]);
    shape = dropped;
  } else if (weight.rank() != 0 && weight.rank() == loss.rank() - 1) {
    shape.push_back(1);
  }
  bool ok = shape.size() == 0 || shape.size() == loss.shape().size();
  for (std::size_t d = 0; ok && shape.size() != 0 && d < shape.size(); ++d) {
    ok = shape[d] == 1 || shape[d] == loss.shape()[d];
  }
  if (!ok) {
    throw InvalidArgumentError("compute_average_loss: sample_weight of shape " + shape_string(weight.shape()) +
                               " does not broadcast to per_example_loss of shape " + shape_string(loss.shape()) +
                               ": expected a scalar, or the same rank (give or take a trailing dimension of 1) "
                               "with each dimension equal or 1");
  }
  return shape;
}

Tensor scalar_of_dtype(double value, DType dtype) {
  return Tensor::scalar(value).cast(dtype);
}

}  // namespace

Tensor compute_average_loss(const Tensor& per_example_loss, const AverageLossOptions& options) {
  if (per_example_loss.rank() < 1) {
    throw InvalidArgumentError("compute_average_loss: expected per_example_loss of rank >= 1 (one loss per example), "
                               "got " + internal::describe(per_example_loss));
  }
  const Shape weights = options.sample_weight ? weight_shape_for(per_example_loss, *options.sample_weight) : Shape{};
  std::int64_t global = 0;
  if (options.global_batch_size) {
    global = *options.global_batch_size;
    if (global < 0) {
      throw InvalidArgumentError("compute_average_loss: expected global_batch_size >= 0, got " +
                                 std::to_string(global));
    }
  } else {
    require_replica_context("compute_average_loss");
    global = per_example_loss.shape()[0] * num_replicas_in_sync();
  }
  const double sum = weighted_sum(per_example_loss, options.sample_weight ? &*options.sample_weight : nullptr, weights);
  return scalar_of_dtype(global == 0 ? 0.0 : sum / static_cast<double>(global), result_dtype(per_example_loss.dtype()));
}

Tensor scale_regularization_loss(const Tensor& regularization_loss) {
  require_replica_context("scale_regularization_loss");
  const double sum = weighted_sum(regularization_loss, nullptr);
  return scalar_of_dtype(sum / num_replicas_in_sync(), result_dtype(regularization_loss.dtype()));
}

}  // namespace distribute::nn
