// Mirrored and sync-on-read variables (TF's values.py / values_util.py rules).
#include "distribute/variable.h"

#include <atomic>
#include <memory>
#include <ostream>

#include "core/describe.h"
#include "distribute/errors.h"
#include "distribute/strategy.h"
#include "strategy/context.h"
#include "strategy/strategy_access.h"

namespace distribute {

struct Variable::State {
  std::string name;
  VariableSynchronization synchronization;
  VariableAggregation aggregation;
  bool trainable;
  // Fixed at creation. Kept apart from the components so that a replica can
  // check an update's dtype and shape while another replica rewrites its own
  // component (of a SyncOnReadVariable) concurrently.
  DType dtype;
  Shape shape;
  // The strategy the components belong to; nullptr for an ordinary variable.
  // Used only while `strategy_alive` says it lives (live_strategy()).
  Strategy* strategy = nullptr;
  std::shared_ptr<const std::atomic<bool>> strategy_alive;
  std::uint64_t strategy_id = 0;
  // One per replica (one for an ordinary variable). Replica r's thread
  // touches only element r in replica context; cross-replica updates (and
  // merge_call's function, while the replicas wait) touch all of them.
  // Each on cache lines of its own (128 bytes: a pair of lines, which
  // adjacent-line prefetchers fetch together): a Tensor is 112 bytes, and
  // replicas that read and assign their own components at the same moment
  // (every replica's optimizer step) would otherwise pass the line they
  // share between their cores at each access. (Components that hold the
  // same buffer, as all do after creation or a cross-replica assign, still
  // share its reference count until each replica assigns its own.)
  struct alignas(128) Component {
    Tensor value;
  };
  std::vector<Component> components;
};

namespace {

std::string quoted(const std::string& name) { return "'" + name + "'"; }

// The variable's strategy, after checking that it still lives; nullptr for
// an ordinary variable.
Strategy* live_strategy(const Variable& v, const Variable::State& s, const char* method) {
  if (s.strategy == nullptr) return nullptr;
  if (!s.strategy_alive->load(std::memory_order_acquire)) {
    throw FailedPreconditionError("Variable " + quoted(v.name()) + "::" + method + ": expected its strategy to be "
                                  "alive, got a variable of " + internal::StrategyAccess::name_of(s.strategy_id) +
                                  "; a distributed variable can be used only while the strategy it was created "
                                  "under lives");
  }
  return s.strategy;
}

}  // namespace

std::string_view variable_aggregation_name(VariableAggregation aggregation) {
  switch (aggregation) {
    case VariableAggregation::NONE: return "VariableAggregation.NONE";
    case VariableAggregation::SUM: return "VariableAggregation.SUM";
    case VariableAggregation::MEAN: return "VariableAggregation.MEAN";
    case VariableAggregation::ONLY_FIRST_REPLICA: return "VariableAggregation.ONLY_FIRST_REPLICA";
  }
  return "VariableAggregation.?";
}

Variable::Variable(Tensor initial_value, VariableOptions options) : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.name = std::move(options.name);
  s.aggregation = options.aggregation;
  if (!is_numeric(initial_value.dtype())) {
    throw InvalidArgumentError("Variable " + quoted(s.name) + ": expected an initial value of a number dtype, got " +
                               internal::describe(initial_value) + " (string variables are not supported)");
  }
  const internal::ThreadMode* mode = internal::current_mode();
  Strategy* strategy = nullptr;
  if (mode != nullptr && mode->replica != nullptr) {
    if (internal::StrategyAccess::distributes_variables(*mode->strategy)) {
      throw FailedPreconditionError("Variable " + quoted(s.name) + ": cannot create a variable inside a replica "
                                    "function of " + mode->strategy->to_string() +
                                    "; create it in strategy.scope() outside run");
    }
  } else if (mode != nullptr && internal::StrategyAccess::distributes_variables(*mode->strategy)) {
    strategy = mode->strategy;
  }
  if (strategy != nullptr && options.synchronization == VariableSynchronization::NONE) {
    throw InvalidArgumentError("`NONE` variable synchronization mode is not supported with tf.distribute strategy. "
                               "Please change the `synchronization` for variable: " + s.name);
  }
  s.synchronization = options.synchronization == VariableSynchronization::ON_READ ? VariableSynchronization::ON_READ
                                                                                   : VariableSynchronization::ON_WRITE;
  if (strategy != nullptr && s.aggregation == VariableAggregation::MEAN && !is_floating(initial_value.dtype())) {
    throw InvalidArgumentError("Variable " + quoted(s.name) + ": creating a distributed variable with aggregation "
                               "MEAN and the non-floating dtype " + std::string(dtype_name(initial_value.dtype())) +
                               " is not supported; use a different aggregation or a float dtype");
  }
  s.trainable = options.trainable.value_or(s.synchronization != VariableSynchronization::ON_READ);
  s.strategy = strategy;
  if (strategy != nullptr) {
    s.strategy_alive = internal::StrategyAccess::liveness(*strategy);
    s.strategy_id = strategy->id();
  }
  s.dtype = initial_value.dtype();
  s.shape = initial_value.shape();
  // Every component starts from the same value (one shared buffer until the
  // first update: Tensors are immutable).
  const int n = strategy != nullptr ? strategy->num_local_replicas() : 1;
  // With several workers: the same variables on every worker (checked as each
  // is created, so the first difference is named), each starting from the
  // chief's value.
  if (strategy != nullptr && strategy->num_workers() > 1) {
    internal::StrategyAccess::check_same_on_workers(
        *strategy, "variable #" + std::to_string(internal::StrategyAccess::next_variable_number(*strategy)),
        quoted(s.name) + " " + internal::describe(s.dtype, s.shape) + " " +
            (s.synchronization == VariableSynchronization::ON_READ ? "ON_READ" : "ON_WRITE") + " " +
            std::string(variable_aggregation_name(s.aggregation)));
  }
  s.components.assign(
      static_cast<std::size_t>(n),
      State::Component{strategy != nullptr ? internal::StrategyAccess::broadcast_from_chief(*strategy, initial_value)
                                           : initial_value});
}

