"""Strategies, replica contexts and distributed input (TF's distribute_lib.py
and input_lib.py), over the C++ core."""

import threading
import weakref

import numpy as np

from . import _core, _nest
from ._tensor import _NUMPY_DTYPES, Tensor, convert
from .data import Dataset, _pack, _track
from .errors import FailedPreconditionError, InvalidArgumentError, OutOfRangeError, UnimplementedError
from .values import DistributedValues, Mirrored, Optional, PerReplica, ReduceOp

_strategies = weakref.WeakValueDictionary()  # id -> Python Strategy object


def _register(strategy):
  _strategies[strategy._core.id] = strategy
  return strategy


def _describe(origin):
  s = _strategies.get(origin)
  return f"{s!r} (strategy #{origin})" if s is not None else f"strategy #{origin} (no longer alive)"


class Strategy:
  """A set of replicas that run in sync (TF's tf.distribute.Strategy)."""

  def __init__(self, core):
    self._core = core
    _register(self)

  @property
  def num_replicas_in_sync(self):
    return self._core.num_replicas_in_sync

  @property
  def worker_devices(self):
    return tuple(self._core.devices)

  def __repr__(self):
    return repr(self._core)

  # --- the scope ---
  def scope(self):
    """A context manager making this strategy current on this thread
    (cross-replica context). It must be exited on the thread that entered
    it (else FailedPreconditionError, and the scope stays open)."""
    return _Scope(self)

  # --- run ---
  def _check_values(self, value, what):
    for leaf in _nest.flatten(value):
      if isinstance(leaf, DistributedValues):
        if len(leaf) != self._core.num_local_replicas:
          raise InvalidArgumentError(
              f"{what}: expected {self._core.num_local_replicas} values per replica for {self!r}, got {len(leaf)}")
        if leaf._origin not in (0, self._core.id):
          raise InvalidArgumentError(
              f"{what}: expected values of this strategy, {self!r} (strategy #{self._core.id}), got values "
              f"produced by another one, {_describe(leaf._origin)}; to move them, build a new PerReplica from "
              f"experimental_local_results(value)")

  def run(self, fn, args=(), kwargs=None):
    """Calls fn(*args, **kwargs) once per replica, concurrently, each inside
    its replica context; a PerReplica or Mirrored in args is replaced by the
    replica's value. Returns the results as TF does: a structure of
    PerReplica (a function returning (loss, count) gives
    (PerReplica, PerReplica)), except where TF's regroup gives the value
    itself: with one local replica, and for a leaf that is the same object
    on every replica (a constant, None, a variable). A Python exception in
    a replica is raised here, with its type and traceback; the other
    replicas are released."""
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(args, (tuple, list)):
      raise InvalidArgumentError(f"Strategy.run: expected args to be a tuple or list, got {type(args).__name__}")
    n = self._core.num_local_replicas
    results = [None] * n
    distributed = (args or kwargs) and any(isinstance(v, DistributedValues) for v in _nest.flatten((args, kwargs)))
    if distributed:
      self._check_values((args, kwargs), "Strategy.run")

      def body(r):
        results[r] = fn(*_select(args, r), **_select(kwargs, r))
    else:
      # Every replica gets the same arguments (the fast path: nothing to select).
      def body(r):
        results[r] = fn(*args, **kwargs)

    try:
      self._core.run(body)
    except FailedPreconditionError:
      context = _core.replica_context()
      if context is not None and context[2] == self._core.id:
        # The C++ message names C++ calls; say it in Python's terms.
        raise FailedPreconditionError(
            f"Strategy.run: expected a call in cross-replica context, got one from the replica function of replica "
            f"{context[0]} of {self!r}; a replica function cannot call run (use "
            f"get_replica_context().merge_call(fn) for work in cross-replica context)") from None
      raise
    return _regroup(results, self._core.id)

  # --- cross-replica ---
  def reduce(self, reduce_op, value, axis=None):
    """Combines per-replica values (SUM or MEAN), along ``axis`` first if
    given (MEAN divides by the total count along it). A plain value is
    treated as TF does: with several workers it is this worker's (what run
    returns with one local replica), reduced across the workers, a
    collective that every worker makes."""
    op = ReduceOp.of(reduce_op).value
    self._check_values(value, "Strategy.reduce")

    def one(leaf):
      if isinstance(leaf, DistributedValues):
        return self._core.reduce(op, [convert(v) for v in leaf], axis, isinstance(leaf, Mirrored))
      return self._core.reduce_plain(op, convert(leaf), axis)

    return _nest.map_structure(one, value)

  @property
  def extended(self):
    """TF's strategy.extended: reduce_to, batch_reduce_to, update and the
    rest, for custom optimizers built on merge_call."""
    return StrategyExtended(self)

  def experimental_distribute_values_from_function(self, value_fn):
    """TF's experimental_distribute_values_from_function: ``value_fn(ctx)``
    once per local replica, in order, with ``ctx`` a ValueContext (the
    replica's global id, worker-major across workers, and
    num_replicas_in_sync); the results as a PerReplica (a structure of them
    for nested results, also with one replica, as TF's MirroredStrategy does)
    for ``run``."""
    n = self._core.num_local_replicas
    base = self._core.worker_index * n
    values = [value_fn(ValueContext(base + r, self.num_replicas_in_sync)) for r in range(n)]
    first = values[0]
    if any(_nest.is_structure(v) for v in values):
      for i, v in enumerate(values[1:], 1):
        _nest.assert_same_structure(first, v, where="the value function's result", a_name="replica 0's",
                                    b_name=f"replica {i}'s")
      flats = [_nest.flatten(v) for v in values]
      return _nest.pack_as(first, [PerReplica(leaves, self._core.id) for leaves in zip(*flats)])
    return PerReplica(values, self._core.id)

  def experimental_local_results(self, value):
    """The values of this process's replicas, as a tuple (a plain value: a
    tuple of one)."""
    from .variables import Variable
    if isinstance(value, (DistributedValues, Variable)):
      return tuple(value.values)  # a variable's components (one for an ordinary one)
    if _nest.is_structure(value) and any(isinstance(v, DistributedValues) for v in _nest.flatten(value)):
      self._check_values(value, "Strategy.experimental_local_results")
      n = self._core.num_local_replicas
      return tuple(_select(value, r) for r in range(n))
    return (value,)

  def experimental_allocate_shared(self, shape, dtype="float32"):
    """Zero-filled writable numpy arrays, one per local replica, meant for
    ``all_reduce_in_place`` (a flat gradient buffer whose slices are the
    parameters' ``.grad``, say). Under MultiWorkerMirroredStrategy with one
    replica per process on one host each lives in the host's shared memory,
    and an in-place all_reduce of them (above 64 KiB, when every worker
    passes its own at the same place) copies nothing between the processes.
    Across hosts, a worker on a host with several workers gets its part of
    its host's shared memory (the host's sum is copy-free; the hosts' sums
    travel over MPI); a worker alone on its host, and every other strategy,
    gets ordinary arrays. With several workers every worker
    calls it, in the same order and with the same shape and dtype. After an
    all_reduce that raised, an array's contents are unspecified (another
    worker may still be writing into it): leave it."""
    import numpy as np
    name = np.dtype(dtype).name
    shape = [int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,))]
    return [np.asarray(b) for b in self._core.experimental_allocate_shared(name, shape)]

  def gather(self, value, axis):
    """Concatenates the replicas' values along ``axis``. A plain value is
    returned unchanged, except with several workers (one local replica
    each): then it is this worker's, and the workers' are concatenated (a
    collective that every worker makes)."""
    self._check_values(value, "Strategy.gather")

    def one(leaf):
      if isinstance(leaf, DistributedValues):
        return self._core.gather([convert(v) for v in leaf], int(axis))
      # Unchanged, as TF's, except with several workers: then this worker's
      # value, gathered across them.
      return self._core.gather_plain(convert(leaf), int(axis))

    return _nest.map_structure(one, value)

  # --- input ---
  def experimental_distribute_dataset(self, dataset, options=None):
    """Splits each global batch of ``dataset`` across the replicas, as TF does."""
    if not isinstance(dataset, Dataset):
      raise InvalidArgumentError(f"experimental_distribute_dataset: expected a distribute.data.Dataset, got "
                                 f"{type(dataset).__name__}")
    buffer_size, policy = InputOptions._of(options, "experimental_distribute_dataset")
    return DistributedDataset(self, self._core.experimental_distribute_dataset(dataset._core, buffer_size, policy),
                              dataset._structure)

  def distribute_datasets_from_function(self, dataset_fn, options=None):
    """dataset_fn(InputContext) -> this worker's dataset; each replica takes
    its own element per step."""
    made = []

    def call(context):
      dataset = dataset_fn(context)
      if not isinstance(dataset, Dataset):
        raise InvalidArgumentError(f"distribute_datasets_from_function: expected dataset_fn to return a "
                                   f"distribute.data.Dataset, got {type(dataset).__name__}")
      made.append(dataset)
      return dataset._core

    buffer_size, policy = InputOptions._of(options, "distribute_datasets_from_function")
    core = self._core.distribute_datasets_from_function(call, buffer_size, policy)
    return DistributedDataset(self, core, made[0]._structure)


