"""tf.data's Dataset over the C++ input pipeline.

Elements are nested structures (tuples, dicts) of tensors; Python lists are
converted to tensors, as tf.data does. Transformations run in the C++
pipeline; map and filter functions are called from its threads under the
GIL."""

import atexit
import threading
import weakref

from . import _core, _nest
from ._tensor import convert
from .errors import InvalidArgumentError, OutOfRangeError
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

  def map(self, map_func, num_parallel_calls=None):
    """map_func(element) (a tuple element's components as arguments, as
    tf.data does) -> the new element, called on the pipeline's threads."""
    source = self._structure
    out = _Structure()

    def call(components):
      element = _pack(source.template, components)
      result = map_func(*element) if isinstance(element, tuple) and not hasattr(element, "_fields") \
          else map_func(element)
      template, flat = _flat(result, "Dataset.map")
      out.settle(template, "the map function")
      return flat, template is not None

    parallel = 1 if num_parallel_calls is None else int(num_parallel_calls)
    return self._derive(self._core.map(call, parallel), out)

  def filter(self, predicate):
    source = self._structure

    def call(components):
      element = _pack(source.template, components)
      keep = predicate(*element) if isinstance(element, tuple) and not hasattr(element, "_fields") \
          else predicate(element)
      return bool(keep)

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
