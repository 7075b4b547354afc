"""tf.data's Dataset over the C++ input pipeline.

Elements are nested structures (tuples, dicts) of tensors; Python lists are
converted to tensors, as tf.data does. Transformations run in the C++
pipeline; map and filter functions are called from its threads under the
GIL."""

import atexit
import enum
import os
import threading
import types
import weakref

from . import _core, _nest
from ._tensor import convert
from .errors import InvalidArgumentError, OutOfRangeError, UnimplementedError
from .values import Optional

AUTOTUNE = -1
# What Dataset.cardinality() returns for an endless dataset and for one whose
# length depends on its data (tf.data.INFINITE_CARDINALITY, UNKNOWN_CARDINALITY).
INFINITE_CARDINALITY = -1
UNKNOWN_CARDINALITY = -2

# Every live iterator of the C++ pipeline (Dataset's and DistributedDataset's):
# closed at exit, before the interpreter finalizes, so that no pipeline
# thread is left calling a Python map function then.
_live_iterators = weakref.WeakSet()


def _track(core_iterator):
  _live_iterators.add(core_iterator)
  return core_iterator


@atexit.register
def _close_live_iterators():
  for it in list(_live_iterators):
    it.close()


_UNSET = object()


class _Structure:
  """An element's structure: known at once for sources, after the first
  call of the function for map (the function decides). A template of None
  is a single-tensor element."""

  def __init__(self, template=_UNSET):
    self._template = template
    self._lock = threading.Lock()

  @property
  def template(self):
    return self._template

  def settle(self, template, what):
    with self._lock:
      if self._template is _UNSET:
        self._template = template
        return
    _nest.assert_same_structure(self._template, template, lists=False, a_name=f"{what}'s first",
                                b_name="this")


class _Derived(_Structure):
  """A structure made of other datasets' structures (zip, enumerate): known
  once theirs are."""

  def __init__(self, make, parts):
    super().__init__()
    self._make, self._parts = make, parts

  @property
  def template(self):
    if self._template is _UNSET:
      templates = [p.template for p in self._parts]
      if any(t is _UNSET for t in templates):
        return _UNSET
      self._template = self._make(templates)
    return self._template


class _Returned(_Structure):
  """The structure of the datasets a function returns (flat_map,
  interleave): that of the first one, which every other must share."""

  def __init__(self):
    super().__init__()
    self._first = None

  def adopt(self, structure, what):
    with self._lock:
      if self._first is None:
        self._first = structure
        return
    first, this = self._first.template, structure.template
    if first is not _UNSET and this is not _UNSET:
      _nest.assert_same_structure(first, this, lists=False, a_name=f"{what}'s first dataset", b_name="this one")

  @property
  def template(self):
    return _UNSET if self._first is None else self._first.template


def _call_with_element(fn, element):
  """fn(element), a tuple element's components as arguments (as tf.data)."""
  if isinstance(element, tuple) and not hasattr(element, "_fields"):
    return fn(*element)
  return fn(element)


class TensorSpec:
  """TF's tf.TensorSpec: a component's shape (None for a dimension not known
  before iterating) and dtype name."""

  def __init__(self, shape, dtype="float32", name=None):
    self.shape = tuple(None if d is None or d < 0 else int(d) for d in shape)
    self.dtype = dtype
    self.name = name

  def __eq__(self, other):
    return isinstance(other, TensorSpec) and (self.shape, self.dtype, self.name) == (other.shape, other.dtype,
                                                                                      other.name)

  def __hash__(self):
    return hash((self.shape, self.dtype, self.name))

  def __repr__(self):
    return f"TensorSpec(shape={self.shape!r}, dtype=tf.{self.dtype}, name={self.name!r})"


class PerReplicaSpec:
  """The spec of a PerReplica value: one spec per replica (what a
  distributed dataset's element_spec holds for each component)."""

  def __init__(self, *value_specs):
    self._value_specs = tuple(value_specs)

  def __eq__(self, other):
    return isinstance(other, PerReplicaSpec) and self._value_specs == other._value_specs

  def __hash__(self):
    return hash(self._value_specs)

  def __repr__(self):
    return f"PerReplicaSpec({', '.join(repr(v) for v in self._value_specs)})"