class StrategyExtended:
  """TF's tf.distribute.StrategyExtended (strategy.extended): the C++
  StrategyExtended (distribute/strategy_extended.h). reduce_to,
  batch_reduce_to and update run in cross-replica context (merge_call's
  function, or outside run)."""

  def __init__(self, strategy):
    self._strategy = strategy

  def reduce_to(self, reduce_op, value, destinations, options=None):
    """``value`` reduced over every replica (Strategy.reduce's rules) as a
    Mirrored with one copy per component of ``destinations`` (a Variable)."""
    from .variables import Variable
    if not isinstance(destinations, Variable):
      raise InvalidArgumentError(f"StrategyExtended.reduce_to: expected a distribute.Variable as destinations, got "
                                 f"{type(destinations).__name__}")
    op = ReduceOp.of(reduce_op).value
    if isinstance(value, DistributedValues):
      kind = "mirrored" if isinstance(value, Mirrored) else "per_replica"
      values = [convert(v) for v in value]
    else:
      kind, values = "plain", [convert(value)]
    core = self._strategy._core
    return Mirrored(core.extended_reduce_to(op, values, kind, destinations._core), core.id)

  def batch_reduce_to(self, reduce_op, value_destination_pairs, options=None):
    """reduce_to of every (value, destination) pair, as a list."""
    return [self.reduce_to(reduce_op, value, destination) for value, destination in value_destination_pairs]

  def update(self, var, fn, args=(), kwargs=None, group=True):
    """fn(var, *args, **kwargs) once per component of ``var`` (per local
    replica), each in TF's update context: var reads and updates that
    component alone. PerReplica/Mirrored arguments give each call its
    component's value. Returns a Mirrored of the results (group=False: a
    tuple)."""
    kwargs = kwargs or {}
    results = []
    components = var._core.num_components if hasattr(var, "_core") else None
    for leaf in _nest.flatten((args, kwargs)):
      if isinstance(leaf, DistributedValues) and components is not None and len(leaf) != components:
        raise InvalidArgumentError(f"StrategyExtended.update: expected {components} values per distributed argument "
                                   f"(one per component of variable '{var.name}'), got {len(leaf)}")
    self._strategy._check_values((args, kwargs), "StrategyExtended.update")

    def call(r):
      results.append(fn(var, *[_select(a, r) for a in args], **{k: _select(v, r) for k, v in kwargs.items()}))

    self._strategy._core.extended_update(var._core, call)
    if not group:
      return tuple(results)
    return Mirrored(results, self._strategy._core.id)

  def variable_created_in_scope(self, v):
    return self._strategy._core.variable_created_in_scope(v._core)

  @property
  def worker_devices(self):
    return tuple(self._strategy._core.worker_devices())

  @property
  def should_checkpoint(self):
    return self._strategy._core.is_chief

  @property
  def should_save_summary(self):
    return self._strategy._core.is_chief


