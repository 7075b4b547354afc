"""distribute.experimental.PreemptionCheckpointHandler from Python: a
termination notice (a watcher function or a real SIGTERM) saves a checkpoint
at that call and calls the exit function (sys.exit(42) by default); a new
handler restores it and the run ends as an uninterrupted one. Two workers
under mpirun: test_multi_worker.py."""
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest

import distribute as dist
from distribute import errors
from distribute.experimental import PreemptionCheckpointHandler, TerminationConfig

STEPS = 9


class Stopped(Exception):
  pass


def training(directory, config):
  """The natural loop on 2 replicas under a handler: returns (weights,
  the handler's count at start), or None when the exit function stopped it."""
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  data = dist.data.Dataset.from_tensor_slices(np.arange(40, dtype=np.float32)).shuffle(20, seed=3).batch(4).repeat()
  with s.scope():
    w = dist.Variable(np.float32(0), name="w")
    it = iter(s.experimental_distribute_dataset(data))
    ckpt = dist.Checkpoint(w=w, iterator=it)
    handler = PreemptionCheckpointHandler(ckpt, directory, config)
  start = handler.total_run_calls

  def step():
    batch = next(it)
    total = s.reduce("sum", s.run(lambda x: np.float32(np.asarray(x).sum()), args=(batch,)), axis=None)
    with s.scope():
      w.assign(np.float32(np.asarray(w.value()) * np.float32(0.5) + np.asarray(total)))

  try:
    for _ in range(handler.total_run_calls, STEPS):
      handler.run(step)
  except Stopped:
    return None
  finally:
    handler.close()
  return float(np.asarray(w.value())), start


def test_a_notice_saves_at_that_call_and_the_rerun_ends_as_an_uninterrupted_run(tmp_path):
  never = TerminationConfig(termination_watcher_fn=lambda: False)
  expected, _ = training(tmp_path / "reference", never)
  calls = []

  def stop():
    raise Stopped()

  config = TerminationConfig(termination_watcher_fn=lambda: calls.append(1) or len(calls) == 4, exit_fn=stop)
  assert training(tmp_path / "run", config) is None
  assert len(calls) == 4
  got, start = training(tmp_path / "run", never)
  assert start == 4  # the count saved with the checkpoint of call 4
  assert got == expected  # bitwise: the same float


def test_a_real_sigterm_is_noticed_after_the_step(tmp_path):
  exits = []
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  with s.scope():
    w = dist.Variable(np.float32(1), name="w")
    handler = PreemptionCheckpointHandler(dist.Checkpoint(w=w), tmp_path, TerminationConfig(exit_fn=lambda: exits.append(1)))
  try:
    handler.run(lambda: None)
    assert dist.latest_checkpoint(tmp_path) is None
    handler.run(lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert exits == [1]
    assert dist.latest_checkpoint(tmp_path) is not None
    handler.run(lambda: None)  # the exit function returned: no second save
    assert exits == [1]
    assert handler.total_run_calls == 3
  finally:
    handler.close()
  assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_the_default_exit_is_status_42_after_the_save(tmp_path):
  script = f"""
import os, signal, numpy as np, distribute as dist
from distribute.experimental import PreemptionCheckpointHandler
s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
with s.scope():
  w = dist.Variable(np.float32(5), name="w")
  handler = PreemptionCheckpointHandler(dist.Checkpoint(w=w), {str(tmp_path)!r})
os.kill(os.getpid(), signal.SIGTERM)
handler.run(lambda: None)
print("not reached")
"""
  done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                        env=dict(os.environ))
  assert done.returncode == 42, done.stdout + done.stderr
  assert "not reached" not in done.stdout
  assert dist.latest_checkpoint(tmp_path) is not None


def test_bad_use_raises_naming_the_problem(tmp_path):
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  with s.scope():
    w = dist.Variable(np.float32(1), name="w")
    runs = dist.Variable(np.int64(0), name="runs")
    with pytest.raises(errors.InvalidArgumentError, match="already tracks 'checkpointed_runs'"):
      PreemptionCheckpointHandler(dist.Checkpoint(checkpointed_runs=runs), tmp_path)
    with pytest.raises(errors.InvalidArgumentError, match="expected a checkpoint directory"):
      PreemptionCheckpointHandler(dist.Checkpoint(w=w), "")
    first = PreemptionCheckpointHandler(dist.Checkpoint(w=w), tmp_path / "a")
    try:
      other = dist.Checkpoint(w=w)
      with pytest.raises(errors.FailedPreconditionError, match="another handler already watches SIGTERM"):
        PreemptionCheckpointHandler(other, tmp_path / "b")
      assert [name for name, _ in other._tracked] == ["w"]
    finally:
      first.close()
  handler = PreemptionCheckpointHandler(dist.Checkpoint(w=w), tmp_path / "c",
                                        TerminationConfig(termination_watcher_fn=lambda: False))
  with pytest.raises(errors.FailedPreconditionError, match="inside a replica function"):
    s.run(lambda: handler.save_checkpoint_if_preempted())


def test_tf_compat_names_it():
  from distribute.compat import tf
  assert tf.distribute.experimental.PreemptionCheckpointHandler is PreemptionCheckpointHandler
  assert tf.distribute.experimental.TerminationConfig is TerminationConfig
