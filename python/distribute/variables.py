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
import os

import numpy as np

from . import _core
from ._tensor import convert


def _path(value, what):
  """A path argument as the bytes the C++ core opens: str, bytes or any
  os.PathLike, as os.fsencode spells it (so a bytes path is not read as
  the text "b'...'")."""
  try:
    return os.fsencode(os.fspath(value))
  except TypeError:
    from .errors import InvalidArgumentError
    raise InvalidArgumentError(f"{what}: expected a path (str, bytes or os.PathLike), got "
                               f"{type(value).__name__}") from None


def _text(path):
  """A path from the core (bytes) as str, as os.fsdecode spells it (None
  stays None)."""
  return None if path is None else os.fsdecode(path)


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


def _owned(value, dtype=None):
  """``value`` as a Tensor the variable may keep: a copy of an array, a
  buffer or a ``__dlpack__`` tensor (as TF copies the initial value and
  assigns into the variable's own buffer), so that the caller's later
  writes to it do not change the variable. A Tensor is immutable and kept
  as is; Python numbers and lists are converted into new memory anyway."""
  t = convert(value, dtype)
  if isinstance(value, (_core.Tensor, bool, int, float, list, tuple, str, bytes)) or t.dtype == "string":
    return t
  if isinstance(value, np.ndarray) and value.size > 0 and t._data_address() != value.ctypes.data:
    return t  # convert already copied it (a cast, strided or misaligned input)
  return convert(np.array(np.asarray(t), copy=True))


class Variable:
  def __init__(self, initial_value, name="Variable", synchronization=VariableSynchronization.AUTO,
               aggregation=VariableAggregation.NONE, trainable=None, dtype=None):
    self._core = _core.Variable(_owned(initial_value, dtype), name,
                                _name_of(synchronization, VariableSynchronization),
                                _name_of(aggregation, VariableAggregation), trainable)
    # A distributed variable keeps its strategy alive, as TF's does (its
    # _distribute_strategy): the C++ strategy must outlive its variables.
    from .strategy import get_strategy, has_strategy
    self._distribute_strategy = get_strategy() if has_strategy() else None

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
    return self._core.assign(_owned(value))

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
    return _text(self._build(self._tracked).save(_path(directory, "Checkpoint.save")))

  def write(self, file_prefix):
    """Writes exactly ``file_prefix`` (no numbering, nothing deleted; TF's
    Checkpoint.write); returns the path."""
    return _text(self._build(self._tracked).write(_path(file_prefix, "Checkpoint.write")))

  def restore(self, save_path, expect_partial=False):
    """Restores every tracked value, all or nothing. Entries of the file
    this checkpoint does not track are refused unless ``expect_partial``
    (TF spells it ``restore(path).expect_partial()``; here the check runs
    before anything changes, so it is an argument). Returns a status with
    TF's expect_partial() and assert_consumed(); the latter raises after a
    restore with expect_partial=True, which may have left entries out."""
    self._build(self._tracked).restore(_path(save_path, "Checkpoint.restore"), bool(expect_partial))
    return _RestoreStatus(bool(expect_partial))

  def read(self, save_path, expect_partial=False):
    """TF's Checkpoint.read: restore()."""
    return self.restore(save_path, expect_partial)


class _RestoreStatus:
  """What Checkpoint.restore returns: the restore already matched every
  tracked value (and, without expect_partial, every entry of the file)."""

  def __init__(self, partial):
    self._partial = partial

  def expect_partial(self):
    return self

  def assert_consumed(self):
    if self._partial:
      raise AssertionError("Checkpoint.restore(expect_partial=True) may have left entries of the file unused")
    return self

  def assert_existing_objects_matched(self):
    return self


class CheckpointManager:
  """TF's tf.train.CheckpointManager over a distribute.Checkpoint (the C++
  CheckpointManager: <directory>/<checkpoint_name>-<N>.dckpt files, the
  newest max_to_keep kept, one every keep_checkpoint_every_n_hours kept for
  good, saves every checkpoint_interval steps of step_counter)."""

  def __init__(self, checkpoint, directory, max_to_keep, keep_checkpoint_every_n_hours=None, checkpoint_name="ckpt",
               step_counter=None, checkpoint_interval=None, init_fn=None):
    from .errors import InvalidArgumentError
    if not isinstance(checkpoint, Checkpoint):
      raise InvalidArgumentError(f"CheckpointManager: expected a distribute.Checkpoint, got "
                                 f"{type(checkpoint).__name__}")
    self._checkpoint = checkpoint
    counter = None
    if step_counter is not None:
      def counter():
        value = step_counter() if callable(step_counter) else np.asarray(step_counter)
        return int(np.asarray(value))
    self._core = _core.CheckpointManager(_path(directory, "CheckpointManager"), max_to_keep, keep_checkpoint_every_n_hours,
                                         str(checkpoint_name), counter, checkpoint_interval, init_fn)

  def save(self, checkpoint_number=None, check_interval=True):
    """The new checkpoint's path, or None when the interval has not passed."""
    number = None if checkpoint_number is None else int(np.asarray(checkpoint_number))
    core = self._checkpoint._build(self._checkpoint._tracked)
    return _text(self._core.save(core, number, bool(check_interval)))

  def restore_or_initialize(self):
    """Restores the latest checkpoint and returns its path; else calls
    init_fn and returns None."""
    return _text(self._core.restore_or_initialize(self._checkpoint._build(self._checkpoint._tracked)))

  @property
  def latest_checkpoint(self):
    return _text(self._core.latest_checkpoint())

  @property
  def checkpoints(self):
    return [_text(p) for p in self._core.checkpoints()]

  @property
  def directory(self):
    return _text(self._core.directory())

  @property
  def checkpoint_interval(self):
    return self._core.checkpoint_interval()


def latest_checkpoint(directory, *, strategy=None):
  """The newest checkpoint file in ``directory``, or None (also when the
  directory does not exist; one that cannot be listed raises). With a
  ``strategy`` of several workers, the chief's answer on every worker (a
  collective: every worker calls it), which is what a multi-worker job
  should restore: each worker's own listing may name another file."""
  path = _path(directory, "latest_checkpoint")
  if strategy is None:
    return _text(_core.latest_checkpoint(path))
  return _text(_core.latest_checkpoint_of_chief(path, strategy._core))