class _Scope:
  """What Strategy.scope() returns: enters on __enter__, exits on
  __exit__; a refused exit (another thread, out of order) can be retried."""

  def __init__(self, strategy):
    self._strategy = strategy
    self._held = None

  def __enter__(self):
    if self._held is not None:
      raise FailedPreconditionError(f"Strategy.scope(): this scope of {self._strategy!r} is already entered; "
                                    f"call strategy.scope() again for another one")
    self._held = self._strategy._core.scope_enter()
    return self._strategy

  def __exit__(self, *exc):
    if self._held is not None:
      self._held.exit()  # raises, keeping the scope, when refused
      self._held = None
    return False


class InputOptions:
  """TF's tf.distribute.InputOptions for distributed datasets.

  experimental_per_replica_buffer_size: steps prepared ahead of the one
    being consumed, on a background thread (0: each inside get_next);
  experimental_fetch_to_device: accepted for TF programs (the devices are
    CPUs: the data stays where it is);
  experimental_replication_mode: PER_WORKER (the default: the dataset
    function runs once per worker); PER_REPLICA raises UnimplementedError
    when the options are used;
  experimental_place_dataset_on_device: needs PER_REPLICA, as TF's (so
    True raises InvalidArgumentError when the options are used);
  auto_shard_policy: how datasets are split across workers ("AUTO",
    "FILE", "DATA", "OFF"; TF keeps it in tf.data.Options'
    experimental_distribute.auto_shard_policy)."""

  _POLICIES = ("AUTO", "FILE", "DATA", "OFF")

  def __init__(self, experimental_fetch_to_device=None, experimental_replication_mode=None,
               experimental_place_dataset_on_device=False, experimental_per_replica_buffer_size=1,
               auto_shard_policy="AUTO"):
    if isinstance(experimental_per_replica_buffer_size, bool) or \
        not isinstance(experimental_per_replica_buffer_size, int) or experimental_per_replica_buffer_size < 0:
      raise InvalidArgumentError(f"InputOptions: expected experimental_per_replica_buffer_size to be an int >= 0, "
                                 f"got {experimental_per_replica_buffer_size!r}")
    policy = getattr(auto_shard_policy, "name", auto_shard_policy)
    if policy not in self._POLICIES:
      raise InvalidArgumentError(f"InputOptions: expected auto_shard_policy one of {', '.join(self._POLICIES)}, "
                                 f"got {auto_shard_policy!r}")
    if self._mode_name(experimental_replication_mode) not in ("PER_WORKER", "PER_REPLICA"):
      raise InvalidArgumentError(f"InputOptions: expected experimental_replication_mode PER_WORKER or PER_REPLICA, "
                                 f"got {experimental_replication_mode!r}")
    self.experimental_fetch_to_device = experimental_fetch_to_device
    self.experimental_replication_mode = experimental_replication_mode
    self.experimental_place_dataset_on_device = experimental_place_dataset_on_device
    self.experimental_per_replica_buffer_size = experimental_per_replica_buffer_size
    self.auto_shard_policy = policy

  def __repr__(self):
    return (f"InputOptions(experimental_per_replica_buffer_size={self.experimental_per_replica_buffer_size}, "
            f"auto_shard_policy={self.auto_shard_policy!r})")

  @staticmethod
  def _mode_name(mode):
    """A replication mode's name: PER_WORKER for None, a string as it is,
    an enum member's name."""
    return "PER_WORKER" if mode is None else getattr(mode, "name", mode)

  @staticmethod
  def _of(options, call):
    if options is None:
      options = InputOptions()
    if not isinstance(options, InputOptions):
      raise InvalidArgumentError(f"{call}: expected options to be a distribute.InputOptions, got "
                                 f"{type(options).__name__}")
    mode = InputOptions._mode_name(options.experimental_replication_mode)
    if mode == "PER_REPLICA":
      raise UnimplementedError(f"{call}: InputReplicationMode.PER_REPLICA is not supported (one input pipeline per "
                               f"replica); use PER_WORKER, the default")
    if options.experimental_place_dataset_on_device:
      raise InvalidArgumentError(f"{call}: experimental_place_dataset_on_device=True needs replication mode "
                                 f"PER_REPLICA, got {mode}")
    return options.experimental_per_replica_buffer_size, options.auto_shard_policy