def _specs(core_spec, template, replicas=1, always_wrap=False):
  components, _ = core_spec
  specs = [TensorSpec(shape, dtype) for dtype, shape in components]
  if replicas > 1 or always_wrap:
    specs = [PerReplicaSpec(*([spec] * replicas)) for spec in specs]
  return _pack(template, specs)


class AutoShardPolicy(enum.IntEnum):
  """TF's tf.data.experimental.AutoShardPolicy (HINT is not supported)."""
  OFF = -1
  AUTO = 0
  FILE = 1
  DATA = 2
  HINT = 3


class DistributeOptions:
  """TF's tf.data.experimental.DistributeOptions: auto_shard_policy."""

  def __init__(self):
    self._auto_shard_policy = None

  @property
  def auto_shard_policy(self):
    return AutoShardPolicy.AUTO if self._auto_shard_policy is None else self._auto_shard_policy

  @auto_shard_policy.setter
  def auto_shard_policy(self, policy):
    try:
      policy = AutoShardPolicy[policy] if isinstance(policy, str) else AutoShardPolicy(policy)
    except (KeyError, ValueError):
      raise InvalidArgumentError(f"Options.experimental_distribute.auto_shard_policy: expected an AutoShardPolicy "
                                 f"(OFF, AUTO, FILE, DATA), got {policy!r}") from None
    if policy == AutoShardPolicy.HINT:
      raise UnimplementedError("AutoShardPolicy.HINT is not supported: use FILE, DATA, AUTO or OFF")
    self._auto_shard_policy = policy


class Options:
  """TF's tf.data.Options, the part this library reads:
  experimental_distribute.auto_shard_policy, which
  experimental_distribute_dataset follows (an InputOptions policy other
  than AUTO overrides it for one call)."""

  def __init__(self):
    self.experimental_distribute = DistributeOptions()

  def merge(self, options):
    """These options with ``options``' set fields overriding them (TF's merge)."""
    out = Options()
    out.experimental_distribute._auto_shard_policy = self.experimental_distribute._auto_shard_policy
    if options.experimental_distribute._auto_shard_policy is not None:
      out.experimental_distribute._auto_shard_policy = options.experimental_distribute._auto_shard_policy
    return out

  def __repr__(self):
    return f"Options(experimental_distribute.auto_shard_policy={self.experimental_distribute.auto_shard_policy!r})"


def _shape_list(shape, what):
  """A padded shape: an int (a vector's length), or a list of ints or None
  (-1: the batch's largest)."""
  if hasattr(shape, "as_list"):
    shape = shape.as_list()
  if isinstance(shape, int) and not isinstance(shape, bool):
    return [shape]
  if isinstance(shape, list) and all(d is None or (isinstance(d, int) and not isinstance(d, bool)) for d in shape):
    return [-1 if d is None else d for d in shape]
  raise InvalidArgumentError(f"{what}: expected a padded shape as an int or a list of ints and None, got {shape!r}")


def _flat(value, what):
  """The structure's template (leaves: None) and its tensors."""
  leaves = _nest.flatten(value, lists=False)
  if not leaves:
    raise InvalidArgumentError(f"{what}: expected at least one tensor in the element, got {value!r}")
  tensors = []
  for leaf in leaves:
    try:
      tensors.append(convert(leaf))
    except InvalidArgumentError as e:
      raise InvalidArgumentError(f"{what}: an element component is not a supported tensor: {e}") from None
  template = _nest.pack_as(value, [None] * len(leaves), lists=False)
  return template, tensors


def _pack(template, components):
  if template is None:
    return components[0]
  return _nest.pack_as(template, list(components), lists=False)


class _Cardinality(int):
  """Dataset.cardinality()'s result: an int with TF's .numpy()."""

  def numpy(self):
    import numpy as np
    return np.int64(self)