const std::string& Variable::name() const noexcept { return state_->name; }
DType Variable::dtype() const noexcept { return state_->dtype; }
const Shape& Variable::shape() const noexcept { return state_->shape; }
VariableSynchronization Variable::synchronization() const noexcept { return state_->synchronization; }
VariableAggregation Variable::aggregation() const noexcept { return state_->aggregation; }
bool Variable::trainable() const noexcept { return state_->trainable; }
bool Variable::is_mirrored() const noexcept {
  return state_->strategy != nullptr && state_->synchronization == VariableSynchronization::ON_WRITE;
}
bool Variable::is_sync_on_read() const noexcept {
  return state_->strategy != nullptr && state_->synchronization == VariableSynchronization::ON_READ;
}
Strategy* Variable::distributed_strategy() const { return live_strategy(*this, *state_, "distributed_strategy"); }
int Variable::num_components() const noexcept { return static_cast<int>(state_->components.size()); }
std::vector<Tensor> Variable::values() const {
  std::vector<Tensor> out;
  out.reserve(state_->components.size());
  for (const State::Component& c : state_->components) out.push_back(c.value);
  return out;
}

namespace {

// The replica whose function this thread runs, for `strategy`'s variables;
// -1 in cross-replica context (or the default state).
int local_replica(const Variable& v, Strategy* strategy) {
  const internal::ThreadMode* mode = internal::current_mode();
  if (mode == nullptr || mode->replica == nullptr || strategy == nullptr) return -1;
  if (&mode->replica->strategy() != strategy) {
    throw FailedPreconditionError("Variable '" + v.name() + "' belongs to " + strategy->to_string() +
                                  " but is used in a replica function of " + mode->replica->strategy().to_string());
  }
  // Components are this process's replicas: the local index.
  return mode->replica->replica_id_in_sync_group() - strategy->worker_index() * strategy->num_local_replicas();
}

// The component StrategyExtended::update is calling its function for, when
// this thread is in `strategy`'s update context; -1 otherwise.
int update_component(Strategy* strategy) {
  const internal::ThreadMode* mode = internal::current_mode();
  if (mode == nullptr || mode->replica != nullptr || mode->strategy != strategy) return -1;
  return mode->component;
}

// Integer `value` split over `n` components whose sum is `value` exactly:
// value / n (rounded toward zero) for every component, and for the first
// that plus what the division drops (value - n * (value / n)).
template <class T>
std::pair<Tensor, Tensor> split_exactly(const Tensor& value, std::int64_t n) {
  const auto v = value.data<T>();
  const auto count = static_cast<T>(n);
  Tensor share = Tensor::generate<T>(value.shape(), [&](std::span<T> out) {
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i] / count);
  });
  Tensor first = Tensor::generate<T>(value.shape(), [&](std::span<T> out) {
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i] / count + v[i] % count);
  });
  return {std::move(share), std::move(first)};
}

}  // namespace