class MirroredStrategy(Strategy):
  """N replicas in this process, one per local device ("CPU:0", ...); by
  default one per usable CPU (affinity mask and CPU quota)."""

  def __init__(self, devices=None, cross_device_ops=None):
    if devices is not None:
      if isinstance(devices, str) or not all(isinstance(d, str) for d in devices):
        raise InvalidArgumentError(f"MirroredStrategy: expected a list of device names, got {devices!r}")
      devices = list(devices)
    super().__init__(_core.MirroredStrategy(devices))


class OneDeviceStrategy(Strategy):
  def __init__(self, device):
    super().__init__(_core.OneDeviceStrategy(device))


class MultiWorkerMirroredStrategy(Strategy):
  """M processes (launched by mpirun) x N local replicas. Workers that all
  run on one host exchange through a shared-memory segment unless
  ``shared_memory=False`` (or DISTRIBUTE_SHARED_MEMORY=0): then MPI. On
  several hosts, all_reduce sums each host's workers on its segment and the
  hosts' sums over MPI."""

  def __init__(self, cluster_resolver=None, communication_options=None, *, local_devices=None, timeout_seconds=None,
               shared_memory=True):
    """TF's arguments first: ``cluster_resolver`` must be None (the workers
    are mpirun's processes; TF_CONFIG, if set, names the chief), and
    ``communication_options`` (experimental.CommunicationOptions) may give
    the timeout. Then this library's: ``local_devices`` (default one CPU
    replica), ``timeout_seconds`` (the same timeout; not both) and
    ``shared_memory``."""
    from .experimental import CommunicationOptions
    if cluster_resolver is not None:
      raise InvalidArgumentError(f"MultiWorkerMirroredStrategy: expected cluster_resolver=None (the workers are the "
                                 f"processes mpirun starts), got {type(cluster_resolver).__name__}; the local "
                                 f"devices are given by keyword: local_devices=[...]")
    if communication_options is not None:
      if not isinstance(communication_options, CommunicationOptions):
        raise InvalidArgumentError(f"MultiWorkerMirroredStrategy: expected communication_options to be an "
                                   f"experimental.CommunicationOptions, got {type(communication_options).__name__}")
      if communication_options.timeout_seconds is not None:
        if timeout_seconds is not None and timeout_seconds != communication_options.timeout_seconds:
          raise InvalidArgumentError(
              f"MultiWorkerMirroredStrategy: expected one timeout, got timeout_seconds={timeout_seconds} and "
              f"communication_options.timeout_seconds={communication_options.timeout_seconds}")
        timeout_seconds = communication_options.timeout_seconds
    super().__init__(_core.MultiWorkerMirroredStrategy(list(local_devices or []), timeout_seconds,
                                                       bool(shared_memory)))


