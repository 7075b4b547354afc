// Strategy: the user-facing facade of tf.distribute's replica model.
//
// A strategy owns a fixed set of replicas (one per device). run(fn, args...)
// calls fn once per replica, concurrently, each call inside that replica's
// ReplicaContext, and returns a PerReplica of the results. reduce() combines
// per-replica values in cross-replica context.
//
// Thread safety: a Strategy may be used from any thread. Calls to run() from
// several threads are serialized (one run executes at a time). Inside a
// replica function only the replica-context API may be used; cross-replica
// calls (run, reduce, scope) raise FailedPreconditionError there.
//
// Memory ordering: everything a thread did before calling run() is visible to
// every replica function, and everything every replica function did is
// visible to the caller after run() returns.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "distribute/device.h"
#include "distribute/distributed_dataset.h"
#include "distribute/distributed_values.h"
#include "distribute/element.h"
#include "distribute/errors.h"
#include "distribute/internal/function_ref.h"
#include "distribute/internal/owner_process.h"
#include "distribute/nest.h"
#include "distribute/options.h"
#include "distribute/replica_context.h"
#include "distribute/tensor.h"
#include "distribute/types.h"
#include "distribute/variable.h"

namespace distribute {

class Strategy;
struct MultiWorkerOptions;

namespace internal {
class ReplicaPool;
class CollectiveGroup;
class CrossWorker;
}  // namespace internal

// RAII guard returned by Strategy::scope(): while it lives, its strategy is
// current on this thread, in cross-replica context. Scopes nest as in TF:
//   - entering the scope of the strategy that is already current (in
//     cross-replica context) is allowed;
//   - entering another strategy's scope while one is current raises
//     FailedPreconditionError ("Mixing different tf.distribute.Strategy
//     objects");
//   - entering a strategy's scope from inside its replica function raises
//     FailedPreconditionError (use merge_call instead);
//   - entering the default strategy's scope inside any other strategy's scope
//     raises FailedPreconditionError (scopes must not nest).
// Not copyable or movable: scopes end in the reverse order they began.
class [[nodiscard]] StrategyScope {
 public:
  ~StrategyScope();
  StrategyScope(const StrategyScope&) = delete;
  StrategyScope& operator=(const StrategyScope&) = delete;

 private:
  friend class Strategy;
  // `method` names the call that enters the scope in the errors above
  // ("run" for Strategy::run, which enters it too).
  explicit StrategyScope(Strategy& strategy, std::string_view method = "scope");
  Strategy* strategy_;
};

// What experimental_distribute_values_from_function tells its function
// about the replica it makes a value for (TF's
// tf.distribute.experimental.ValueContext).
struct ValueContext {
  int replica_id_in_sync_group = 0;
  int num_replicas_in_sync = 1;
};

namespace internal {
class StrategyAccess;
}  // namespace internal

class StrategyExtended;

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  // Number of replicas that run in sync (one per device; with several
  // workers, every worker's devices).
  int num_replicas_in_sync() const noexcept { return num_local_replicas() * num_workers_; }
  // Replicas of this process (= num_replicas_in_sync() but with several
  // workers): the values of a PerReplica, the results of run().
  int num_local_replicas() const noexcept { return static_cast<int>(devices_.size()); }
  // Worker processes (1 but for MultiWorkerMirroredStrategy), this process's
  // index among them, and whether it is the chief (TF's is_chief: the one
  // that writes checkpoints and summaries).
  int num_workers() const noexcept { return num_workers_; }
  int worker_index() const noexcept { return worker_index_; }
  bool is_chief() const noexcept { return is_chief_; }
  // This process's devices, in local replica order.
  const std::vector<DeviceSpec>& devices() const noexcept { return devices_; }
  // True for the strategy returned by get_strategy() outside any scope.
  bool is_default() const noexcept { return kind_ == Kind::kDefault; }
  // "MirroredStrategy(CPU:0, CPU:1)", "OneDeviceStrategy(CPU:0)", "DefaultStrategy".
  std::string to_string() const;
  // This strategy's number in the process (1, 2, ...; never reused): the
  // origin() of the values it produces.
  std::uint64_t id() const noexcept { return id_; }

  // Makes this strategy current on this thread until the guard is destroyed.
  StrategyScope scope() { return StrategyScope(*this); }

  // TF's strategy.extended: reduce_to, batch_reduce_to, update and the
  // rest (distribute/strategy_extended.h).
  StrategyExtended extended();

