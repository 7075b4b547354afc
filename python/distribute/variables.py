"""Variables and checkpoints (TF's tf.Variable under a strategy's scope, and
tf.train.Checkpoint), over the C++ core.

Created inside ``strategy.scope()`` of a MirroredStrategy, a Variable is a
MirroredVariable (synchronization AUTO/ON_WRITE: updates in replica context
are aggregated with its aggregation, then applied to every copy) or a
SyncOnReadVariable (ON_READ: each replica its own copy, aggregated when read
in cross-replica context). Elsewhere it is an ordinary value, which replica
functions of a strategy with several replicas may read but not update
(FailedPreconditionError naming the fix)."""

import enum

import numpy as np

from . import _core
from ._tensor import convert


class VariableSynchronization(enum.Enum):
  AUTO = "AUTO"
  NONE = "NONE"
  ON_WRITE = "ON_WRITE"
  ON_READ = "ON_READ"


class VariableAggregation(enum.Enum):
  NONE = "NONE"
  SUM = "SUM"
  MEAN = "MEAN"
  ONLY_FIRST_REPLICA = "ONLY_FIRST_REPLICA"


def _name_of(value, enum_type):
  if isinstance(value, enum_type):
    return value.value
  return str(value).upper()


class Variable:
  def __init__(self, initial_value, name="Variable", synchronization=VariableSynchronization.AUTO,
               aggregation=VariableAggregation.NONE, trainable=None, dtype=None):
    # The initial value is copied (as TF does): the caller's array stays its own.
    if not isinstance(initial_value, _core.Tensor):
      initial_value = np.array(initial_value, dtype=dtype, copy=True) if isinstance(initial_value, np.ndarray) \
          else initial_value
    self._core = _core.Variable(convert(initial_value, dtype), name,
                                _name_of(synchronization, VariableSynchronization),
                                _name_of(aggregation, VariableAggregation), trainable)

  name = property(lambda self: self._core.name)
  trainable = property(lambda self: self._core.trainable)

  def value(self):
    """The value as this context sees it (a replica its own copy)."""
    return self._core.value()

  read_value = value

  def numpy(self):
    return np.asarray(self.value())

  def __array__(self, dtype=None):
    a = self.numpy()
    return a if dtype is None else a.astype(dtype)

  def assign(self, value):
    return self._core.assign(convert(value))

  def assign_add(self, delta):
    return self._core.assign_add(convert(delta))

  def assign_sub(self, delta):
    return self._core.assign_sub(convert(delta))

  @property
  def values(self):
    """The components in replica order (one for an ordinary variable)."""
    return tuple(self._core.values())

  def __repr__(self):
    return repr(self._core)


class Checkpoint:
  """Saves and restores variables and distributed iterators
  (tf.train.Checkpoint(name=variable, iterator=iterator, ...)).

  save(directory) writes <directory>/ckpt-<N>.dckpt atomically and keeps the
  last max_to_keep; restore(path) checks the whole file before changing
  anything (the C++ Checkpoint: docs/checkpoint_format.md). Unlike TF,
  save takes a directory, not a file prefix.

  An iterator of a distributed dataset is saved as its position and
  restored by replay: the next step after restore() is, bitwise, the one an
  uninterrupted run would have given (C++ Checkpoint::track of a
  DistributedIterator). Pipelines that cannot be replayed in a new process
  (from_generator, a shuffle without a seed) raise UnimplementedError at
  track."""

  def __init__(self, max_to_keep=5, **tracked):
    self._max_to_keep = max_to_keep
    _core.Checkpoint(max_to_keep)  # raises now for a bad max_to_keep
    self._tracked = []  # (name, Variable or DistributedIterator), in tracking order
    for name, value in tracked.items():
      self.track(name, value)

  def track(self, name, value):
    from .errors import InvalidArgumentError
    is_iterator = isinstance(getattr(value, "_core", None), _core.DistributedIterator)
    if not isinstance(value, Variable) and not is_iterator:
      raise InvalidArgumentError(f"Checkpoint: expected a distribute Variable or a distributed dataset's iterator "
                                 f"for {name!r}, got {type(value).__name__}")
    self._build(self._tracked + [(name, value)])  # the core's checks: names, replayable pipelines
    self._tracked.append((name, value))

  def _build(self, tracked):
    core = _core.Checkpoint(self._max_to_keep)
    for name, value in tracked:
      if isinstance(value, Variable):
        core.track(name, value._core)
      else:
        core.track_iterator(name, value._core)
    return core

  def save(self, directory):
    return self._build(self._tracked).save(str(directory))

  def restore(self, path):
    self._build(self._tracked).restore(str(path))


def latest_checkpoint(directory):
  """The newest checkpoint file in ``directory``, or None."""
  return _core.latest_checkpoint(str(directory))