class _DefaultStrategy(Strategy):
  def __init__(self):
    self._core = None

  def __repr__(self):
    return "DefaultStrategy"


_default = None
_default_lock = threading.Lock()


def _default_strategy():
  """The default strategy (one replica, the calling thread)."""
  global _default
  with _default_lock:
    if _default is None:
      _default = _DefaultStrategy()
      _default._core = _core.default_strategy()
      _register(_default)
    return _default


def _select(value, r):
  return _nest.map_structure(lambda v: v.values[r] if isinstance(v, DistributedValues) else v, value)


def _regroup(values, origin, always_wrap=False):
  """Per-replica results -> a structure of PerReplica (TF's regroup; one
  replica's value is returned as it is, as TF does, unless ``always_wrap``:
  a distributed dataset's steps across workers, TF's _always_wrap)."""
  first = values[0]
  if len(values) == 1 and not always_wrap:
    return first
  if first is None and all(v is None for v in values):
    return None
  if any(_nest.is_structure(v) for v in values):
    # Every replica against replica 0, also when replica 0's is a leaf.
    for i, v in enumerate(values[1:], 1):
      _nest.assert_same_structure(first, v, where="the result", a_name="replica 0's",
                                  b_name=f"replica {i}'s")
    flats = [_nest.flatten(v) for v in values]
    return _nest.pack_as(first, [_regroup_leaf(leaves, origin, always_wrap) for leaves in zip(*flats)])
  return _regroup_leaf(values, origin, always_wrap)