Tensor Variable::value() const {
  const State& s = *state_;
  if (s.strategy == nullptr) return s.components[0].value;
  live_strategy(*this, s, "value");
  const int r = local_replica(*this, s.strategy);
  if (r >= 0) return s.components[static_cast<std::size_t>(r)].value;
  if (const int u = update_component(s.strategy); u >= 0) return s.components[static_cast<std::size_t>(u)].value;
  if (s.synchronization == VariableSynchronization::ON_WRITE) return s.components[0].value;
  switch (s.aggregation) {
    // With several workers these reads are collectives: every worker reads.
    case VariableAggregation::ONLY_FIRST_REPLICA:
      return internal::StrategyAccess::broadcast_from_chief(*s.strategy, s.components[0].value);
    case VariableAggregation::SUM:
    case VariableAggregation::MEAN: {
      Tensor total = s.components[0].value;
      for (std::size_t i = 1; i < s.components.size(); ++i) total = total + s.components[i].value;
      total = internal::StrategyAccess::sum_over_workers(*s.strategy, total);
      if (s.aggregation == VariableAggregation::MEAN) {
        total = total / static_cast<double>(s.strategy->num_replicas_in_sync());
      }
      return total;
    }
    case VariableAggregation::NONE: break;
  }
  throw InvalidArgumentError("Could not convert from VariableAggregation.NONE to ReduceOp: SyncOnReadVariable " +
                             quoted(s.name) + " has aggregation NONE, so it cannot be read in cross-replica "
                             "context; create it with aggregation SUM, MEAN or ONLY_FIRST_REPLICA, or read it "
                             "inside strategy.run (each replica reads its own component)");
}

Tensor Variable::assign(const Tensor& value) { return update(Update::kAssign, value); }
Tensor Variable::assign_add(const Tensor& delta) { return update(Update::kAdd, delta); }
Tensor Variable::assign_sub(const Tensor& delta) { return update(Update::kSub, delta); }

