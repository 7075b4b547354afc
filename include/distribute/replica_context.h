// Replica context and the per-thread context queries of tf.distribute.
//
// Every thread has a stack of modes. Its top decides what the queries below
// return:
//   - nothing entered (the default state): the default strategy is current,
//     get_replica_context() returns the default replica context (replica 0 of
//     1) and in_cross_replica_context() is false;
//   - inside strategy.scope(): cross-replica context; get_replica_context()
//     is nullptr and in_cross_replica_context() is true;
//   - inside a function run by strategy.run(): replica context;
//     get_replica_context() returns that replica's context.
// The stack is thread_local: a thread you start yourself begins in the
// default state.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "distribute/distributed_values.h"
#include "distribute/internal/function_ref.h"
#include "distribute/nest.h"
#include "distribute/options.h"
#include "distribute/tensor.h"
#include "distribute/types.h"

namespace distribute {

class Strategy;

namespace internal {
// What merge_call's function receives for an argument of type A.
template <class A>
using MergeArgument = std::conditional_t<nest::is_regrouped_v<A>, nest::regrouped_t<A>, PerReplica<A>>;

// While it lives, this thread is in cross-replica context of `strategy`
// (merge_call's function runs inside one).
class CrossReplicaScope {
 public:
  explicit CrossReplicaScope(Strategy& strategy);
  ~CrossReplicaScope();
  CrossReplicaScope(const CrossReplicaScope&) = delete;
  CrossReplicaScope& operator=(const CrossReplicaScope&) = delete;
};
}  // namespace internal

// What a replica knows about itself while Strategy::run executes it. Owned by
// its strategy; valid while the strategy lives. Safe to call from the
// replica's own thread.
class ReplicaContext {
 public:
  ReplicaContext(const ReplicaContext&) = delete;
  ReplicaContext& operator=(const ReplicaContext&) = delete;

  // This replica's index among all replicas in sync, in [0, num_replicas_in_sync()).
  int replica_id_in_sync_group() const noexcept;
  int num_replicas_in_sync() const noexcept;
  Strategy& strategy() const noexcept { return *strategy_; }

  // --- Collectives -----------------------------------------------------
  // Every replica must make the same collective calls in the same order;
  // each call waits for all replicas. Contract shared by all of them:
  //   - a replica that fails (throws) releases the others at once: their
  //     pending and later collectives raise CancelledError naming it;
  //   - a call that waits longer than its timeout (options.timeout_seconds,
  //     else the strategy's, 60 s by default) raises DeadlineExceededError
  //     on every waiting replica, naming the collective, its number within
  //     the run, and the replicas that arrived and that are missing;
  //   - replicas making different calls (other op, dtype, shape, number of
  //     tensors, or one returning from its function) raise the same
  //     InvalidArgumentError on every replica, naming the difference;
  //   - memory: everything a replica did before a collective is visible to
  //     every replica after it.
  // Must be called by the replica this context belongs to, inside run
  // (FailedPreconditionError otherwise).

  // Element-wise SUM or MEAN (sum / number of replicas; integer MEAN
  // truncates) over the replicas; the value must have the same shape and
  // dtype on every replica. From 64 KiB up every replica's result is the same
  // buffer (no copy per replica, the replicas each reduce a share of it);
  // smaller values are reduced by every replica into its own buffer, which
  // saves a hand-off between cores. SUM is bitwise identical on every replica
  // and every run: each element is added in replica order.
  Tensor all_reduce(ReduceOp op, const Tensor& value, const CommunicationOptions& options = {}) const;
  // Several tensors in one fused operation (packed per
  // options.bytes_per_pack); results in the same order.
  std::vector<Tensor> all_reduce(ReduceOp op, const std::vector<Tensor>& values,
                                 const CommunicationOptions& options = {}) const;

