// ReplicaContext collectives and Strategy::gather.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "collectives/collective_group.h"
#include "collectives/cross_worker_ops.h"
#include "core/fnv1a.h"
#include "distribute/errors.h"
#include "distribute/strategy.h"
#include "runtime/deadline.h"
#include "strategy/context.h"

namespace distribute {
namespace internal {

CrossReplicaScope::CrossReplicaScope(Strategy& strategy) { push_mode({&strategy, nullptr}); }
CrossReplicaScope::~CrossReplicaScope() { pop_mode(); }

namespace {

Clock::time_point deadline_for(const CommunicationOptions& merged) {
  const double seconds = *merged.timeout_seconds;
  if (!(seconds > 0)) {
    throw InvalidArgumentError("CommunicationOptions: expected timeout_seconds > 0, got " + std::to_string(seconds));
  }
  return internal::deadline_after(seconds);
}

int normalize_gather_axis(const Tensor& t, int axis, const char* op) {
  check_numeric(t, op);
  if (t.rank() == 0) {
    throw InvalidArgumentError(std::string(op) + ": expected tensors of rank >= 1, got a scalar; add an axis first "
                               "(e.g. reshape to shape (1,))");
  }
  if (axis < -t.rank() || axis >= t.rank()) {
    throw InvalidArgumentError(std::string(op) + ": expected axis in [" + std::to_string(-t.rank()) + ", " +
                               std::to_string(t.rank()) + ") for a tensor of rank " + std::to_string(t.rank()) +
                               ", got " + std::to_string(axis));
  }
  return axis < 0 ? axis + t.rank() : axis;
}

}  // namespace
}  // namespace internal

namespace {

// Raises unless this thread is running `ctx`'s replica function (or is in
// the default state and `ctx` is the default replica context).
void require_own_context(const ReplicaContext& ctx, const char* method) {
  const internal::ThreadMode* mode = internal::current_mode();
  if (mode != nullptr && mode->replica == &ctx) return;
  if (mode == nullptr && get_replica_context() == &ctx) return;
  if (mode != nullptr && mode->replica == nullptr) {
    throw FailedPreconditionError(std::string("ReplicaContext::") + method +
                                  " requires being in a replica context (inside strategy.run), but this thread is "
                                  "in cross-replica context of " + mode->strategy->to_string());
  }
  throw FailedPreconditionError(std::string("ReplicaContext::") + method + ": this is the context of replica " +
                                std::to_string(ctx.replica_id_in_sync_group()) + " of " + ctx.strategy().to_string() +
                                ", but this thread is not running that replica's function (mismatching "
                                "ReplicaContext)");
}

}  // namespace

Tensor ReplicaContext::all_reduce(ReduceOp op, const Tensor& value, const CommunicationOptions& options) const {
  std::vector<Tensor>* results = all_reduce_into(op, std::span<const Tensor>(&value, 1), {}, options);
  if (results == nullptr) return value;
  Tensor out = std::move(results->front());
  results->clear();
  return out;
}

std::vector<Tensor> ReplicaContext::all_reduce(ReduceOp op, const std::vector<Tensor>& values,
                                               const CommunicationOptions& options) const {
  std::vector<Tensor>* results = all_reduce_into(op, values, {}, options);
  if (results == nullptr) return values;
  return std::move(*results);
}

Tensor ReplicaContext::all_reduce(ReduceOp op, Tensor&& value, const CommunicationOptions& options) const {
  std::vector<Tensor>* results = all_reduce_into(op, std::span<const Tensor>(&value, 1), std::span<Tensor>(&value, 1),
                                                 options);
  Tensor out = results == nullptr ? std::move(value) : std::move(results->front());
  if (results != nullptr) results->clear();
  Tensor handed = std::move(value);  // consumed: the caller keeps no reference to the buffer
  return out;
}

std::vector<Tensor> ReplicaContext::all_reduce(ReduceOp op, std::vector<Tensor>&& values,
                                               const CommunicationOptions& options) const {
  std::vector<Tensor>* results = all_reduce_into(op, values, values, options);
  std::vector<Tensor> out = results == nullptr ? std::move(values) : std::move(*results);
  values.clear();  // consumed
  return out;
}

std::vector<Tensor>* ReplicaContext::all_reduce_into(ReduceOp op, std::span<const Tensor> values,
                                                     std::span<Tensor> handed,
                                                     const CommunicationOptions& options) const {
  require_own_context(*this, "all_reduce");
  const CommunicationOptions merged = strategy_->communication_options_.merge(options);
  const auto deadline = internal::deadline_for(merged);
  if (merged.bytes_per_pack < 0) {
    throw InvalidArgumentError("all_reduce: expected bytes_per_pack >= 0, got " + std::to_string(merged.bytes_per_pack));
  }
  for (const Tensor& t : values) internal::check_numeric(t, "all_reduce");
  for (const Tensor& t : handed) internal::check_numeric(t, "all_reduce");
  if (strategy_->num_replicas_in_sync() == 1) return nullptr;  // the inputs are the results
  internal::CollectiveGroup& group = *strategy_->collectives_;
  if (handed.empty()) return &group.all_reduce(replica_id_, op, values, merged.bytes_per_pack, deadline);
  return &group.all_reduce_donated(replica_id_, op, handed, merged.bytes_per_pack, deadline);
}

Tensor ReplicaContext::all_gather(const Tensor& value, int axis, const CommunicationOptions& options) const {
  return all_gather(std::vector<Tensor>{value}, axis, options)[0];
}

std::vector<Tensor> ReplicaContext::all_gather(const std::vector<Tensor>& values, int axis,
                                               const CommunicationOptions& options) const {
  require_own_context(*this, "all_gather");
  const auto deadline = internal::deadline_for(strategy_->communication_options_.merge(options));
  if (values.empty()) throw InvalidArgumentError("ReplicaContext::all_gather: expected at least one tensor, got none");
  const int a = internal::normalize_gather_axis(values[0], axis, "ReplicaContext::all_gather");
  for (const Tensor& t : values) {
    // One axis for the whole call: a negative one names the same dimension
    // of every tensor only when they have one rank.
    if (internal::normalize_gather_axis(t, axis, "ReplicaContext::all_gather") != a) {
      throw InvalidArgumentError("ReplicaContext::all_gather: expected tensors of one rank with the negative axis " +
                                 std::to_string(axis) + ", got ranks " + std::to_string(values[0].rank()) + " and " +
                                 std::to_string(t.rank()) + "; gather them in separate calls or give the axis from "
                                 "the front");
    }
  }
  if (strategy_->num_replicas_in_sync() == 1) return values;
  return strategy_->collectives_->all_gather(replica_id_, values, a, deadline);
}

void ReplicaContext::check_same_structure(const std::string& shape, const char* what,
                                          const CommunicationOptions& options) const {
  if (strategy_->num_replicas_in_sync() == 1) return;
  // FNV-1a of the description: one int64 per replica, gathered.
  const std::uint64_t h = internal::fnv1a(shape);
  const Tensor all =
      all_gather(Tensor(std::vector<std::int64_t>{std::bit_cast<std::int64_t>(h)}, Shape{1}), 0, options);
  const auto hashes = all.data<std::int64_t>();
  std::string differing;
  for (std::size_t r = 1; r < hashes.size(); ++r) {
    if (hashes[r] != hashes[0]) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!differing.empty()) {
    throw InvalidArgumentError(std::string(what) + ": expected the same structure from every replica, but replica(s) " +
                               differing + " passed other lengths or keys than replica 0 (replica " +
                               std::to_string(replica_id_) + "'s: " + shape + ")");
  }
}

std::shared_ptr<void> ReplicaContext::merge_call_erased(
    std::shared_ptr<const void> args, const char* type_name,
    internal::FunctionRef<std::shared_ptr<void>(std::span<const void* const>)> leader) const {
  require_own_context(*this, "merge_call");
  const auto deadline = internal::deadline_for(strategy_->communication_options_);
  if (strategy_->num_replicas_in_sync() == 1) {
    const void* all[] = {args.get()};
    return leader(all);
  }
  return strategy_->collectives_->merge_call(replica_id_, std::move(args), type_name, leader, deadline);
}

Tensor Strategy::gather(const PerReplica<Tensor>& value, int axis) {
  require_cross_replica_or_default_context("gather");
  check_origin(value.origin(), "Strategy::gather");
  if (value.values().size() != devices_.size()) {
    throw InvalidArgumentError("Strategy::gather: expected a PerReplica with one value per replica (" +
                               std::to_string(devices_.size()) + " for " + to_string() + "), got " +
                               std::to_string(value.values().size()) + " values");
  }
  const int a = internal::normalize_gather_axis(value.values()[0], axis, "Strategy::gather");
  return gather_over_workers(internal::concat_along_axis(value.values(), a, "Strategy::gather", "replica"), a);
}

Tensor Strategy::gather(const Mirrored<Tensor>& value, int axis) {
  // (Keeps where the values came from: another strategy's are refused.)
  return gather(PerReplica<Tensor>(value.values(), internal::ProducedBy{value.origin()}), axis);
}

Tensor Strategy::gather(const Tensor& value, int axis) {
  require_cross_replica_or_default_context("gather");
  if (num_workers() == 1) return value;  // TF returns a non-distributed value unchanged
  // Several workers: as TF's MultiWorkerMirroredStrategy, the value is this
  // worker's and the workers' values are concatenated; with several local
  // replicas it would be ambiguous (TF has no answer either).
  if (num_local_replicas() != 1) {
    throw InvalidArgumentError("Strategy::gather: expected a PerReplica (one value per replica) from " + to_string() +
                               ", which has " + std::to_string(num_local_replicas()) +
                               " local replicas, got a plain tensor " + value.to_string() +
                               " (a plain value is a worker's own only with one local replica)");
  }
  return gather(PerReplica<Tensor>(std::vector<Tensor>{value}), axis);
}

}  // namespace distribute
