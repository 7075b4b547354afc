// Variables: state kept per replica with TF's synchronization and
// aggregation rules.
//
// A Variable created inside strategy.scope() of a MirroredStrategy is
// distributed, with one component per replica, all starting from the same
// initial value:
//   - synchronization AUTO or ON_WRITE: a MirroredVariable. The library keeps
//     its components identical, except under replica-context updates with
//     aggregation NONE (below). In replica context an update (assign, assign_add,
//     assign_sub) is aggregated over the replicas first (SUM, MEAN, or
//     ONLY_FIRST_REPLICA: replica 0's value), then applied to every
//     component; this is a collective, so every replica must make it. With
//     aggregation NONE an update in replica context applies to the
//     replica's own component only, without communication, as current TF
//     does (TF up to about 2.4 raised): the copies stay identical only if every
//     replica applies the same update, e.g. an optimizer step on all-reduced
//     gradients. In cross-replica context an update is applied to every
//     component as is.
//     Reads give the local component in replica context, the primary
//     (replica 0's) component in cross-replica context.
//   - synchronization ON_READ: a SyncOnReadVariable (what metrics use).
//     Each replica reads and updates its own component without any
//     communication; a read in cross-replica context aggregates the
//     components (SUM, MEAN, ONLY_FIRST_REPLICA; NONE raises). In
//     cross-replica context assign(x) stores x / N in every component for
//     SUM (so the aggregated read is x; for an integer x, the remainder of
//     the division goes to the first replica's component, so the read is x
//     exactly where TF's would drop it) and x otherwise; assign_add and
//     assign_sub raise for SUM.
// Elsewhere (no scope, the default or a one-device strategy) a Variable is an
// ordinary single value. It may be read anywhere, but not updated inside a
// replica function of a strategy with more than one replica (the replicas
// would race on it): that raises FailedPreconditionError naming the
// variable, the strategy and the fix (create it in strategy.scope()).
//
// A Variable is a handle: copies share the same state. Reads and updates of
// replica r's component from replica r's thread may run concurrently with
// the other replicas'; cross-replica updates must not race with run(), and
// neither may reads of every component (values(), to_string(), <<) while
// replicas update their own (SyncOnRead, or Mirrored with aggregation NONE).
#pragma once

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distribute/tensor.h"

namespace distribute {

class Strategy;

enum class VariableSynchronization { AUTO, NONE, ON_WRITE, ON_READ };
enum class VariableAggregation { NONE, SUM, MEAN, ONLY_FIRST_REPLICA };

std::string_view variable_aggregation_name(VariableAggregation aggregation);

struct VariableOptions {
  std::string name = "Variable";
  VariableSynchronization synchronization = VariableSynchronization::AUTO;
  VariableAggregation aggregation = VariableAggregation::NONE;
  // Default: true, except for ON_READ variables (false, as in TF).
  std::optional<bool> trainable = std::nullopt;
};

class Variable {
 public:
  // Raises InvalidArgumentError inside a distributing scope for
  // synchronization NONE and for aggregation MEAN with an integer dtype
  // (outside one such a variable is made, and a MEAN update of it in a
  // replica context raises);
  // FailedPreconditionError when created inside a replica function of a
  // MirroredStrategy (create variables in strategy.scope(), outside run).
  explicit Variable(Tensor initial_value, VariableOptions options = {});

  const std::string& name() const noexcept;
  DType dtype() const noexcept;
  const Shape& shape() const noexcept;
  VariableSynchronization synchronization() const noexcept;  // ON_WRITE or ON_READ once created (AUTO resolved)
  VariableAggregation aggregation() const noexcept;
  bool trainable() const noexcept;
  // True for MirroredVariable, SyncOnReadVariable respectively.
  bool is_mirrored() const noexcept;
  bool is_sync_on_read() const noexcept;
  // Number of components (1 for an ordinary variable).
  int num_components() const noexcept;

  // The value as this context sees it (see the header comment).
  Tensor value() const;
  Tensor read_value() const { return value(); }
  // The components in replica order (experimental_local_results).
  std::vector<Tensor> values() const;

  // Updates; the new value must have the variable's dtype and shape
  // (InvalidArgumentError otherwise). Return the updated value as value()
  // would read it.
  Tensor assign(const Tensor& value);
  Tensor assign_add(const Tensor& delta);
  Tensor assign_sub(const Tensor& delta);

  // "MirroredVariable:{\n  0: Tensor(...),\n  1: Tensor(...)\n}",
  // "SyncOnReadVariable:{...}", or "Variable(name, Tensor(...))".
  std::string to_string() const;

  // The strategy whose replicas hold the components (TF's
  // distribute_strategy); nullptr for an ordinary variable.
  // FailedPreconditionError once that strategy was destroyed (so do value()
  // and the updates: a distributed variable lives with its strategy). This
  // finds a use after the destruction; destroying the strategy while
  // another thread uses its variables remains a race.
  Strategy* distributed_strategy() const;

  struct State;

 private:
  friend class Checkpoint;
  enum class Update { kAssign, kAdd, kSub };
  // `read_back`: return the new value. Without it a SyncOnReadVariable's
  // cross-replica assign returns an empty tensor and makes no collective
  // read (Checkpoint::restore assigns every tracked value with no
  // communication, so that a failing worker cannot stop it half-way).
  Tensor update(Update kind, const Tensor& value, bool read_back = true);
  std::shared_ptr<State> state_;
};

std::ostream& operator<<(std::ostream& os, const Variable& v);

}  // namespace distribute
