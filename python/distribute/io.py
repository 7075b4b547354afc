"""TF's tf.io parsing of tf.train.Example records (the records of a
TFRecordDataset), on the C++ core's parse_example.

    spec = {"x": dist.io.FixedLenFeature([2], "float32"),
            "label": dist.io.FixedLenFeature([], "int64", default_value=-1)}
    ds = dist.data.TFRecordDataset(files).batch(32).map(lambda r: dist.io.parse_example(r, spec))
"""

import collections

from . import _core
from ._tensor import convert, dtype_name
from .errors import InvalidArgumentError


class FixedLenFeature(collections.namedtuple("FixedLenFeature", ["shape", "dtype", "default_value"])):
  """TF's tf.io.FixedLenFeature: every example has prod(shape) values of
  dtype int64, float32 or string (a BytesList); default_value (prod(shape)
  values, any shape) fills in for an example without the feature, which is
  otherwise an error."""

  def __new__(cls, shape, dtype, default_value=None):
    return super().__new__(cls, shape, dtype, default_value)


def _spec(features):
  if not isinstance(features, dict):
    raise InvalidArgumentError(f"parse_example: expected a dict of FixedLenFeature, got {type(features).__name__}")
  spec = []
  for name, feature in features.items():
    if not isinstance(feature, FixedLenFeature):
      raise InvalidArgumentError(f"parse_example: feature {name!r}: expected a FixedLenFeature (the only kind "
                                 f"supported), got {type(feature).__name__}")
    dtype = dtype_name(feature.dtype)
    shape = [] if feature.shape is None else [int(d) for d in feature.shape]
    default = None if feature.default_value is None else convert(feature.default_value, dtype)
    spec.append((str(name), shape, dtype, default))
  return spec


def parse_example(serialized, features, example_names=None, name=None):
  """TF's tf.io.parse_example: ``serialized`` (a string vector of B
  serialized tf.train.Example, or one string) into a dict of one tensor per
  feature, of shape [B] + feature.shape. InvalidArgumentError names the
  example and the feature for a missing, mistyped or miscounted one."""
  del example_names, name
  return _core.parse_example(convert(serialized, "string"), _spec(features))


def parse_single_example(serialized, features, example_names=None, name=None):
  """TF's tf.io.parse_single_example: one serialized Example (a string scalar)."""
  del example_names, name
  serialized = convert(serialized, "string")
  if serialized.shape != ():
    raise InvalidArgumentError(f"parse_single_example: expected one serialized record (a string scalar), got shape "
                               f"{serialized.shape}")
  return _core.parse_example(serialized, _spec(features))