  // Donation (MPI_IN_PLACE, NCCL's sendbuff == recvbuff): the same, with the
  // value handed over. Same result, same bits, same errors; the difference
  // is where the result lives:
  //   - a tensor is DONATED when this call holds the only reference to its
  //     buffer (no other Tensor or view of it exists, on any thread):
  //     x = ctx.all_reduce(SUM, std::move(x)) or a fresh temporary
  //     (ctx.all_reduce(SUM, a + b)). A tensor someone else can still see
  //     (a copy kept anywhere, an earlier shared result) is not donated,
  //     and never written;
  //   - a tensor of at least 64 KiB (more precisely: one that travels in a
  //     pack of at least 64 KiB) that EVERY replica donates is reduced in
  //     place: the replicas' threads write the result into every replica's
  //     buffer, and each replica's result is its own donated tensor (same
  //     buffer; no output is allocated). Otherwise the result is as for a
  //     const& argument (one shared buffer from 64 KiB up), and a loop keeps
  //     the path it started on: a shared result is never sole-owned;
  //   - `value` is consumed: it is left moved-from (assign before reuse)
  //     when the call returns. When the call raises after the reduction may
  //     have started (CancelledError or DeadlineExceededError while waiting
  //     for the others to pass their checks or to finish), a tensor that was
  //     being reduced in place is left moved-from, as another replica may
  //     still be writing into it; the others (of a list: the rest of the
  //     vector) come back unchanged. A call that raises earlier (bad
  //     options, a mismatch between replicas, cancelled or timed out while
  //     the replicas arrive) leaves everything unchanged: nothing was written;
  //   - each replica must hand over an object of its own (a local variable
  //     of its replica function): std::move of one object shared by the
  //     replicas' threads is a data race, as any unsynchronized write is.
  // Lvalues (even non-const ones) take the const& overloads above and are
  // never modified; std::move of a const tensor does too.
  // With other workers (MultiWorkerMirroredStrategy) only when the worker
  // has a single local replica, for a tensor that travels in a pack of its
  // own (a single tensor, or bytes_per_pack keeping it apart), whatever its
  // size: the workers' exchange then sums into the donated buffer (without
  // any copy between the processes when the tensor came from
  // Strategy::experimental_allocate_shared, is above 64 KiB and every
  // worker donates); otherwise the call behaves as the const& one (the
  // value is still consumed). There a mismatch between the workers (found
  // in the exchange, after an earlier pack may have been summed in place)
  // leaves the in-place tensors moved-from as well.
  Tensor all_reduce(ReduceOp op, Tensor&& value, const CommunicationOptions& options = {}) const;
  // Several tensors, each donated or not on its own; `values` is consumed
  // as a whole (left empty on return).
  std::vector<Tensor> all_reduce(ReduceOp op, std::vector<Tensor>&& values,
                                 const CommunicationOptions& options = {}) const;
  // Concatenation of every replica's value along `axis` (negative counts
  // from the end), in replica order. Values need rank >= 1, the same dtype
  // and the same dimensions except along the axis, where sizes may differ.
  Tensor all_gather(const Tensor& value, int axis, const CommunicationOptions& options = {}) const;
  std::vector<Tensor> all_gather(const std::vector<Tensor>& values, int axis,
                                 const CommunicationOptions& options = {}) const;

  // A structure (distribute/nest.h) of tensors: a tuple, pair, std::map or
  // a nesting of them with vectors, fused into one all_reduce of its leaves
  // and returned in the same structure. Every replica must pass the same
  // structure: lengths and keys are checked (one small all_gather when the
  // structure holds a vector or map), InvalidArgumentError on every replica
  // otherwise.
  template <class S>
    requires(nest::is_structure_v<S> && !std::is_same_v<S, std::vector<Tensor>>)
  S all_reduce(ReduceOp op, const S& value, const CommunicationOptions& options = {}) const {
    if constexpr (nest::has_dynamic_shape_v<S>) {
      std::string shape;
      nest::describe_shape(value, shape);
      check_same_structure(shape, "all_reduce", options);
    }
    std::vector<Tensor> leaves;
    nest::flatten_into(value, leaves);
    std::vector<Tensor> reduced = all_reduce(op, leaves, options);
    std::size_t next = 0;
    return nest::pack_like(value, reduced, next);
  }

  // Runs merge_fn once, on replica 0's thread in cross-replica context
  // (get_replica_context() is nullptr inside), as
  //   merge_fn(strategy, PerReplica<A1>{all replicas' a1}, ...)
  // (a tuple, pair or map argument arrives regrouped: the same structure
  // with a PerReplica at every leaf, as TF's nest; distribute/nest.h)
  // once every replica has called merge_call. Every replica gets the result:
  // a PerReplica or Mirrored result gives each replica its own value, any
  // other result is copied to every replica. An exception from merge_fn is
  // rethrown on every replica.
  template <class F, class... Args>
  auto merge_call(F&& merge_fn, const Args&... args) const;