  // Calls fn once per replica, concurrently, each inside its replica context
  // (get_replica_context() returns it). For replica r, a PerReplica or
  // Mirrored argument is replaced by its value r; any other argument is passed
  // unchanged (the same object, by reference) to every replica. fn is called
  // from several threads at once and must be safe to call so.
  //
  // Returns PerReplica<R> with R = std::decay_t of fn's result, or void. It is
  // a PerReplica even with one replica (where TF would unwrap the value), so
  // the same program compiles for every strategy; take .primary() or
  // experimental_local_results() to get at the values. A std::tuple, pair or
  // std::map<std::string, V> result is regrouped as TF's nest does
  // (distribute/nest.h): `auto [loss, count] = strategy.run(step);` gives two
  // PerReplica; every replica's map must have the same keys
  // (InvalidArgumentError naming the first difference). A std::vector
  // result stays a PerReplica of vectors (nest::regroup_list regroups it).
  //
  // If fn throws on any replica, run() waits for the other replicas to return
  // and rethrows the first failure, its type preserved; a distribute::Error
  // also gets the replica id attached (Error::replica_id(), "replica N: ..."
  // in what()). The strategy stays usable. Replica 0 runs on the calling
  // thread, the others on threads the strategy keeps for its lifetime.
  //
  // Raises FailedPreconditionError when called from inside a replica function
  // of this or another (non-default) strategy or inside another strategy's
  // scope (as in TF, any strategy's run may be called inside the default
  // strategy's replica function), and InvalidArgumentError when a
  // PerReplica/Mirrored argument does not have one value per replica or was
  // produced by another strategy (the result of its run, a step of its
  // distributed dataset; values built by hand from a vector are accepted by
  // any strategy of their size).
  template <class F, class... Args>
  auto run(F&& fn, const Args&... args);

  // TF's experimental_distribute_values_from_function: calls fn(ctx) once per
  // local replica, on the calling thread, in replica order, with ctx that
  // replica's ValueContext (its global id in [0, num_replicas_in_sync()):
  // worker-major across workers), and returns the results as a PerReplica of
  // this strategy, which run() hands to each replica (say, each replica's
  // slice of a batch, or a per-replica seed). Returns a PerReplica also for
  // one replica (as TF's MirroredStrategy does; its OneDeviceStrategy and
  // default strategy return the bare value). What fn throws propagates.
  template <class F>
  auto experimental_distribute_values_from_function(F&& fn);