Tensor Variable::update(Update kind, const Tensor& value, bool read_back) {
  State& s = *state_;
  const char* method = kind == Update::kAssign ? "assign" : kind == Update::kAdd ? "assign_add" : "assign_sub";
  if (value.dtype() != dtype() || value.shape() != shape()) {
    throw InvalidArgumentError("Variable " + quoted(s.name) + "::" + method + ": expected a value of " +
                               internal::describe(dtype(), shape()) + ", got " + internal::describe(value));
  }
  auto apply = [kind](const Tensor& old, const Tensor& x) {
    return kind == Update::kAssign ? x : kind == Update::kAdd ? old + x : old - x;
  };
  if (s.strategy == nullptr) {
    // An ordinary variable has one value: the replicas of a strategy with
    // several would update it at once (TF users' most common mistake is to
    // create the variable outside strategy.scope()).
    const internal::ThreadMode* mode = internal::current_mode();
    if (mode != nullptr && mode->replica != nullptr && mode->replica->strategy().num_replicas_in_sync() > 1) {
      const Strategy& running = mode->replica->strategy();
      throw FailedPreconditionError(
          "Variable " + quoted(s.name) + "::" + method + ": an ordinary variable (created outside any "
          "strategy.scope()) cannot be updated inside a replica function of " + running.to_string() + " (" +
          std::to_string(running.num_replicas_in_sync()) + " replicas; replica " +
          std::to_string(mode->replica->replica_id_in_sync_group()) + " tried): create it in strategy.scope() "
          "(a MirroredVariable, or ON_READ for metrics), or update it outside strategy.run");
    }
    s.components[0].value = apply(s.components[0].value, value);
    return s.components[0].value;
  }
  live_strategy(*this, s, method);
  const int r = local_replica(*this, s.strategy);
  if (const int u = update_component(s.strategy); u >= 0) {
    // Update context: the one component, as it is (TF applies fn per device).
    Tensor& mine = s.components[static_cast<std::size_t>(u)].value;
    mine = apply(mine, value);
    return mine;
  }
  if (s.synchronization == VariableSynchronization::ON_READ) {
    if (r >= 0) {  // each replica its own component, no communication
      Tensor& mine = s.components[static_cast<std::size_t>(r)].value;
      mine = apply(mine, value);
      return mine;
    }
    if (s.aggregation == VariableAggregation::SUM && kind != Update::kAssign) {
      throw InvalidArgumentError("SyncOnReadVariable " + quoted(s.name) + " does not support " + method +
                                 " in cross-replica context when aggregation is VariableAggregation.SUM; update "
                                 "it inside strategy.run (each replica its own component), or assign the total");
    }
    // assign of a SUM variable stores value / N everywhere (N: every
    // replica of every worker), so that the aggregated read, which sums over
    // all workers, gives the value back. An integer value / N drops the
    // remainder (TF's truncating cast loses it): here it goes to the first
    // replica's component (worker 0's first), so the total is kept exactly
    // (a restored counter reads what was saved).
    if (s.aggregation == VariableAggregation::SUM) {
      const std::int64_t n = s.strategy->num_replicas_in_sync();
      if (is_floating(dtype())) {
        const Tensor x = (value / static_cast<double>(n)).cast(value.dtype());
        for (State::Component& c : s.components) c.value = x;
      } else {
        auto [share, first] = dtype() == DType::kInt32 ? split_exactly<std::int32_t>(value, n)
                                                       : split_exactly<std::int64_t>(value, n);
        for (State::Component& c : s.components) c.value = share;
        if (s.strategy->worker_index() == 0) s.components[0].value = first;
      }
    } else {
      for (State::Component& c : s.components) c.value = apply(c.value, value);
    }
    return read_back ? this->value() : Tensor();
  }
  // MirroredVariable.
  if (r < 0) {  // cross-replica: every component, aggregation ignored
    for (State::Component& c : s.components) c.value = apply(c.value, value);
    return s.components[0].value;
  }
  if (s.aggregation == VariableAggregation::NONE) {
    // As current TF does: this replica's component only, no communication.
    // Keeping the copies identical is then the caller's part (every replica
    // applies the same all-reduced gradient, as a data-parallel step does).
    Tensor& mine = s.components[static_cast<std::size_t>(r)].value;
    mine = apply(mine, value);
    return mine;
  }
  if (s.aggregation == VariableAggregation::MEAN && !is_floating(dtype())) {
    throw InvalidArgumentError("Cannot update non-float variable " + quoted(s.name) + " with VariableAggregation.MEAN "
                               "aggregation in replica context. Either change the variable dtype to float or "
                               "update it in cross-replica context.");
  }
  // Aggregate the replicas' values once, on replica 0 in cross-replica
  // context, and apply the result to every component while the others wait.
  const VariableAggregation aggregation = s.aggregation;
  internal::current_mode()->replica->merge_call(
      [&s, &apply, aggregation](Strategy& strategy, const PerReplica<Tensor>& values) {
        // (The first replica is worker 0's: with several workers its value
        // comes from there.)
        const Tensor combined =
            aggregation == VariableAggregation::ONLY_FIRST_REPLICA
                ? internal::StrategyAccess::broadcast_from_chief(strategy, values[0])
                : strategy.reduce(aggregation == VariableAggregation::SUM ? ReduceOp::SUM : ReduceOp::MEAN, values);
        for (State::Component& c : s.components) c.value = apply(c.value, combined);
      },
      value);
  return s.components[static_cast<std::size_t>(r)].value;
}

std::string Variable::to_string() const {
  const State& s = *state_;
  if (s.strategy == nullptr) return "Variable(" + quoted(s.name) + ", " + s.components[0].value.to_string() + ")";
  std::string out = is_mirrored() ? "MirroredVariable:{\n" : "SyncOnReadVariable:{\n";
  for (std::size_t i = 0; i < s.components.size(); ++i) {
    out += "  " + std::to_string(i) + ": " + s.components[i].value.to_string() +
           (i + 1 < s.components.size() ? ",\n" : "\n");
  }
  return out + "}";
}

std::ostream& operator<<(std::ostream& os, const Variable& v) { return os << v.to_string(); }

}  // namespace distribute
