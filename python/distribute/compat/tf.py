"""The names of TF's API that tf.distribute programs use, over distribute.

    from distribute.compat import tf
    strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])

Importing this module makes tensors print as TF's
(``<tf.Tensor: shape=(1,), dtype=float32, numpy=array([5.], dtype=float32)>``),
for the whole process, and under it ``replica_id_in_sync_group`` is an int32
scalar tensor, as in TF. ``tf.function`` is a pass-through decorator (there
is no graph: functions run as Python).
"""

import types as _types

import numpy as _np

import distribute as _dist
from distribute import _tensor

_tensor._style["tf"] = True


def function(func=None, **_options):
  """tf.function: returns the function unchanged (called with or without options)."""
  if func is None:
    return lambda f: f
  return func


def constant(value, dtype=None):
  return _tensor.convert(value, dtype)


convert_to_tensor = constant
Tensor = _dist.Tensor
float32, float64, int32, int64 = _np.float32, _np.float64, _np.int32, _np.int64
string = "string"  # tf.string: byte-string tensors


class _TFReplicaContext(_dist.ReplicaContext):
  @property
  def replica_id_in_sync_group(self):
    return _tensor.convert(_np.asarray(self._replica_id, dtype=_np.int32))


def _get_replica_context():
  context = _dist.get_replica_context()
  if context is None:
    return None
  tf_context = _TFReplicaContext.__new__(_TFReplicaContext)
  tf_context.__dict__.update(context.__dict__)
  return tf_context


distribute = _types.SimpleNamespace(
    MirroredStrategy=_dist.MirroredStrategy,
    OneDeviceStrategy=_dist.OneDeviceStrategy,
    MultiWorkerMirroredStrategy=_dist.MultiWorkerMirroredStrategy,
    Strategy=_dist.Strategy,
    ReduceOp=_dist.ReduceOp,
    InputContext=_dist.InputContext,
    InputOptions=_dist.InputOptions,
    get_replica_context=_get_replica_context,
    get_strategy=_dist.get_strategy,
    has_strategy=_dist.has_strategy,
    in_cross_replica_context=_dist.in_cross_replica_context,
    DistributedValues=_dist.DistributedValues,
    experimental=_types.SimpleNamespace(ValueContext=_dist.ValueContext,
                                        PreemptionCheckpointHandler=_dist.experimental.PreemptionCheckpointHandler,
                                        TerminationConfig=_dist.experimental.TerminationConfig,
                                        CommunicationOptions=_dist.experimental.CommunicationOptions,
                                        CommunicationImplementation=_dist.experimental.CommunicationImplementation),
)
data = _types.SimpleNamespace(Dataset=_dist.data.Dataset, AUTOTUNE=_dist.data.AUTOTUNE,
                              INFINITE_CARDINALITY=_dist.data.INFINITE_CARDINALITY,
                              UNKNOWN_CARDINALITY=_dist.data.UNKNOWN_CARDINALITY, Options=_dist.data.Options,
                              TextLineDataset=_dist.data.TextLineDataset, TFRecordDataset=_dist.data.TFRecordDataset,
                              experimental=_dist.data.experimental)
TensorSpec = _dist.data.TensorSpec
errors = _dist.errors
Variable = _dist.Variable
VariableAggregation = _dist.VariableAggregation
VariableSynchronization = _dist.VariableSynchronization
train = _types.SimpleNamespace(Checkpoint=_dist.Checkpoint, CheckpointManager=_dist.CheckpointManager,
                               latest_checkpoint=_dist.latest_checkpoint)
io = _types.SimpleNamespace(parse_example=_dist.io.parse_example, parse_single_example=_dist.io.parse_single_example,
                            FixedLenFeature=_dist.io.FixedLenFeature)
nn = _types.SimpleNamespace(compute_average_loss=_dist.nn.compute_average_loss,
                            scale_regularization_loss=_dist.nn.scale_regularization_loss)