  // Combines per-replica values across replicas (cross-replica or default
  // context only). Without an axis: element-wise over replicas; every replica's
  // value must have the same shape and dtype. With an axis: each replica's
  // value is first summed along the axis, then SUM adds over replicas and MEAN
  // divides by the total number of elements along the axis over all replicas
  // (values [5., 6.] and [7.] give 6.0), so replicas with empty or partial
  // batches weigh correctly. MEAN of integers returns float64 (true division).
  // Raises InvalidArgumentError naming both replicas when shapes or dtypes do
  // not match, and FailedPreconditionError in replica context.
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& value, std::optional<int> axis = std::nullopt);
  // A Mirrored value: MEAN returns the (identical) value; SUM sums its
  // copies, num_replicas_in_sync() times the value, as TF does. With an axis
  // it is reduced like a PerReplica.
  Tensor reduce(ReduceOp op, const Mirrored<Tensor>& value, std::optional<int> axis = std::nullopt);
  // A plain value, as TF treats one: the default and one-device strategies
  // return it (reduced along the axis, if given). Without an axis,
  // MirroredStrategy returns it for MEAN and raises InvalidArgumentError for
  // SUM with more than one replica; with an axis every local replica counts
  // it (SUM: the number of local replicas times its sum, over the workers).
  // With several workers the value is this worker's, reduced across the
  // workers, so every worker must make the call, in the same order as its
  // other collectives: SUM needs one local replica (what run returns then
  // is plain), MEAN counts it once per local replica (the mean over the
  // workers).
  Tensor reduce(ReduceOp op, const Tensor& value, std::optional<int> axis = std::nullopt);
  // A step of a distributed dataset with single-tensor elements
  // (InvalidArgumentError for tuples: reduce a component of regroup(value)).
  Tensor reduce(ReduceOp op, const PerReplica<Element>& value, std::optional<int> axis = std::nullopt);
  // Per-replica numbers (e.g. a loss returned by run) are reduced as scalars.
  template <TensorElement T>
  Tensor reduce(ReduceOp op, const PerReplica<T>& value) {
    std::vector<Tensor> scalars;
    scalars.reserve(value.values().size());
    for (const T& v : value) scalars.emplace_back(v);
    return reduce(op, PerReplica<Tensor>(std::move(scalars)));
  }

  // Structures (distribute/nest.h) of the values above: a tuple, pair,
  // vector or string-keyed map of PerReplica, Mirrored or plain values,
  // nested, gives the same structure of reduced tensors (a pair gives a
  // std::tuple; each leaf reduced as above, in order: one collective per
  // leaf with several workers, whose structures must match); a
  // PerReplica of such a structure is regrouped first
  // (InvalidArgumentError unless every replica's has the same lengths and
  // keys).
  template <class S>
    requires nest::is_structure_v<S>
  auto reduce(ReduceOp op, const S& value, std::optional<int> axis = std::nullopt);
  template <class S>
    requires nest::is_structure_v<S>
  auto reduce(ReduceOp op, const PerReplica<S>& value, std::optional<int> axis = std::nullopt);

  // Splits a dataset batched with the global batch size across the replicas
  // (see distributed_dataset.h for exactly how). The default and one-device
  // strategies, and one replica, pass every element through unsplit.
  DistributedDataset experimental_distribute_dataset(const Dataset& dataset, const InputOptions& options = {});
  // Calls dataset_fn once with this process's InputContext; replica r of each
  // step takes the next element of its dataset in turn.
  DistributedDataset distribute_datasets_from_function(const std::function<Dataset(const InputContext&)>& dataset_fn,
                                                       const InputOptions& options = {});

  // Concatenates the replicas' values along `axis`, in replica order, in
  // cross-replica context (each value: rank >= 1, equal dimensions except
  // along the axis; sizes along it may differ). A plain value is returned
  // unchanged, as TF does, except with several workers: then it is this
  // worker's, and the workers' are concatenated, a collective every worker
  // makes (InvalidArgumentError with more than one local replica). FailedPreconditionError in replica context
  // (use get_replica_context()->all_gather there).
  Tensor gather(const PerReplica<Tensor>& value, int axis);
  Tensor gather(const Mirrored<Tensor>& value, int axis);
  Tensor gather(const Tensor& value, int axis);

  // Zero-filled memory of `bytes` bytes (aligned for any dtype), one block
  // per local replica, for tensors reduced in place: the replica writes its
  // block, wraps it for the call (O(1)) and donates the wrap. The wrap's
  // owner must be its own, held by nothing else (a donated tensor must be
  // the only holder of its owner's reference count: `block` itself, or a
  // named copy of the owner, would count too, and the call would not be in
  // place):
  //   Tensor g = Tensor::wrap(DType::kFloat32, shape, block.get(),
  //                           std::make_shared<std::shared_ptr<std::byte>>(block), /*writable=*/true);
  //   g = ctx.all_reduce(ReduceOp::SUM, std::move(g));  // the sums, in the block
  // For MultiWorkerMirroredStrategy with one replica per worker on one host
  // (its shared-memory transport), each block is this worker's region of a
  // shared-memory segment every worker maps: such an in-place all_reduce
  // (above 64 KiB, every worker passing its block at the same offset)
  // copies nothing between the processes; each worker sums its share of the
  // elements straight from every worker's block (the same bits as the
  // copying path). Across hosts (the hierarchical mode), a worker on a host
  // with several workers gets its region of its host's segment: the host's
  // sum is then copy-free, and the hosts' sums still travel over MPI. A
  // worker alone on its host, and every other strategy, gets ordinary
  // memory, so that the same program runs on every strategy. With several
  // workers this is a collective: every worker calls it in the same order
  // as its other collectives, with the same size (InvalidArgumentError
  // naming worker 0's size and the first that differs, on every worker).
  // Cross-replica context only. The block is the replica's to read and
  // write between its calls (a donated call holds the only reference to its
  // wrap while it runs; drop the wrap before writing). After a call that
  // raised, its contents are unspecified, and another worker may still be
  // writing its share into it: the strategy is broken then, leave the
  // block. Shared memory stays shared in a forked child: a child's writes
  // reach every worker (an ordinary block would be copied on write).
  // Once a block exists, every all_reduce above 64 KiB of the worker costs
  // one barrier more (where the workers learn whether all are in place),
  // for the strategy's life.
  std::vector<std::shared_ptr<std::byte>> experimental_allocate_shared(std::size_t bytes);

  // The options collectives use unless a call overrides them (the default
  // timeout is 60 s).
  const CommunicationOptions& communication_options() const noexcept { return communication_options_; }

  // The values of this process's replicas in replica order; a plain value
  // gives a list of one.
  // A variable's components (one, for an ordinary variable).
  std::vector<Tensor> experimental_local_results(const Variable& variable) const { return variable.values(); }
  template <class T>
  std::vector<T> experimental_local_results(const DistributedValues<T>& value) const {
    return value.values();
  }
  template <class T>
    requires(!is_distributed_values_v<T> && !nest::has_distributed_v<T>)
  std::vector<T> experimental_local_results(const T& value) const {
    return {value};
  }
  // A structure holding PerReplica or Mirrored values: each local replica's
  // view of it (its value of every such leaf, plain leaves as they are).
  template <class S>
    requires(nest::is_structure_v<S> && nest::has_distributed_v<S>)
  std::vector<nest::unwrapped_t<S>> experimental_local_results(const S& value) const {
    std::vector<nest::unwrapped_t<S>> out;
    const auto replicas = static_cast<std::size_t>(num_local_replicas());
    for (std::size_t r = 0; r < replicas; ++r) out.push_back(nest::select(value, r));
    return out;
  }

 protected:
  enum class Kind { kDefault, kOneDevice, kMirrored, kMultiWorker };
  // TF's class name of a kind ("MirroredStrategy"), for messages.
  static std::string_view kind_name(Kind kind);
  Strategy(Kind kind, std::vector<DeviceSpec> devices, CommunicationOptions options = {},
           std::shared_ptr<internal::CrossWorker> cross_worker = nullptr,
           ReplicaExecution execution = ReplicaExecution::THREADS);

  // Cross-replica helpers that reach the other workers (identity with one
  // worker): the element-wise sum of every worker's `value`, and the chief's
  // `value` on every worker.
  Tensor sum_over_workers(const Tensor& value);
  Tensor broadcast_from_chief(const Tensor& value);
  // Every worker's `value` joined along `axis` (sizes may differ), in
  // worker order; `what` names the call in errors.
  Tensor gather_over_workers(const Tensor& value, int axis, const char* what = "gather");
  // The chief's `text` on every worker (the others' `text` is not sent).
  std::string text_from_chief(const std::string& text, const char* what);
  // MultiWorkerMirroredStrategy's chief (worker 0 until this is called): TF's
  // rules over the cluster this process was given (TF_CONFIG or
  // options.cluster_resolver; without one, worker 0), reconciled with the
  // transport's rank and size (InvalidArgumentError when they disagree, or
  // when the launcher's variables disagree with ranks that are the
  // launcher's). Defined in strategy/multi_worker.cc.
  void decide_chief(const MultiWorkerOptions& options);
  // MultiWorkerMirroredStrategy's end: tells the other workers this one
  // left and closes the channel (later uses raise FailedPreconditionError).
  void leave_workers() noexcept;
  // Raises the same InvalidArgumentError on every worker unless every
  // worker passed the same `description` (of `what`).
  void check_same_on_workers(const std::string& what, const std::string& description);

 private:
  friend class StrategyScope;
  friend class ReplicaContext;
  // Variables and checkpoints reach the cross-worker helpers through it
  // (src/strategy/strategy_access.h).
  friend class internal::StrategyAccess;
  friend ReplicaContext* get_replica_context();

  ReplicaContext& replica_context(int replica) { return *replica_contexts_[static_cast<std::size_t>(replica)]; }

  // Runs body(r) for every replica r concurrently, each inside its replica
  // context; rethrows the first failure after all replicas returned.
  void run_replicas(internal::FunctionRef<void(int)> body);
  DistributedDataset distribute_across_workers(const Dataset& dataset, const InputOptions& options);
  // Raises unless this thread may call a cross-replica method of this strategy.
  void require_cross_replica_or_default_context(std::string_view method) const;
  void check_replica_count(std::size_t values, std::size_t argument_index) const;

  template <class T>
  void check_run_argument(const T& arg, std::size_t index) const {
    if constexpr (is_distributed_values_v<T>) {
      check_replica_count(arg.values().size(), index);
      check_origin(arg.origin(), "Strategy::run: argument " + std::to_string(index));
    }
  }
  // InvalidArgumentError naming both strategies unless `origin` is 0 (built
  // by hand) or this strategy's id.
  void check_origin(std::uint64_t origin, const std::string& what) const;

  Kind kind_;
  std::uint64_t id_;
  std::vector<DeviceSpec> devices_;
  std::vector<std::unique_ptr<ReplicaContext>> replica_contexts_;
  CommunicationOptions communication_options_;
  std::unique_ptr<internal::CollectiveGroup> collectives_;
  std::unique_ptr<internal::ReplicaPool> pool_;
  // Set for MultiWorkerMirroredStrategy: the exchange with the other workers.
  std::shared_ptr<internal::CrossWorker> cross_worker_;
  int num_workers_ = 1;
  int variables_created_ = 0;  // multi-worker: numbers the variable checks
  int worker_index_ = 0;
  bool is_chief_ = true;
  // A child forked without exec runs none of this strategy's replicas and
  // destroys none of its state (distribute/internal/owner_process.h).
  internal::OwnerProcess owner_process_;
};

