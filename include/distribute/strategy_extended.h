// StrategyExtended: TF's strategy.extended, the pieces custom optimizers
// and training loops built on merge_call use:
//
//   // inside strategy.run: hand the gradients to cross-replica context
//   current_replica_context().merge_call(
//       [&](Strategy& s, const PerReplica<Tensor>& g0, const PerReplica<Tensor>& g1) {
//         StrategyExtended ext = s.extended();
//         auto reduced = ext.batch_reduce_to(ReduceOp::SUM, {{g0, w0}, {g1, w1}});
//         ext.update(w0, [&](Variable& v, const Tensor& g) { v.assign_sub(g * 0.1); }, reduced[0]);
//         ext.update(w1, [&](Variable& v, const Tensor& g) { v.assign_sub(g * 0.1); }, reduced[1]);
//       },
//       grad0, grad1);
//
// A StrategyExtended is a light handle on its strategy (copy it freely);
// its methods have the strategy's context rules: reduce_to,
// batch_reduce_to and update run in cross-replica context (or the default
// state), as in TF.
#pragma once

#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/distributed_values.h"
#include "distribute/internal/function_ref.h"
#include "distribute/strategy.h"
#include "distribute/variable.h"

namespace distribute {

class StrategyExtended {
 public:
  explicit StrategyExtended(Strategy& strategy) : strategy_(&strategy) {}

  Strategy& strategy() const noexcept { return *strategy_; }

  // TF's reduce_to: `value` reduced over every replica (Strategy::reduce's
  // rules: SUM, MEAN; a plain value as TF treats one) and placed on
  // `destination`'s devices: one copy per local replica (a Mirrored of
  // this strategy), ready for update(). InvalidArgumentError for a
  // destination of another strategy.
  Mirrored<Tensor> reduce_to(ReduceOp op, const PerReplica<Tensor>& value, const Variable& destination) const;
  Mirrored<Tensor> reduce_to(ReduceOp op, const Mirrored<Tensor>& value, const Variable& destination) const;
  Mirrored<Tensor> reduce_to(ReduceOp op, const Tensor& value, const Variable& destination) const;
  // reduce_to of every (value, destination) pair, in order.
  std::vector<Mirrored<Tensor>> batch_reduce_to(
      ReduceOp op, const std::vector<std::pair<PerReplica<Tensor>, Variable>>& value_destination_pairs) const;

  // TF's update(var, fn, args): calls fn(var, args...) once per component
  // of `var` (per local replica; once for an ordinary variable), on this
  // thread, in TF's update context: inside fn, var's reads and updates
  // (assign, assign_add, assign_sub) see and change that component alone,
  // without aggregation or communication. A PerReplica or Mirrored
  // argument passes component r's value, any other argument is passed
  // as is. Returns a Mirrored of fn's results (void for a void fn).
  // FailedPreconditionError inside a replica function (call it from
  // merge_call's function), InvalidArgumentError for a variable of another
  // strategy or an argument without one value per component.
  template <class F, class... Args>
  auto update(const Variable& var, F&& fn, const Args&... args) const;

  // Whether `variable` was created in this strategy's scope (distributed
  // by it). An ordinary variable counts for the default strategy only.
  bool variable_created_in_scope(const Variable& variable) const;
  // This worker's devices, full names in replica order
  // ("/job:localhost/replica:0/task:0/device:CPU:0"; with several workers
  // "/job:worker/replica:0/task:<worker>/device:CPU:<i>").
  std::vector<std::string> worker_devices() const;
  // Whether this worker should write checkpoints and summaries (the chief).
  bool should_checkpoint() const noexcept { return strategy_->is_chief(); }
  bool should_save_summary() const noexcept { return strategy_->is_chief(); }

 private:
  // Checks `var` and the context; then body(r) for each component r, in
  // var's update context for r (a plain variable: body(0) as it is).
  void for_each_component(const Variable& var, std::size_t argument_values,
                          internal::FunctionRef<void(int)> body) const;
  Mirrored<Tensor> mirrored_on(const Tensor& value, const Variable& destination) const;

  template <class T>
  static std::size_t values_of(const T& arg) {
    if constexpr (is_distributed_values_v<T>) {
      return arg.values().size();
    } else {
      return 0;
    }
  }

  Strategy* strategy_;
};

template <class F, class... Args>
auto StrategyExtended::update(const Variable& var, F&& fn, const Args&... args) const {
  std::size_t counts = 0;
  ((counts = std::max(counts, values_of(args))), ...);
  Variable handle = var;
  using R = std::invoke_result_t<F&, Variable&, decltype(internal::select_replica(0, args))...>;
  if constexpr (std::is_void_v<R>) {
    for_each_component(var, counts, [&]([[maybe_unused]] int r) {
      std::invoke(fn, handle, internal::select_replica(r, args)...);
    });
  } else {
    std::vector<std::decay_t<R>> results;
    for_each_component(var, counts, [&]([[maybe_unused]] int r) {
      results.push_back(std::invoke(fn, handle, internal::select_replica(r, args)...));
    });
    return Mirrored<std::decay_t<R>>(std::move(results));
  }
}

}  // namespace distribute