 private:
  friend class Strategy;
  ReplicaContext(Strategy& strategy, int replica_id) : strategy_(&strategy), replica_id_(replica_id) {}

  // The replica's results, in a buffer of the collective engine that the
  // caller moves them out of; nullptr with one replica (results = inputs).
  // `handed`: `values` made mutable when the caller handed them over (rvalue
  // overloads), else empty.
  std::vector<Tensor>* all_reduce_into(ReduceOp op, std::span<const Tensor> values, std::span<Tensor> handed,
                                       const CommunicationOptions& options) const;
  // InvalidArgumentError on every replica unless every replica passed the
  // same `shape` (nest::describe_shape).
  void check_same_structure(const std::string& shape, const char* what, const CommunicationOptions& options) const;
  std::shared_ptr<void> merge_call_erased(std::shared_ptr<const void> args, const char* type_name,
                                          internal::FunctionRef<std::shared_ptr<void>(std::span<const void* const>)> leader)
      const;

  Strategy* strategy_;
  int replica_id_;
};

// The current replica context: the running replica's inside Strategy::run,
// the default replica context in the default state, nullptr in cross-replica
// context (inside a scope), as TF's returns None there.
ReplicaContext* get_replica_context();

// The same as a reference, the form to reach for first:
// current_replica_context().all_reduce(...) inside strategy.run. Raises
// FailedPreconditionError ("not in a replica context: call this inside
// strategy.run") in cross-replica context, where get_replica_context()
// returns nullptr.
ReplicaContext& current_replica_context();

// True inside a strategy's scope() (and not inside a replica function).
bool in_cross_replica_context();

// The strategy in cross-replica context, else nullptr. Exactly one of
// get_replica_context() and get_cross_replica_context() is nullptr.
Strategy* get_cross_replica_context();

// The current strategy: the one whose scope or replica function this thread
// is in, else the default strategy.
Strategy& get_strategy();

// True when the current strategy is not the default strategy.
bool has_strategy();

}  // namespace distribute

namespace distribute {

template <class F, class... Args>
auto ReplicaContext::merge_call(F&& merge_fn, const Args&... args) const {
  // Each replica's arguments are copied, so they stay valid for the leader
  // whatever happens to the calling frame.
  using Tuple = std::tuple<Args...>;
  using R = std::invoke_result_t<F&, Strategy&, const internal::MergeArgument<Args>&...>;
  using Stored = std::conditional_t<std::is_void_v<R>, int, std::decay_t<R>>;
  auto mine = std::make_shared<const Tuple>(args...);
  auto leader = [&](std::span<const void* const> all) -> std::shared_ptr<void> {
    auto per_replica = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
      using A = std::tuple_element_t<I, std::tuple<Args...>>;
      std::vector<A> values;
      values.reserve(all.size());
      for (const void* p : all) values.push_back(std::get<I>(*static_cast<const Tuple*>(p)));
      if constexpr (nest::is_regrouped_v<A>) {
        return nest::regroup(std::move(values), 0, "merge_call");
      } else {
        return PerReplica<A>(std::move(values));
      }
    };
    internal::CrossReplicaScope cross_replica(*strategy_);
    return [&]<std::size_t... I>(std::index_sequence<I...>) -> std::shared_ptr<void> {
      if constexpr (std::is_void_v<R>) {
        merge_fn(*strategy_, per_replica(std::integral_constant<std::size_t, I>{})...);
        return std::make_shared<Stored>(0);
      } else {
        return std::make_shared<Stored>(merge_fn(*strategy_, per_replica(std::integral_constant<std::size_t, I>{})...));
      }
    }(std::index_sequence_for<Args...>{});
  };
  std::shared_ptr<void> result = merge_call_erased(std::move(mine), typeid(Tuple).name(), leader);
  if constexpr (std::is_void_v<R>) {
    return;
  } else if constexpr (is_distributed_values_v<Stored>) {
    using V = typename Stored::value_type;
    return V(static_cast<const Stored*>(result.get())->values()[static_cast<std::size_t>(replica_id_)]);
  } else {
    return Stored(*static_cast<const Stored*>(result.get()));
  }
}

}  // namespace distribute