namespace internal {
// The value replica r sees for a run() argument.
template <class T>
decltype(auto) select_replica([[maybe_unused]] int r, const T& arg) {
  if constexpr (is_distributed_values_v<T>) {
    return arg.values()[static_cast<std::size_t>(r)];
  } else {
    return (arg);
  }
}
}  // namespace internal

template <class F, class... Args>
auto Strategy::run(F&& fn, const Args&... args) {
  // run() enters the strategy's scope, as TF's does; this raises the context
  // errors (inside a replica function, inside another strategy's scope).
  StrategyScope in_scope(*this, "run");
  std::size_t index = 0;
  (check_run_argument(args, index++), ...);
  using R = std::invoke_result_t<F&, decltype(internal::select_replica(0, args))...>;
  if constexpr (std::is_void_v<R>) {
    run_replicas([&]([[maybe_unused]] int r) { std::invoke(fn, internal::select_replica(r, args)...); });
  } else {
    using Value = std::decay_t<R>;
    std::vector<std::optional<Value>> results(devices_.size());
    run_replicas([&]([[maybe_unused]] int r) {
      results[static_cast<std::size_t>(r)].emplace(std::invoke(fn, internal::select_replica(r, args)...));
    });
    std::vector<Value> values;
    values.reserve(results.size());
    for (auto& result : results) values.push_back(std::move(*result));
    if constexpr (nest::is_regrouped_v<Value>) {
      return nest::regroup(std::move(values), id_, "Strategy::run");
    } else {
      return PerReplica<Value>(std::move(values), internal::ProducedBy{id_});
    }
  }
}