def _regroup_leaf(values, origin, always_wrap=False):
  # The same object from every replica is that object (TF's regroup): a
  # distributed variable (merge_call's function gets the variable, not a
  # PerReplica of it), a constant, a learning rate, a name.
  if not always_wrap and all(v is values[0] for v in values):
    return values[0]
  return PerReplica(list(values), origin)


class ValueContext:
  """What experimental_distribute_values_from_function's function is told
  (TF's tf.distribute.experimental.ValueContext)."""

  def __init__(self, replica_id_in_sync_group=0, num_replicas_in_sync=1):
    self.replica_id_in_sync_group = replica_id_in_sync_group
    self.num_replicas_in_sync = num_replicas_in_sync

  def __repr__(self):
    return f"ValueContext(replica_id_in_sync_group={self.replica_id_in_sync_group}, " \
           f"num_replicas_in_sync={self.num_replicas_in_sync})"


# --- Replica context -----------------------------------------------------------


# Per thread: the structure each (strategy, replica, collective) last passed
# the check with (ReplicaContext._check_same_structure).
_checked_structures = threading.local()


class ReplicaContext:
  """What a replica function knows about its replica (TF's
  tf.distribute.ReplicaContext); get it with get_replica_context()."""

  def __init__(self, replica_id, num_replicas, strategy_id):
    self._replica_id, self._num_replicas, self._strategy_id = replica_id, num_replicas, strategy_id

  @property
  def replica_id_in_sync_group(self):
    return self._replica_id

  @property
  def num_replicas_in_sync(self):
    return self._num_replicas

  @property
  def strategy(self):
    return _strategies.get(self._strategy_id) or _default_strategy()

  def all_reduce(self, reduce_op, value, options=None):
    """SUM or MEAN of ``value`` (a tensor, array or nested structure of
    them) over the replicas; every replica gets the result."""
    # (The op by a dict lookup when it is a usual one: this is the hot path
    # of a training loop, and every replica's Python runs in turn under
    # the GIL.)
    op = _OP_VALUES.get(reduce_op) if type(reduce_op) in (str, ReduceOp) else None
    if op is None:
      op = ReduceOp.of(reduce_op).value
    timeout = None if options is None else getattr(options, "timeout_seconds", None)
    if type(value) is np.ndarray:  # one array: wrapped in C++ (a few microseconds less per call)
      result = _core.all_reduce_array(op, value, timeout)
      if result is not None:
        return result
    self._check_same_structure(value, "all_reduce", timeout)
    leaves = _nest.flatten(value)
    tensors = [convert(v) for v in leaves]
    return _nest.pack_as(value, _core.all_reduce(op, tensors, timeout))

  def _check_same_structure(self, value, what, timeout):
    """InvalidArgumentError on every replica unless all passed the same
    nested structure (lengths, keys, kinds): one small all_gather of a
    checksum of its description (bounded by the call's timeout), for
    structured values only, as the C++ API's structure overloads. A replica
    that passes the structure it passed last time, checked then, skips it:
    a loop pays it once. A replica that changes its structure alone makes
    the check's all_gather where the others make the collective itself,
    which the collective names as different calls; a bare array or tensor
    against a structure likewise."""
    if self._num_replicas == 1 or not _nest.is_structure(value):
      return
    description = _nest.describe(value)
    checked = _checked_structures.__dict__.setdefault("by_call", {})
    key = (self._strategy_id, self._replica_id, what)
    if checked.get(key) == description:
      return
    import zlib
    mine = np.array([zlib.crc32(description.encode())], np.int64)
    everyone = np.asarray(_core.all_gather([_core.wrap(mine)], 0, timeout)[0])
    others = [r for r, h in enumerate(everyone.tolist()) if h != everyone[0]]
    if others:
      checked.pop(key, None)
      raise InvalidArgumentError(
          f"ReplicaContext.{what}: expected every replica to pass replica 0's nested structure, got a different one "
          f"from replica(s) {others} (replica {self._replica_id}'s: {description}, '.' for a tensor)")
    checked[key] = description

  def all_reduce_in_place(self, reduce_op, value, options=None):
    """all_reduce that writes the sums into the given arrays themselves
    (writable numpy arrays or CPU torch tensors of a supported dtype).
    C-contiguous ones of at least 64 KiB on every replica of one worker are
    reduced in place; so is a single array of a worker with one local
    replica across workers (without any copy between the processes of a
    host when every worker passes its block from
    ``experimental_allocate_shared``);
    the others (smaller, strided, several across workers) get the result
    copied into them. Returns ``value``."""
    import numpy as np
    from ._tensor import dlpack_array
    op = ReduceOp.of(reduce_op).value
    leaves = _nest.flatten(value)
    arrays = [dlpack_array(v) if hasattr(v, "__dlpack__") and not isinstance(v, np.ndarray) else v
              for v in leaves]
    for a in arrays:
      if not isinstance(a, np.ndarray) or not a.flags.writeable:
        raise InvalidArgumentError(f"all_reduce_in_place: expected writable arrays or tensors, got "
                                   f"{type(a).__name__}")
    timeout = getattr(options, "timeout_seconds", None)
    self._check_same_structure(value, "all_reduce_in_place", timeout)
    if self._num_replicas == 1:
      # The sum over one replica is its value; only the dtype is checked,
      # as every other case does.
      for a in arrays:
        if a.dtype not in _NUMPY_DTYPES:
          convert(a)  # raises the InvalidArgumentError naming the supported dtypes
      return value
    # The whole call in C++ with the GIL released: wrap, reduce (donated),
    # then the barrier and the copies of what was not reduced in place.
    # Strided, misaligned or non-native-order arrays go through a
    # contiguous native copy each (staged: the same mechanism, then copied
    # back).
    staged = [a if a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative else
              np.array(a, dtype=a.dtype.newbyteorder("="), order="C", copy=True) for a in arrays]
    _core.all_reduce_into(op, staged, timeout)
    for a, b in zip(arrays, staged):
      if b is not a:
        np.copyto(a, b)
    return value

  def all_gather(self, value, axis, options=None):
    timeout = getattr(options, "timeout_seconds", None)
    self._check_same_structure(value, "all_gather", timeout)
    leaves = _nest.flatten(value)
    return _nest.pack_as(value, _core.all_gather([convert(v) for v in leaves], int(axis), timeout))

  def merge_call(self, merge_fn, args=(), kwargs=None):
    """merge_fn(strategy, *args, **kwargs) runs once, in cross-replica
    context, with each argument a PerReplica of every replica's (the same
    object from every replica as it is); each replica gets its own part of
    the result, as TF's select_replica: a PerReplica's or Mirrored's value
    of this replica, anything else (a variable, a plain value) as is."""
    kwargs = {} if kwargs is None else kwargs
    strategy = self.strategy

    def leader(all_arguments):
      regrouped = _regroup(all_arguments, strategy._core.id)
      a, k = regrouped if regrouped is not None else ((), {})
      result = merge_fn(strategy, *a, **k)
      # (Raised here, once, it reaches every replica.)
      strategy._check_values(result, "ReplicaContext.merge_call's result")
      return result

    result = _core.merge_call(leader, (tuple(args), dict(kwargs)))
    # (Distributed values hold this worker's replicas: the local index.)
    return _select(result, self._replica_id % strategy._core.num_local_replicas)

  def __repr__(self):
    return f"ReplicaContext(replica {self._replica_id} of {self._num_replicas})"