def _padding_value(v):
  """A padded_batch padding value as a number: the empty string (or bytes),
  a string component's only padding, is 0 to the core; anything else must be
  a real number."""
  if isinstance(v, (str, bytes)) and len(v) == 0:
    return 0.0
  try:
    return float(v)
  except (TypeError, ValueError):
    from .errors import InvalidArgumentError
    raise InvalidArgumentError(f"Dataset.padded_batch: expected a number for each padding value (or the empty string "
                               f"for a string component), got {v!r}") from None


class Dataset:
  """A tf.data-style pipeline. Build it with from_tensor_slices,
  from_tensors or range, then chain transformations; iterate it with for."""

  def __init__(self, core, structure):
    self._core = core
    self._structure = structure

  # --- sources ---
  @staticmethod
  def from_tensor_slices(tensors):
    """One element per row of ``tensors`` (a tensor/array/list, or a tuple or
    dict of them with equal first dimensions)."""
    template, flat = _flat(tensors, "Dataset.from_tensor_slices")
    is_tuple = template is not None
    return Dataset(_core.Dataset.from_tensor_slices(flat, is_tuple), _Structure(template))

  @staticmethod
  def from_tensors(tensors):
    """One element: ``tensors`` itself."""
    template, flat = _flat(tensors, "Dataset.from_tensors")
    return Dataset(_core.Dataset.from_tensors(flat, template is not None), _Structure(template))

  @staticmethod
  def range(*args):
    """range(stop), range(start, stop[, step]) as int64 scalars."""
    if not 1 <= len(args) <= 3:
      raise InvalidArgumentError(f"Dataset.range: expected 1 to 3 arguments, got {len(args)}")
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
    return Dataset(_core.Dataset.range(int(start), int(stop), int(step)), _Structure(None))

  # (Sources share the caller's arrays without copying them: do not write
  # an array while a dataset made from it is in use.)

  # --- transformations ---
  def _derive(self, core, structure=None):
    return Dataset(core, structure or self._structure)

  def batch(self, batch_size, drop_remainder=False):
    return self._derive(self._core.batch(int(batch_size), bool(drop_remainder)))

  def unbatch(self):
    return self._derive(self._core.unbatch())

  def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True):
    # TF's seeds are int64: a negative one is as good as any (taken modulo
    # 2**64 here, for the core's unsigned seed).
    if seed is not None:
      if not -2**63 <= int(seed) < 2**64:
        raise InvalidArgumentError(f"shuffle: expected a seed within int64 (or uint64), got {seed}")
      seed = int(seed) % 2**64
    return self._derive(self._core.shuffle(int(buffer_size), seed, bool(reshuffle_each_iteration)))

  def repeat(self, count=None):
    return self._derive(self._core.repeat(-1 if count is None else int(count)))

  def take(self, count):
    return self._derive(self._core.take(int(count)))

  def skip(self, count):
    return self._derive(self._core.skip(int(count)))

  def shard(self, num_shards, index):
    return self._derive(self._core.shard(int(num_shards), int(index)))

  def prefetch(self, buffer_size):
    return self._derive(self._core.prefetch(int(buffer_size)))

  @staticmethod
  def zip(*args, datasets=None, name=None):
    """Elements of several datasets side by side, as a nested structure
    like the one given (``zip(a, b)``, ``zip((a, b))``, ``zip({"x": a,
    "y": b})``); ends with the shortest."""
    if datasets is None:
      if not args:
        raise InvalidArgumentError("Dataset.zip: expected datasets, got none")
      datasets = args[0] if len(args) == 1 else args
    elif args:
      raise InvalidArgumentError("Dataset.zip: expected datasets either as arguments or as datasets=, not both")
    leaves = _nest.flatten(datasets, lists=False)
    if not leaves or not all(isinstance(d, Dataset) for d in leaves):
      raise InvalidArgumentError(f"Dataset.zip: expected a (nested) structure of distribute.data.Datasets, got "
                                 f"{datasets!r}")
    outer = _nest.pack_as(datasets, [None] * len(leaves), lists=False) if _nest.is_structure(datasets, False) \
        else (None,)
    structure = _Derived(lambda templates: _nest.pack_as(outer, templates, lists=False),
                         [d._structure for d in leaves])
    return Dataset(_core.Dataset.zip([d._core for d in leaves]), structure)

  def enumerate(self, start=0, name=None):
    """(index, element) pairs, the index an int64 counting from ``start``."""
    structure = _Derived(lambda templates: (None, templates[0]), [self._structure])
    return Dataset(self._core.enumerate(int(start)), structure)

  def padded_batch(self, batch_size, padded_shapes=None, padding_values=None, drop_remainder=False, name=None):
    """batch() padding every component to ``padded_shapes`` (structured like
    the element; None or an unknown dimension: the batch's largest) with
    ``padding_values`` (structured like the element, or one scalar for all;
    default 0)."""
    shapes = [] if padded_shapes is None else \
        [_shape_list(s, "Dataset.padded_batch") for s in _nest.flatten(padded_shapes, lists=False)]
    values = [] if padding_values is None else \
        [_padding_value(v) for v in _nest.flatten(padding_values, lists=False)]
    return self._derive(self._core.padded_batch(int(batch_size), shapes, values, bool(drop_remainder)))

  def flat_map(self, map_func, name=None):
    """The elements of map_func(element), one dataset after the other."""
    out = _Returned()
    return self._derive(self._core.flat_map(self._dataset_function(map_func, "Dataset.flat_map", out)), out)

  def interleave(self, map_func, cycle_length=None, block_length=None, num_parallel_calls=None, deterministic=None,
                 name=None):
    """TF's interleave: cycle_length datasets map_func(element) open at once,
    block_length elements from each in turn; the order is always TF's
    deterministic one (``deterministic=False`` is accepted and changes
    nothing)."""
    cycle = AUTOTUNE if cycle_length is None else int(cycle_length)
    block = 1 if block_length is None else int(block_length)
    parallel = 1 if num_parallel_calls is None else int(num_parallel_calls)
    out = _Returned()
    core = self._core.interleave(self._dataset_function(map_func, "Dataset.interleave", out), cycle, block, parallel)
    return self._derive(core, out)

  def _dataset_function(self, fn, what, out):
    source = self._structure

    def call(components):
      result = _call_with_element(fn, _pack(source.template, components))
      if not isinstance(result, Dataset):
        raise InvalidArgumentError(f"{what}: expected the function to return a distribute.data.Dataset, got "
                                   f"{type(result).__name__}")
      out.adopt(result._structure, "the function")
      return result._core

    return call

  def cache(self, filename="", name=None):
    """Keeps the first complete iteration's elements in memory; later
    iterations read them from there."""
    if filename:
      raise UnimplementedError(f"Dataset.cache: caching to a file ({filename!r}) is not supported; cache() keeps "
                               f"the elements in memory")
    return self._derive(self._core.cache())

  def with_options(self, options, name=None):
    """The same elements with ``options`` (a distribute.data.Options)."""
    if not isinstance(options, Options):
      raise InvalidArgumentError(f"Dataset.with_options: expected a distribute.data.Options, got "
                                 f"{type(options).__name__}")
    policy = options.experimental_distribute._auto_shard_policy
    return self._derive(self._core.with_options(None if policy is None else policy.name))

  def options(self):
    """The pipeline's options (its with_options calls merged)."""
    out = Options()
    policy = self._core.auto_shard_policy()
    if policy is not None:
      out.experimental_distribute.auto_shard_policy = policy
    return out

  @property
  def element_spec(self):
    """The structure of TensorSpecs of an element (TF's element_spec); after
    a map, sizes are None and the first element is computed to learn the
    structure, dtypes and ranks (on a private copy of the pipeline)."""
    core_spec = self._core.element_spec()
    return _specs(core_spec, self._structure.template)

  def map(self, map_func, num_parallel_calls=None):
    """map_func(element) (a tuple element's components as arguments, as
    tf.data does) -> the new element, called on the pipeline's threads."""
    source = self._structure
    out = _Structure()

    def call(components):
      element = _pack(source.template, components)
      result = _call_with_element(map_func, element)
      template, flat = _flat(result, "Dataset.map")
      out.settle(template, "the map function")
      return flat, template is not None

    parallel = 1 if num_parallel_calls is None else int(num_parallel_calls)
    return self._derive(self._core.map(call, parallel), out)

  def filter(self, predicate):
    source = self._structure

    def call(components):
      return bool(_call_with_element(predicate, _pack(source.template, components)))

    return self._derive(self._core.filter(call))

  # --- iteration ---
  def __iter__(self):
    return _DatasetIterator(_track(self._core.make_iterator()), self._structure)

  def reduce(self, initial_state, reduce_func):
    state = initial_state
    for element in self:
      state = reduce_func(state, element)
    return state

  def cardinality(self):
    """The number of elements, when known without iterating (TF's
    Dataset.cardinality()): INFINITE_CARDINALITY for a repeat() without a
    count, UNKNOWN_CARDINALITY when it depends on the data (filter,
    from_generator, unbatch, ...). An int that also has TF's .numpy(), so
    that both `ds.cardinality() == INFINITE_CARDINALITY` and
    `ds.cardinality().numpy()` work as in TF."""
    return _Cardinality(self._core.cardinality())

  def __repr__(self):
    return f"<Dataset {self._core.describe()}>"