template <class F>
auto Strategy::experimental_distribute_values_from_function(F&& fn) {
  using Value = std::decay_t<std::invoke_result_t<F&, const ValueContext&>>;
  std::vector<Value> values;
  values.reserve(devices_.size());
  for (int r = 0; r < num_local_replicas(); ++r) {
    values.push_back(std::invoke(fn, ValueContext{worker_index_ * num_local_replicas() + r, num_replicas_in_sync()}));
  }
  return PerReplica<Value>(std::move(values), internal::ProducedBy{id_});
}

template <class S>
  requires nest::is_structure_v<S>
auto Strategy::reduce(ReduceOp op, const S& value, std::optional<int> axis) {
  if constexpr (nest::has_dynamic_shape_v<S>) {
    // One collective per leaf across workers: every worker's structure
    // must have the same lengths and keys.
    if (num_workers() > 1) {
      std::string shape;
      nest::describe_shape(value, shape);
      check_same_on_workers("Strategy::reduce of a structure", shape);
    }
  }
  if constexpr (nest::is_tuple_like<S>::value) {
    return std::apply(
        [&](const auto&... e) {
          // (Braces: left to right, so the collectives keep their order.)
          return std::tuple<decltype(reduce(op, e, axis))...>{reduce(op, e, axis)...};
        },
        value);
  } else if constexpr (nest::is_list<S>::value) {
    using R = decltype(reduce(op, std::declval<const typename S::value_type&>(), axis));
    std::vector<R> out;
    out.reserve(value.size());
    for (const auto& e : value) out.push_back(reduce(op, e, axis));
    return out;
  } else {
    using R = decltype(reduce(op, std::declval<const typename S::mapped_type&>(), axis));
    std::map<std::string, R> out;
    for (const auto& [k, e] : value) out.emplace(k, reduce(op, e, axis));
    return out;
  }
}

template <class S>
  requires nest::is_structure_v<S>
auto Strategy::reduce(ReduceOp op, const PerReplica<S>& value, std::optional<int> axis) {
  if constexpr (nest::is_list<S>::value) {
    return reduce(op, nest::regroup_list(value, "Strategy::reduce"), axis);
  } else {
    return reduce(op, nest::regroup(value.values(), value.origin(), "Strategy::reduce"), axis);
  }
}

}  // namespace distribute