# ReduceOp values by their usual spellings (ReplicaContext.all_reduce's fast
# path; anything else goes through ReduceOp.of and its error).
_OP_VALUES = {ReduceOp.SUM: "SUM", ReduceOp.MEAN: "MEAN", "sum": "SUM", "mean": "MEAN", "SUM": "SUM", "MEAN": "MEAN"}


def get_replica_context():
  """The current replica context: the running replica's inside run, the
  default one outside any scope, None in cross-replica context."""
  context = _core.replica_context()
  if context is None:
    return None
  return ReplicaContext(*context)


def in_cross_replica_context():
  return _core.in_cross_replica_context()


def get_strategy():
  """The current strategy: the one whose scope or replica function this
  thread is in, else the default strategy."""
  return _strategies.get(_core.current_strategy_id()) or _default_strategy()


def has_strategy():
  return _core.current_strategy_id() != _core.default_strategy_id()


# --- Distributed input ---------------------------------------------------------


class DistributedDataset:
  """A dataset split across replicas: iterate it (each step a structure of
  PerReplica) or fold it with reduce."""

  def __init__(self, strategy, core, structure):
    self._strategy, self._core, self._structure = strategy, core, structure

  def __iter__(self):
    return DistributedIterator(self._strategy, _track(self._core.make_iterator()), self._structure)

  def reduce(self, initial_state, reduce_func):
    """reduce_func(state, step) over every step, from initial_state (as
    TF's, through get_next_as_optional: a last step the data cannot fill
    is included, its missing replicas' batches empty)."""
    state = initial_state
    iterator = iter(self)
    while True:
      step = iterator.get_next_as_optional()
      if not step.has_value():
        return state
      state = reduce_func(state, step.get_value())

  @property
  def num_replicas_in_sync(self):
    return self._strategy.num_replicas_in_sync

  @property
  def cardinality(self):
    """TF's DistributedDataset.cardinality (a property, unlike Dataset's
    method): the number of global batches of the distributed dataset, or
    of this worker's dataset from distribute_datasets_from_function;
    data.INFINITE_CARDINALITY or data.UNKNOWN_CARDINALITY as
    Dataset.cardinality()."""
    from .data import _Cardinality
    return _Cardinality(self._core.cardinality())

  @property
  def element_spec(self):
    """TF's element_spec of a distributed dataset: for several local
    replicas, or several workers, a PerReplicaSpec per component holding
    one replica's spec (its leading dimension per replica: None unless
    every replica's batch has a fixed size; across workers None unless the
    input is infinite)."""
    from .data import _specs
    core = self._strategy._core
    return _specs(self._core.element_spec(), self._structure.template, core.num_local_replicas,
                  always_wrap=core.num_workers > 1)


class DistributedIterator:
  def __init__(self, strategy, core, structure):
    self._strategy, self._core, self._structure = strategy, core, structure

  def __iter__(self):
    return self

  def _step(self, padded_last_step=False):
    # TF's get_next (and `for`) end at a last step the data cannot fill
    # where TF makes no partial steps; get_next_as_optional gives it
    # (DistributedIterator::get_next in C++).
    step = self._core.get_next_as_optional() if padded_last_step else self._core.next_in_loop()
    if step is None:
      return None
    per_replica = [_pack(self._structure.template, components) for components in step]
    # Across workers every step is a PerReplica, also of one local replica
    # (TF's _always_wrap in multi-worker mode).
    return (_regroup(per_replica, self._strategy._core.id, always_wrap=self._strategy._core.num_workers > 1),)

  def __next__(self):
    step = self._step()
    if step is None:
      raise StopIteration
    return step[0]

  def get_next(self):
    step = self._step()
    if step is None:
      raise OutOfRangeError("End of sequence")
    return step[0]

  def get_next_as_optional(self):
    step = self._step(padded_last_step=True)
    return Optional() if step is None else Optional(step[0], True)
