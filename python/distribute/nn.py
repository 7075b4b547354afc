"""Loss scaling for custom training loops (TF's tf.nn.compute_average_loss and
tf.nn.scale_regularization_loss): each replica divides by the global batch,
so that the sum of the replicas' gradients is the gradient of the mean."""

from . import _core
from ._tensor import convert


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None):
  """The sum of ``per_example_loss`` (rank >= 1, times ``sample_weight``,
  which broadcasts to it) divided by ``global_batch_size``; 0 when that is 0.
  Without ``global_batch_size``: this replica's batch times
  num_replicas_in_sync (in a replica context, or with no strategy)."""
  weight = None if sample_weight is None else convert(sample_weight)
  batch = None if global_batch_size is None else _batch_size(global_batch_size)
  return _core.compute_average_loss(convert(per_example_loss), weight, batch)


def scale_regularization_loss(regularization_loss):
  """The sum of ``regularization_loss`` divided by num_replicas_in_sync."""
  return _core.scale_regularization_loss(convert(regularization_loss))


def _batch_size(value):
  import numbers
  import numpy as np
  from .errors import InvalidArgumentError
  if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)) or \
      not -2**63 <= int(value) < 2**63:
    raise InvalidArgumentError(f"compute_average_loss: expected an integer global_batch_size, got {value!r}")
  return int(value)
