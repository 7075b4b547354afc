// Strategy::reduce: combining per-replica values in cross-replica context.
//
// Without an axis the values are added element-wise, in replica order (so the
// result does not depend on thread timing), and MEAN divides by the number of
// replicas. With an axis, each replica first sums its value along the axis
// (numerator) and counts the elements along it (denominator); both are added
// over replicas and MEAN divides the two, as TF does. Dividing by the total
// count, not by the number of replicas, is what makes a partial last batch
// split [5., 6.] / [7.] average to 6.0 instead of 6.25.
#include <string>

#include "core/describe.h"
#include "core/tensor_access.h"
#include "distribute/strategy.h"

namespace distribute {
namespace {

using internal::describe;

std::string call_name(ReduceOp op) { return "Strategy::reduce(" + std::string(reduce_op_name(op)) + ")"; }

// Element-wise sum over replicas, in replica order. `what` tells how the
// values were derived, for the error message.
Tensor sum_over_replicas(ReduceOp op, const std::vector<Tensor>& values, const std::vector<Tensor>& originals,
                         bool along_axis) {
  for (std::size_t r = 1; r < values.size(); ++r) {
    if (values[r].dtype() != values[0].dtype() || values[r].shape() != values[0].shape()) {
      std::string msg = call_name(op) + ": expected every replica's value to have the same " +
                        (along_axis ? "shape after reducing the axis" : "shape") + " and dtype, got " +
                        describe(values[0]) + " on replica 0 and " + describe(values[r]) + " on replica " +
                        std::to_string(r);
      if (along_axis) {
        msg += " (per-replica values of shape " + shape_string(originals[0].shape()) + " and " +
               shape_string(originals[r].shape()) + ")";
      }
      throw InvalidArgumentError(msg);
    }
  }
  Tensor total = values[0];
  for (std::size_t r = 1; r < values.size(); ++r) total = total + values[r];
  return total;
}

// MEAN keeps float dtypes and turns integers into float64 (true division).
Tensor divide(const Tensor& numerator, std::int64_t count) {
  if (is_floating(numerator.dtype())) return numerator / static_cast<double>(count);
  return numerator.cast(DType::kFloat64) / static_cast<double>(count);
}

Tensor reduce_values(ReduceOp op, const std::vector<Tensor>& values, std::optional<int> axis) {
  if (!axis.has_value()) {
    if (values.size() == 1) return values[0];  // one replica: the value itself, any op
    Tensor total = sum_over_replicas(op, values, values, false);
    return op == ReduceOp::SUM ? total : divide(total, static_cast<std::int64_t>(values.size()));
  }
  std::vector<Tensor> sums;
  sums.reserve(values.size());
  std::int64_t count = 0;
  for (std::size_t r = 0; r < values.size(); ++r) {
    const Tensor& v = values[r];
    if (*axis < -v.rank() || *axis >= v.rank()) {
      throw InvalidArgumentError(call_name(op) + ": expected axis in [" + std::to_string(-v.rank()) + ", " +
                                 std::to_string(v.rank()) + ") for the value of replica " + std::to_string(r) +
                                 " (" + describe(v) + "), got axis " + std::to_string(*axis));
    }
    sums.push_back(v.sum(*axis));
    count += v.dim(*axis);
  }
  Tensor total = sum_over_replicas(op, sums, values, true);
  return op == ReduceOp::SUM ? total : divide(total, count);
}

}  // namespace

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis) {
  require_cross_replica_or_default_context("reduce");
  check_origin(value.origin(), call_name(op));
  for (const Tensor& v : value.values()) internal::check_numeric(v, "Strategy::reduce");
  if (value.values().size() != devices_.size()) {
    throw InvalidArgumentError(call_name(op) + ": expected a PerReplica with one value per replica (" +
                               std::to_string(devices_.size()) + " for " + to_string() + "), got " +
                               std::to_string(value.values().size()) + " values");
  }
  if (num_workers() == 1) return reduce_values(op, value.values(), axis);
  // Several workers: the local replicas' sum, then the workers' sum; MEAN
  // divides by the global count.
  const Tensor total = sum_over_workers(reduce_values(ReduceOp::SUM, value.values(), axis));
  if (op == ReduceOp::SUM) return total;
  if (!axis.has_value()) return divide(total, num_replicas_in_sync());
  std::int64_t local_count = 0;
  for (const Tensor& v : value.values()) local_count += v.dim(*axis);
  return divide(total, sum_over_workers(Tensor(local_count)).data<std::int64_t>()[0]);
}

Tensor Strategy::reduce(ReduceOp op, const Mirrored<Tensor>& value, std::optional<int> axis) {
  require_cross_replica_or_default_context("reduce");
  check_origin(value.origin(), call_name(op));
  if (value.values().size() != devices_.size()) {
    throw InvalidArgumentError(call_name(op) + ": expected a Mirrored with one value per replica (" +
                               std::to_string(devices_.size()) + " for " + to_string() + "), got " +
                               std::to_string(value.values().size()) + " values");
  }
  for (const Tensor& v : value.values()) internal::check_numeric(v, "Strategy::reduce");
  // As TF's MirroredStrategy: MEAN returns the value itself; SUM reduces
  // the copies like any distributed value (N times the value).
  if (!axis.has_value() && (op == ReduceOp::MEAN || num_replicas_in_sync() == 1)) return value.primary();
  return reduce(op, PerReplica<Tensor>(value.values(), internal::ProducedBy{value.origin()}), axis);
}

Tensor Strategy::reduce(ReduceOp op, const Tensor& value, std::optional<int> axis) {
  require_cross_replica_or_default_context("reduce");
  internal::check_numeric(value, "Strategy::reduce");
  if (kind_ == Kind::kDefault || kind_ == Kind::kOneDevice) {
    // The value is the single replica's.
    return reduce_values(op, {value}, axis);
  }
  if (axis.has_value()) {
    // As TF does: every replica reduces the same value, then the results are
    // combined (SUM therefore gives N times the sum).
    return reduce(op, PerReplica<Tensor>(std::vector<Tensor>(devices_.size(), value)), axis);
  }
  if (num_workers() > 1 && (num_local_replicas() == 1 || op == ReduceOp::MEAN)) {
    // As TF's MultiWorkerMirroredStrategy with several workers: a plain
    // value is this worker's (what run returns with one local replica) and
    // is reduced across the workers; MEAN over several local replicas
    // counts it once per local replica, which is the mean over workers.
    return reduce(op, PerReplica<Tensor>(std::vector<Tensor>(devices_.size(), value)), axis);
  }
  if (op == ReduceOp::MEAN || num_replicas_in_sync() == 1) return value;
  throw InvalidArgumentError("A non-DistributedValues value " + value.to_string() +
                             " cannot be reduced with the given reduce op ReduceOp.SUM by " + to_string() +
                             ": expected a PerReplica value (one value per replica)");
}

}  // namespace distribute
