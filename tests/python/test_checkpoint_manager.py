"""tf.train.CheckpointManager and the Checkpoint pieces it needs (issue 16, item 7):
numbering, max_to_keep, checkpoint_interval with step_counter (TF's
checkpoint_management_test.py testCheckpointInterval), restore_or_initialize, write
and restore with expect_partial."""
import os

import numpy as np
import pytest

import distribute as dist
from distribute.compat import tf


def files(directory):
  return sorted(os.listdir(directory))


def test_numbers_and_keeps_the_newest(tmp_path):
  step = tf.Variable(np.int64(0))
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path / "run"), max_to_keep=2)
  assert manager.latest_checkpoint is None
  for i in range(1, 4):
    step.assign(np.int64(i))
    assert manager.save() == str(tmp_path / "run" / f"ckpt-{i}.dckpt")
  assert files(tmp_path / "run") == ["ckpt-2.dckpt", "ckpt-3.dckpt"]
  assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-2.dckpt", "ckpt-3.dckpt"]
  assert manager.save(checkpoint_number=10) == str(tmp_path / "run" / "ckpt-10.dckpt")
  with pytest.raises(dist.InvalidArgumentError, match="below the latest"):
    manager.save(checkpoint_number=4)
  assert manager.directory == str(tmp_path / "run")


def test_checkpoint_interval_as_tf(tmp_path):
  step = tf.Variable(np.int64(0))
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path), max_to_keep=None,
                                       step_counter=step, checkpoint_interval=2)
  assert manager.checkpoint_interval == 2
  assert manager.save() is not None
  step.assign_add(np.int64(1))
  assert manager.save() is None
  step.assign_add(np.int64(1))
  assert manager.save() is not None
  assert manager.save() is None
  step.assign_add(np.int64(1))
  assert manager.save() is None
  assert manager.save(check_interval=False) is not None
  with pytest.raises(dist.InvalidArgumentError, match="needs a step_counter"):
    tf.train.CheckpointManager(tf.train.Checkpoint(step=step), str(tmp_path), max_to_keep=1, checkpoint_interval=3)


def test_restore_or_initialize(tmp_path):
  calls = []
  weights = tf.Variable(np.array([1., 2.], np.float32))
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(weights=weights), str(tmp_path), max_to_keep=3,
                                       init_fn=lambda: calls.append("init"))
  assert manager.restore_or_initialize() is None
  assert calls == ["init"]
  manager.save()
  weights.assign(np.array([0., 0.], np.float32))
  assert manager.restore_or_initialize() == str(tmp_path / "ckpt-1.dckpt")
  assert np.asarray(weights.value()).tolist() == [1., 2.]
  assert calls == ["init"]


def test_write_and_partial_restore(tmp_path):
  step = tf.Variable(np.int64(7))
  weights = tf.Variable(np.array([1., 2.], np.float32))
  path = tf.train.Checkpoint(step=step, weights=weights).write(str(tmp_path / "exact.dckpt"))
  assert path == str(tmp_path / "exact.dckpt")
  only = tf.Variable(np.int64(0))
  partial = tf.train.Checkpoint(step=only)
  with pytest.raises(dist.InvalidArgumentError, match="expect_partial"):
    partial.restore(path)
  assert int(np.asarray(only.value())) == 0
  status = partial.restore(path, expect_partial=True).expect_partial()
  assert int(np.asarray(only.value())) == 7
  with pytest.raises(AssertionError, match="expect_partial"):
    status.assert_consumed()
  tf.train.Checkpoint(step=step, weights=weights).restore(path).assert_consumed()
