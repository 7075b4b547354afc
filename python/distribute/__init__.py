"""distribute: TensorFlow's tf.distribute programming model on a native C++ core.

    import distribute as dist
    strategy = dist.MirroredStrategy(["CPU:0", "CPU:1"])
    dataset = dist.data.Dataset.from_tensor_slices([5., 6., 7., 8.]).batch(2)
    for batch in strategy.experimental_distribute_dataset(dataset):
      out = strategy.run(lambda x: x + 1.0, args=(batch,))
      print(strategy.reduce("sum", out, axis=0))

Replica functions run on the library's replica threads (each waiting call
releases the GIL); values are the core's immutable tensors, shared with
numpy without copies (``np.asarray(t)`` is a read-only view), and numpy
arrays, buffers and ``__dlpack__`` tensors (torch) passed in are wrapped
without copies. ``distribute.compat.tf`` offers the names TF programs use.
"""

from . import _core
from . import errors
from . import data
from . import io
from . import nn
from . import experimental
from ._tensor import Tensor, convert as convert_to_tensor
from .values import DistributedValues, Mirrored, Optional, PerReplica, ReduceOp
from .strategy import (DistributedDataset, DistributedIterator, InputOptions, MirroredStrategy, MultiWorkerMirroredStrategy,
                       OneDeviceStrategy, ReplicaContext, Strategy, ValueContext, get_replica_context, get_strategy,
                       has_strategy, in_cross_replica_context)
from .variables import Checkpoint, CheckpointManager, Variable, VariableAggregation, VariableSynchronization, latest_checkpoint
from .errors import (Error, CancelledError, InvalidArgumentError, DeadlineExceededError, FailedPreconditionError,
                     OutOfRangeError, UnavailableError, UnimplementedError, InternalError, DataLossError)

InputContext = _core.InputContext

_core._set_error_classes(dict(errors.BY_CODE))


def usable_cpu_count():
  """CPUs this process may use (affinity mask, CPU quota): MirroredStrategy()'s default replica count."""
  return _core.usable_cpu_count()


__all__ = [
    "Tensor", "convert_to_tensor", "DistributedValues", "PerReplica", "Mirrored", "Optional", "ReduceOp",
    "Strategy", "ValueContext", "MirroredStrategy", "OneDeviceStrategy", "MultiWorkerMirroredStrategy", "ReplicaContext",
    "DistributedDataset", "DistributedIterator", "InputContext", "InputOptions", "get_replica_context", "get_strategy",
    "has_strategy", "in_cross_replica_context", "data", "errors", "io", "nn", "usable_cpu_count", "Variable",
    "VariableAggregation", "VariableSynchronization", "Checkpoint", "CheckpointManager", "latest_checkpoint",
]
