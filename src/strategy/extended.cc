// StrategyExtended (include/distribute/strategy_extended.h).
#include "distribute/errors.h"
#include "distribute/replica_context.h"
#include "distribute/strategy_extended.h"
#include "strategy/context.h"

namespace distribute {

StrategyExtended Strategy::extended() { return StrategyExtended(*this); }

namespace {

void require_cross_replica(const Strategy& strategy, const char* method) {
  const internal::ThreadMode* mode = internal::current_mode();
  if (mode != nullptr && mode->replica != nullptr) {
    throw FailedPreconditionError(std::string("StrategyExtended::") + method +
                                  ": called inside a replica function of " + mode->replica->strategy().to_string() +
                                  "; call it in cross-replica context (from merge_call's function, or outside "
                                  "strategy.run) of " +
                                  strategy.to_string());
  }
}

}  // namespace

bool StrategyExtended::variable_created_in_scope(const Variable& variable) const {
  Strategy* owner = nullptr;
  try {
    owner = variable.distributed_strategy();
  } catch (const FailedPreconditionError&) {
    return false;  // its strategy was destroyed: not this living one's (as TF answers)
  }
  if (owner == nullptr) return strategy_->is_default();
  return owner == strategy_;
}

std::vector<std::string> StrategyExtended::worker_devices() const {
  std::vector<std::string> out;
  for (const DeviceSpec& d : strategy_->devices()) {
    out.push_back(strategy_->num_workers() == 1
                      ? d.full_name()
                      : "/job:worker/replica:0/task:" + std::to_string(strategy_->worker_index()) +
                            "/device:" + d.short_name());
  }
  return out;
}

Mirrored<Tensor> StrategyExtended::mirrored_on(const Tensor& value, const Variable& destination) const {
  Strategy* owner = destination.distributed_strategy();
  if (owner != nullptr && owner != strategy_) {
    throw InvalidArgumentError("StrategyExtended::reduce_to: the destination variable '" + destination.name() +
                               "' belongs to " + owner->to_string() + ", not to " + strategy_->to_string());
  }
  const auto copies = static_cast<std::size_t>(destination.num_components());
  return Mirrored<Tensor>(std::vector<Tensor>(copies, value), internal::ProducedBy{strategy_->id()});
}

Mirrored<Tensor> StrategyExtended::reduce_to(ReduceOp op, const PerReplica<Tensor>& value,
                                             const Variable& destination) const {
  require_cross_replica(*strategy_, "reduce_to");
  return mirrored_on(strategy_->reduce(op, value), destination);
}

Mirrored<Tensor> StrategyExtended::reduce_to(ReduceOp op, const Mirrored<Tensor>& value,
                                             const Variable& destination) const {
  require_cross_replica(*strategy_, "reduce_to");
  return mirrored_on(strategy_->reduce(op, value), destination);
}

Mirrored<Tensor> StrategyExtended::reduce_to(ReduceOp op, const Tensor& value, const Variable& destination) const {
  require_cross_replica(*strategy_, "reduce_to");
  return mirrored_on(strategy_->reduce(op, value), destination);
}

std::vector<Mirrored<Tensor>> StrategyExtended::batch_reduce_to(
    ReduceOp op, const std::vector<std::pair<PerReplica<Tensor>, Variable>>& value_destination_pairs) const {
  require_cross_replica(*strategy_, "batch_reduce_to");
  std::vector<Mirrored<Tensor>> out;
  out.reserve(value_destination_pairs.size());
  for (const auto& [value, destination] : value_destination_pairs) out.push_back(reduce_to(op, value, destination));
  return out;
}

void StrategyExtended::for_each_component(const Variable& var, std::size_t argument_values,
                                          internal::FunctionRef<void(int)> body) const {
  require_cross_replica(*strategy_, "update");
  Strategy* owner = var.distributed_strategy();
  if (owner != nullptr && owner != strategy_) {
    throw InvalidArgumentError("StrategyExtended::update: variable '" + var.name() + "' belongs to " +
                               owner->to_string() + ", not to " + strategy_->to_string());
  }
  const int components = var.num_components();
  if (argument_values != 0 && argument_values != static_cast<std::size_t>(components)) {
    throw InvalidArgumentError("StrategyExtended::update: expected arguments with one value per component of '" +
                               var.name() + "' (" + std::to_string(components) + "), got " +
                               std::to_string(argument_values));
  }
  if (owner == nullptr) {
    body(0);
    return;
  }
  for (int r = 0; r < components; ++r) {
    internal::push_mode({strategy_, nullptr, r});
    struct Pop {
      ~Pop() { internal::pop_mode(); }
    } pop;
    body(r);
  }
}

}  // namespace distribute
