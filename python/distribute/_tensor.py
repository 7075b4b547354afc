"""Tensors: the C++ core's immutable tensors, shared with numpy without
copies, and the conversion of Python values into them."""

import operator

import numpy as np

from . import _core
from .errors import InvalidArgumentError

Tensor = _core.Tensor

SUPPORTED = ("float32", "float64", "int32", "int64", "string")
_NUMPY_DTYPES = {np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.int64)}

# How tensors print: the library's own form, or TF's (distribute.compat.tf
# switches to it).
_style = {"tf": False}


def convert(value, dtype=None):
  """A Tensor for ``value``: a Tensor as is; a C-contiguous numpy array (or
  any buffer or ``__dlpack__`` object, e.g. a torch tensor) of a supported
  dtype wrapped without a copy; a non-contiguous or non-native-byte-order
  array copied once; Python numbers and lists as TF converts them (float ->
  float32, int -> int32). ``str`` and ``bytes`` (and lists or numpy arrays
  of them) become string tensors (a copy; str as UTF-8), as tf.constant.

  A wrapped array is shared, not copied: it must not be written while the
  tensor (or a dataset, a result made from it) is in use. Tensors
  themselves cannot be written: np.asarray(t) and np.from_dlpack(t) are
  read-only views; torch.from_dlpack(t) shares the buffer too, and must not
  be written (DLPack 0.6 has no read-only flag)."""
  if isinstance(value, Tensor):
    if dtype is not None and value.dtype != dtype_name(dtype):
      if value.dtype == "string" or dtype_name(dtype) == "string":
        raise InvalidArgumentError(f"cannot convert a tensor of dtype {value.dtype} to {dtype_name(dtype)}")
      return convert(_checked_cast(np.asarray(value), dtype))
    return value
  strings = _strings_of(value)
  if strings is not None or (dtype is not None and dtype_name(dtype) == "string"):
    if strings is None:
      raise InvalidArgumentError(f"expected str or bytes values for dtype string, got {type(value).__name__}")
    if dtype is not None and dtype_name(dtype) != "string":
      raise InvalidArgumentError(f"cannot convert text {value!r:.60} to a tensor of dtype {dtype_name(dtype)}")
    return _core.strings(*strings)
  array = _as_array(value, wide=dtype is not None)
  if dtype is not None and array.dtype != np.dtype(dtype):
    array = _checked_cast(array, dtype)
  if array.dtype.byteorder not in ("=", "|") and array.dtype.newbyteorder("=") in _NUMPY_DTYPES:
    array = array.astype(array.dtype.newbyteorder("="))  # one copy into native byte order
  if array.dtype not in _NUMPY_DTYPES:
    raise InvalidArgumentError(
        f"expected a value of one of the supported dtypes ({', '.join(SUPPORTED)}), got dtype {array.dtype}")
  if not array.flags.c_contiguous:
    array = np.ascontiguousarray(array)  # the one copy, for strided input
  elif not array.flags.aligned:
    array = np.array(array, copy=True)  # the one copy, for misaligned input
  return _core.wrap(array)


def _checked_cast(array, dtype):
  """``array`` as ``dtype``, refusing a conversion that changes a value
  where TF's does: to an integer dtype, every value must be a whole number
  within its range (1.5 or 2**31 to int32 raise). Conversions to a float
  dtype round as TF's do."""
  target = np.dtype(dtype)
  if target not in _NUMPY_DTYPES:
    raise InvalidArgumentError(
        f"expected a dtype of the supported ones ({', '.join(SUPPORTED)}), got {target}")
  with np.errstate(invalid="ignore", over="ignore"):
    cast = array.astype(target)
    changed = np.zeros(array.shape, bool) if target.kind == "f" else cast.astype(array.dtype) != array
    if target.kind in "iu" and array.dtype.kind in "iu":
      # (A round trip does not see uint64 2**64-1 wrap to int64 -1 and back.)
      info = np.iinfo(target)
      changed |= (array < 0) if info.min == 0 else False
      changed |= (array > info.max) if array.dtype.kind == "u" or np.iinfo(array.dtype).max > info.max else False
  if np.any(changed):
    bad = array.reshape(-1)[np.flatnonzero(np.reshape(changed, -1))[0]]
    raise InvalidArgumentError(f"expected values representable as {target}, got {bad!r} (of dtype {array.dtype})")
  return cast


def dtype_name(dtype):
  """The library's name of a dtype given as TF or numpy spell it: "float32",
  np.float32, tf.int64, ...; "string", str, bytes or tf.string for strings."""
  if dtype in ("string", str, bytes, np.bytes_, np.str_):
    return "string"
  try:
    return np.dtype(dtype).name
  except TypeError:
    raise InvalidArgumentError(
        f"expected a dtype of the supported ones ({', '.join(SUPPORTED)}), got {dtype!r}") from None


