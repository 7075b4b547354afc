"""strategy.extended (TF's StrategyExtended, issue 16 item 4): the optimizer step TF's
OptimizerV2 makes (merge_call -> batch_reduce_to(SUM) -> update per variable), update's
per-component context, reduce_to's rules, and the informational pieces."""
import numpy as np
import pytest

import distribute as dist
from distribute.compat import tf


def two():
  return dist.MirroredStrategy(["CPU:0", "CPU:1"])


def test_an_optimizer_step_through_merge_call():
  s = two()
  with s.scope():
    w = tf.Variable(np.array([1., 2.], np.float32), name="w")
    b = tf.Variable(np.float32(0.5), name="b")

  def apply(strategy, grads_and_vars):
    ext = strategy.extended
    reduced = ext.batch_reduce_to(tf.distribute.ReduceOp.SUM, grads_and_vars)
    for g, (_, v) in zip(reduced, grads_and_vars):
      ext.update(v, lambda var, grad: var.assign_sub(grad * np.float32(0.1)), args=(g,))

  def step():
    r = np.float32(tf.distribute.get_replica_context().replica_id_in_sync_group)
    grads = (np.array([r + 1, 10 * (r + 1)], np.float32), np.float32(r))
    tf.distribute.get_replica_context().merge_call(apply, args=(list(zip(grads, (w, b))),))

  s.run(step)
  for c in s.experimental_local_results(w):
    assert np.allclose(np.asarray(c), [0.7, -1.0])
  for c in s.experimental_local_results(b):
    assert np.isclose(float(np.asarray(c)), 0.4)


def test_update_is_per_component_and_returns_a_mirrored():
  s = dist.MirroredStrategy(["CPU:0", "CPU:1", "CPU:2"])
  with s.scope():
    counts = tf.Variable(np.float32(0), synchronization=tf.VariableSynchronization.ON_READ,
                         aggregation=tf.VariableAggregation.SUM)

  def seen_then_add(var, add):
    before = float(np.asarray(var.value()))
    var.assign_add(add)
    return before

  out = s.extended.update(counts, seen_then_add, args=(dist.PerReplica([np.float32(1), np.float32(2), np.float32(3)]),))
  assert isinstance(out, dist.Mirrored)
  assert out.values == (0.0, 0.0, 0.0) or list(out.values) == [0.0, 0.0, 0.0]
  assert [float(np.asarray(c)) for c in s.experimental_local_results(counts)] == [1., 2., 3.]
  assert float(np.asarray(counts.value())) == 6.0
  assert s.extended.update(counts, lambda var: 1, group=False) == (1, 1, 1)


def test_reduce_to_and_errors():
  s = two()
  with s.scope():
    v = tf.Variable(np.float64(0))
  ext = s.extended
  out = ext.reduce_to("mean", dist.PerReplica([np.float64(1), np.float64(3)]), v)
  assert [float(np.asarray(x)) for x in out.values] == [2.0, 2.0]
  assert [float(np.asarray(x)) for x in ext.reduce_to("mean", np.float64(4), v).values] == [4.0, 4.0]
  with pytest.raises(dist.InvalidArgumentError):
    ext.reduce_to("sum", np.float64(4), v)
  with pytest.raises(dist.InvalidArgumentError, match="distribute.Variable"):
    ext.reduce_to("sum", dist.PerReplica([np.float64(1), np.float64(3)]), "CPU:0")
  with pytest.raises(dist.FailedPreconditionError, match="merge_call"):
    s.run(lambda: ext.update(v, lambda var: var.assign(np.float64(1))))
  other = two()
  with other.scope():
    theirs = tf.Variable(np.float64(0))
  with pytest.raises(dist.InvalidArgumentError, match="belongs to"):
    ext.update(theirs, lambda var: None)


def test_informational_pieces():
  s = two()
  with s.scope():
    mine = tf.Variable(np.float32(0))
  plain = tf.Variable(np.float32(0))
  assert s.extended.variable_created_in_scope(mine)
  assert not s.extended.variable_created_in_scope(plain)
  assert s.extended.worker_devices == ("/job:localhost/replica:0/task:0/device:CPU:0",
                                       "/job:localhost/replica:0/task:0/device:CPU:1")
  assert s.extended.should_checkpoint and s.extended.should_save_summary
