"""Distributed values: one value per local replica (TF's values.py)."""

import enum


class ReduceOp(enum.Enum):
  """How reduce and all_reduce combine values: SUM or MEAN."""
  SUM = "SUM"
  MEAN = "MEAN"

  @staticmethod
  def of(op):
    """A ReduceOp from a ReduceOp or the strings "sum"/"mean" (any case)."""
    if isinstance(op, ReduceOp):
      return op
    if isinstance(op, str):
      found = _BY_NAME.get(op.upper())
      if found is not None:
        return found
    from .errors import InvalidArgumentError
    raise InvalidArgumentError(f"expected ReduceOp.SUM, ReduceOp.MEAN, \"sum\" or \"mean\", got {op!r}")


_BY_NAME = {"SUM": ReduceOp.SUM, "MEAN": ReduceOp.MEAN}


class DistributedValues:
  """Values of the local replicas, in replica order. ``_origin`` is the id of
  the strategy that produced them (0: built by hand, accepted by any
  strategy with as many replicas)."""
  _kind = "DistributedValues"

  def __init__(self, values, _origin=0):
    values = tuple(values)
    if not values:
      from .errors import InvalidArgumentError
      raise InvalidArgumentError(f"{self._kind}: expected one value per replica (at least one), got none")
    self._values = values
    self._origin = _origin

  @property
  def values(self):
    return self._values

  def __len__(self):
    return len(self._values)

  def __getitem__(self, i):
    return self._values[i]

  def __iter__(self):
    return iter(self._values)

  def __repr__(self):
    items = ",\n".join(f"  {i}: {v!r}" for i, v in enumerate(self._values))
    return f"{self._kind}:{{\n{items}\n}}"

  __str__ = __repr__


class PerReplica(DistributedValues):
  """Unsynchronized values, e.g. a replica's slice of a batch, or what run returns."""
  _kind = "PerReplica"


class Mirrored(DistributedValues):
  """Values known to be identical on every replica."""
  _kind = "Mirrored"


class Optional:
  """What DistributedIterator.get_next_as_optional returns (TF's tf.experimental.Optional)."""

  def __init__(self, value=None, has_value=False):
    self._value, self._has_value = value, has_value

  def has_value(self):
    return self._has_value

  def get_value(self):
    if not self._has_value:
      from .errors import InvalidArgumentError
      raise InvalidArgumentError("Optional.get_value: the optional has no value (the iterator reached its end)")
    return self._value

  def __repr__(self):
    return f"Optional({self._value!r})" if self._has_value else "Optional(None)"