def _utf8(x):
  return x.encode("utf-8") if isinstance(x, str) else bytes(x)


def _strings_of(value):
  """(list of bytes, shape) when ``value`` is text: str/bytes, a numpy array
  of dtype S, U or object holding them, or a (nested, rectangular) list of
  them; else None."""
  if isinstance(value, (str, bytes, np.bytes_, np.str_)):
    return [_utf8(value)], []
  if isinstance(value, np.ndarray):
    array = value
  elif isinstance(value, (list, tuple)):
    leaf = value
    while isinstance(leaf, (list, tuple)) and len(leaf) > 0:
      leaf = leaf[0]
    if not isinstance(leaf, (str, bytes)):
      return None
    array = np.empty(0, dtype=object)
    try:
      array = np.array(value, dtype=object)
    except ValueError as e:
      raise InvalidArgumentError(f"expected a rectangular (non-ragged) list of strings, got {value!r:.80}: {e}") \
          from None
  else:
    return None
  if array.dtype.kind not in "SUO":
    return None
  flat = array.reshape(-1).tolist()
  if array.dtype.kind == "O" and not all(isinstance(x, (str, bytes)) for x in flat):
    if isinstance(value, np.ndarray):
      return None
    raise InvalidArgumentError(f"expected a rectangular (non-ragged) list of strings, got {value!r:.80}")
  return [_utf8(x) for x in flat], list(array.shape)


def _as_array(value, wide=False):
  """``value`` as a numpy array, Python numbers and lists at TF's default
  dtypes (float32, int32 when it fits); ``wide``: at float64 and int64, for
  a conversion to a requested dtype that must not round twice."""
  if isinstance(value, np.ndarray):
    return value
  if hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)):
    return dlpack_array(value)
  if isinstance(value, (bool, np.bool_)):
    raise InvalidArgumentError(f"expected a value of one of the supported dtypes ({', '.join(SUPPORTED)}), "
                               f"got a bool")
  if isinstance(value, float):
    return np.asarray(value, dtype=np.float64 if wide else np.float32)
  if isinstance(value, int):
    if not -2**63 <= value < 2**63:
      raise InvalidArgumentError(f"expected an integer within int64's range, got {value}")
    if wide:
      return np.asarray(value, dtype=np.int64)
    return np.asarray(value, dtype=np.int32 if -2**31 <= value < 2**31 else np.int64)
  if isinstance(value, np.generic):
    return np.asarray(value)
  if isinstance(value, (list, tuple)):
    try:
      array = np.asarray(value)
    except ValueError as e:
      raise InvalidArgumentError(f"expected a rectangular (non-ragged) list of numbers, got {value!r:.80}: {e}") \
          from None
    if array.dtype == object:
      raise InvalidArgumentError(f"expected a rectangular (non-ragged) list of numbers, got {value!r:.80}")
    if wide:
      return array
    if array.dtype == np.float64:
      return array.astype(np.float32)
    if array.dtype == np.int64 and (array.size == 0 or (array.min() >= -2**31 and array.max() < 2**31)):
      return array.astype(np.int32)
    return array
  try:
    return np.asarray(memoryview(value))
  except (TypeError, ValueError):
    raise InvalidArgumentError(
        f"expected a tensor, a numpy array, a buffer, a __dlpack__ tensor or a number, got {type(value).__name__}") \
        from None


def dlpack_array(value):
  """A numpy view of a ``__dlpack__`` object's memory (no copy): a torch
  tensor's own writable view (numpy 1.24's from_dlpack is read-only), else
  numpy's from_dlpack."""
  if hasattr(value, "detach") and hasattr(value, "numpy"):
    try:
      return value.detach().numpy()
    except (TypeError, RuntimeError) as e:
      raise InvalidArgumentError(
          f"expected a CPU torch tensor of one of the supported dtypes (float32, float64, int32, int64), got "
          f"{getattr(value, 'dtype', '?')} on {getattr(value, 'device', '?')}: {e}") from None
  try:
    return np.from_dlpack(value)
  except (TypeError, RuntimeError, BufferError) as e:
    raise InvalidArgumentError(f"expected a CPU tensor with __dlpack__, got {type(value).__name__}: {e}") from None


def numpy(t):
  """A read-only numpy view of the tensor's buffer (no copy); for a string
  tensor a numpy array of bytes objects (dtype object, a copy)."""
  if t.dtype == "string":
    values = t._strings()  # one conversion of every element to bytes
    array = np.empty(len(values), dtype=object)
    array[:] = values
    array = array.reshape(t.shape)
    array.flags.writeable = False
    return array
  return np.asarray(memoryview(t))


def _numpy_method(t):
  """Tensor.numpy(): as numpy(), but a string scalar gives its bytes (as TF)."""
  if t.dtype == "string" and t.shape == ():
    return t._strings()[0]
  return numpy(t)


