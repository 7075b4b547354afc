"""TF API pieces a ported training loop reaches for (issue 16): distribute.nn (tf.nn's
loss scaling) and experimental_distribute_values_from_function, with TF's expected values
(tensorflow/python/ops/nn_loss_scaling_utilities_test.py)."""
import numpy as np
import pytest

import distribute as dist
from distribute.compat import tf


def total(strategy, fn, *args, **kwargs):
  return float(np.asarray(strategy.reduce("sum", strategy.run(fn, args=args, kwargs=kwargs), axis=None)))


def test_global_batch_size_given():
  assert float(np.asarray(tf.nn.compute_average_loss([1, 2, 3, 4, 5], global_batch_size=10))) == 1.5


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_replicas_add_up_to_the_global_mean(replicas):
  s = dist.MirroredStrategy([f"CPU:{i}" for i in range(replicas)])
  losses = np.array([2.5, 6.2, 5.0], np.float32)
  assert total(s, dist.nn.compute_average_loss, losses) == pytest.approx((2.5 + 6.2 + 5.0) / 3, rel=1e-6)
  assert total(s, dist.nn.scale_regularization_loss, losses) == pytest.approx(2.5 + 6.2 + 5.0, rel=1e-6)
  assert total(s, dist.nn.compute_average_loss, [2.0, 4.0, 6.0], sample_weight=2) == pytest.approx(8.0)
  assert total(s, dist.nn.compute_average_loss, [2.0, 4.0, 6.0],
               sample_weight=[0.3, 0.5, 0.2]) == pytest.approx((2 * 0.3 + 4 * 0.5 + 6 * 0.2) / 3)
  assert total(s, dist.nn.compute_average_loss, [[2.0, 0.5], [4.0, 1.0]],
               sample_weight=[[0.3, 0.7], [0.2, 0.8]]) == pytest.approx((2 * 0.3 + 0.5 * 0.7 + 4 * 0.2 + 0.8) / 2)
  out = s.reduce("sum", s.run(dist.nn.compute_average_loss, args=(np.array([2.0, 4.0, 6.0]),)), axis=None)
  assert out.dtype == "float64"


def test_errors_name_the_problem():
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  with s.scope():
    with pytest.raises(dist.errors.FailedPreconditionError, match="called in cross-replica context"):
      dist.nn.compute_average_loss([2.0, 3.0])
    with pytest.raises(dist.errors.FailedPreconditionError, match="called in cross-replica context"):
      dist.nn.scale_regularization_loss([2.0, 3.0])
  with pytest.raises(dist.errors.InvalidArgumentError, match=r"sample_weight of shape \(2,\) does not broadcast"):
    dist.nn.compute_average_loss([2.5, 6.2, 5.0], sample_weight=[0.2, 0.8], global_batch_size=10)
  with pytest.raises(dist.errors.InvalidArgumentError, match="rank >= 1"):
    dist.nn.compute_average_loss(2.0)
  with pytest.raises(dist.errors.InvalidArgumentError, match="expected an integer global_batch_size, got 2.5"):
    dist.nn.compute_average_loss([1.0], global_batch_size=2.5)
  with pytest.raises(dist.errors.InvalidArgumentError, match="expected an integer global_batch_size, got 1180591620717411303424"):
    dist.nn.compute_average_loss([1.0], global_batch_size=2**70)
  with pytest.raises(dist.errors.InvalidArgumentError, match="expected global_batch_size >= 0, got -1"):
    dist.nn.compute_average_loss([1.0], global_batch_size=-1)


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_values_from_function_reach_their_replicas(replicas):
  s = tf.distribute.MirroredStrategy([f"CPU:{i}" for i in range(replicas)])
  contexts = []

  def value_fn(ctx):
    contexts.append((ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync))
    return {"x": np.array([ctx.replica_id_in_sync_group], np.float32), "n": ctx.replica_id_in_sync_group * 10}

  values = s.experimental_distribute_values_from_function(value_fn)
  assert contexts == [(r, replicas) for r in range(replicas)]
  assert isinstance(values["x"], dist.PerReplica) and len(values["x"].values) == replicas  # also for 1 replica
  seen = s.run(lambda v: float(np.asarray(v["x"])[0]) == dist.get_replica_context().replica_id_in_sync_group
               and v["n"] == 10 * dist.get_replica_context().replica_id_in_sync_group, args=(values,))
  assert all(s.experimental_local_results(seen))
  assert isinstance(tf.distribute.experimental.ValueContext(), dist.ValueContext)


def test_dataset_cardinality_as_tf_documents_it():
  from distribute.compat import tf
  dataset = tf.data.Dataset.range(42)
  assert dataset.cardinality().numpy() == 42
  dataset = dataset.repeat()
  assert dataset.cardinality() == tf.data.INFINITE_CARDINALITY
  dataset = dataset.filter(lambda x: True)
  assert dataset.cardinality() == tf.data.UNKNOWN_CARDINALITY
  assert tf.data.Dataset.from_tensor_slices(np.zeros((7, 2), np.float32)).batch(3).cardinality() == 3
  assert tf.data.Dataset.range(10).batch(3, drop_remainder=True).cardinality() == 3