def _filenames(filenames, what):
  """TF's `filenames`: a path (str, bytes or os.PathLike), a list of them,
  or a Dataset of string scalars (read here, once)."""
  if isinstance(filenames, Dataset):
    filenames = [e.numpy() for e in filenames]
  if isinstance(filenames, (str, bytes, os.PathLike)):
    filenames = [filenames]
  try:
    names = [os.fsdecode(f) for f in filenames]
  except TypeError:
    raise InvalidArgumentError(f"{what}: expected a file name, a list of them or a dataset of them, "
                               f"got {type(filenames).__name__}") from None
  return names


def _reader_args(compression_type, buffer_size, num_parallel_reads):
  return ("" if compression_type is None else str(compression_type), 0 if buffer_size is None else int(buffer_size),
          0 if num_parallel_reads is None else int(num_parallel_reads))


def TextLineDataset(filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None):  # noqa: N802
  """TF's tf.data.TextLineDataset: the lines of the files as string scalars
  (without '\n', every '\r' dropped). num_parallel_reads=N interleaves N
  files one line at a time, as TF. compression_type None (or ""), "ZLIB"
  or "GZIP"; a multi-worker strategy shards it by files."""
  del name
  return Dataset(_core.Dataset.text_line(_filenames(filenames, "TextLineDataset"),
                                         *_reader_args(compression_type, buffer_size, num_parallel_reads)),
                 _Structure(None))


def TFRecordDataset(filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None):  # noqa: N802
  """TF's tf.data.TFRecordDataset: the records of TFRecord files as string
  scalars, every record's checksums checked (DataLossError naming the file
  and offset otherwise). Arguments as TextLineDataset."""
  del name
  return Dataset(_core.Dataset.tfrecord(_filenames(filenames, "TFRecordDataset"),
                                        *_reader_args(compression_type, buffer_size, num_parallel_reads)),
                 _Structure(None))


class _DatasetIterator:
  def __init__(self, core, structure):
    self._core, self._structure = core, structure

  def __iter__(self):
    return self

  def __next__(self):
    components = self._core.get_next_as_optional()
    if components is None:
      raise StopIteration
    return _pack(self._structure.template, components)

  def get_next(self):
    try:
      return next(self)
    except StopIteration:
      raise OutOfRangeError("End of sequence") from None

  def get_next_as_optional(self):
    components = self._core.get_next_as_optional()
    if components is None:
      return Optional()
    return Optional(_pack(self._structure.template, components), True)


experimental = types.SimpleNamespace(AutoShardPolicy=AutoShardPolicy, DistributeOptions=DistributeOptions)