def _repr(t):
  if _style["tf"]:
    a = numpy(t)
    shown = repr(a[()]) if a.ndim == 0 else repr(a)
    return f"<tf.Tensor: shape={t.shape}, dtype={t.dtype}, numpy={shown}>"
  return t._to_string()


def _str(t):
  # TF's str() of an eager tensor: "tf.Tensor([5.], shape=(1,), dtype=float32)".
  return "tf." + t._to_string() if _style["tf"] else t._to_string()


def _numbers(t, what):
  """numpy(t) of a number tensor; InvalidArgumentError for a string one (as the C++ core)."""
  if t.dtype == "string":
    raise InvalidArgumentError(f"{what}: expected a tensor of a number dtype, got dtype string")
  return numpy(t)


def _getitem(t, key):
  if t.dtype != "string":
    return convert(np.asarray(numpy(t)[key]))
  # Bytes objects straight to the core: numpy's S dtype would drop trailing NUL bytes.
  item = numpy(t)[key]
  if isinstance(item, bytes):
    return _core.strings([item], [])
  return _core.strings(item.reshape(-1).tolist(), list(item.shape))


# What arithmetic and comparisons take besides a tensor.
_OPERANDS = (Tensor, np.ndarray, int, float, np.generic)


def _binary(op, reflected=False):
  def method(self, other):
    if not isinstance(other, _OPERANDS):
      return NotImplemented
    _numbers(self, "arithmetic")
    if isinstance(other, Tensor):
      _numbers(other, "arithmetic")
    a = numpy(self)
    if isinstance(other, Tensor):
      b = numpy(other)
    elif isinstance(other, (int, float)):
      # A Python number takes the tensor's dtype, as TF converts it (numpy
      # would widen a 0-d float32 times 0.5 to float64); 1.5 with an
      # integer tensor raises.
      b = _checked_cast(np.asarray(other, dtype=np.float64 if isinstance(other, float) else None), a.dtype)
    else:
      b = other
    result = op(b, a) if reflected else op(a, b)
    return convert(np.asarray(result))
  return method


def _compare(op):
  """Elementwise comparison with a tensor, a number or an array, as TF's
  eager tensors (``==`` and ``!=`` too): a numpy bool array (np.bool_ for
  scalars, the library has no bool tensors), so that ``if t > 0``, ``if
  replica_id == 0`` and ``np.mean(pred == labels)`` work as in TF. (Whole
  equality of two tensors: np.array_equal(a, b).)"""
  # (== and != also compare string tensors, element by element.)
  values = numpy if op in (operator.eq, operator.ne) else (lambda t: _numbers(t, "comparison"))

  def method(self, other):
    if not isinstance(other, _OPERANDS):
      return NotImplemented
    return op(values(self), values(other) if isinstance(other, Tensor) else other)
  return method


def _bool(self):
  # As TF's eager tensors: the truth of a one-element tensor; numpy raises
  # ValueError for more elements.
  return bool(_numbers(self, "bool()"))


def _index(self):
  a = _numbers(self, "index")
  if a.ndim != 0 or a.dtype.kind != "i":
    raise TypeError(f"only an integer scalar tensor can be an index, got shape {self.shape} dtype {self.dtype}")
  return int(a)


def _iter(self):
  if len(self.shape) == 0:
    raise TypeError("iteration over a scalar (0-d) tensor")
  for i in range(self.shape[0]):
    yield _getitem(self, i)


def _install():
  Tensor.numpy = _numpy_method
  Tensor.__array__ = lambda self, dtype=None: numpy(self) if dtype is None else numpy(self).astype(dtype)
  Tensor.__repr__ = _repr
  Tensor.__str__ = _str
  for name, op in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("floordiv", operator.floordiv), ("pow", operator.pow),
                   ("matmul", operator.matmul)):
    setattr(Tensor, f"__{name}__", _binary(op))
    setattr(Tensor, f"__r{name}__", _binary(op, reflected=True))
  Tensor.__neg__ = lambda self: convert(-_numbers(self, "negation"))
  Tensor.__len__ = lambda self: len(numpy(self))
  Tensor.__getitem__ = _getitem
  Tensor.__float__ = lambda self: float(_numbers(self, "float()"))
  Tensor.__int__ = lambda self: int(_numbers(self, "int()"))
  Tensor.__index__ = _index
  Tensor.__bool__ = _bool
  Tensor.__iter__ = _iter
  Tensor.ndim = property(lambda self: len(self.shape))
  for name, op in (("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt), ("le", operator.le),
                   ("gt", operator.gt), ("ge", operator.ge)):
    setattr(Tensor, f"__{name}__", _compare(op))
  Tensor.__hash__ = None


_install()
