"""Variables under a strategy's scope and checkpoints, from Python."""
import os
import time

import numpy as np
import pytest

import distribute as dist
from distribute import errors


def test_a_mirrored_variable_aggregates_replica_updates():
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  with s.scope():
    v = dist.Variable(np.zeros(2, np.float32), name="w", aggregation="sum")
  assert v._core.is_mirrored

  def step():
    r = dist.get_replica_context().replica_id_in_sync_group
    v.assign_add(np.array([r + 1.0, 1.0], np.float32))

  s.run(step)
  for component in v.values:
    np.testing.assert_array_equal(np.asarray(component), [3., 2.])


def test_a_sync_on_read_variable_sums_when_read():
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  with s.scope():
    seen = dist.Variable(np.float32(0), synchronization=dist.VariableSynchronization.ON_READ,
                         aggregation=dist.VariableAggregation.SUM)
  s.run(lambda: seen.assign_add(np.float32(1)))
  with s.scope():
    assert float(np.asarray(seen.value())) == 2.0


def test_an_ordinary_variable_updated_by_replicas_names_the_fix():
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  counter = dist.Variable(np.float32(0), name="counter")
  with pytest.raises(errors.FailedPreconditionError, match="strategy.scope"):
    s.run(lambda: counter.assign_add(np.float32(1)))
  assert float(counter.numpy()) == 0.0


def _two_replica_checkpoint():
  """A MirroredStrategy of 2, a mirrored [1, 2] variable "w" and a
  Checkpoint tracking it."""
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  with s.scope():
    w = dist.Variable(np.array([1., 2.], np.float32), name="w")
  ckpt = dist.Checkpoint(w=w)
  return s, w, ckpt


def test_checkpoint_paths_may_be_bytes_or_path_like(tmp_path):
  # A bytes path names the same file as its str spelling (not the text
  # "b'...'"), in save, restore, latest_checkpoint and CheckpointManager.
  s, w, ckpt = _two_replica_checkpoint()
  as_bytes = os.fsencode(tmp_path)
  path = ckpt.save(as_bytes)
  assert path == str(tmp_path / "ckpt-1.dckpt")
  assert dist.latest_checkpoint(as_bytes) == path
  assert dist.latest_checkpoint(tmp_path, strategy=s) == path  # one worker: its own listing
  with pytest.raises(TypeError):  # TF's second argument is latest_filename: not taken for a strategy
    dist.latest_checkpoint(tmp_path, s)
  with s.scope():
    w.assign(np.array([9., 9.], np.float32))
  ckpt.restore(os.fsencode(path))
  np.testing.assert_array_equal(np.asarray(w.values[1]), [1., 2.])
  manager = dist.CheckpointManager(ckpt, as_bytes + b"/managed", max_to_keep=1)
  assert manager.save() == str(tmp_path / "managed" / "ckpt-1.dckpt")
  assert sorted(os.listdir(tmp_path)) == ["ckpt-1.dckpt", "managed"]  # (before the odd name below)
  with pytest.raises(errors.InvalidArgumentError, match=r"Checkpoint.save: expected a path .* got int"):
    ckpt.save(3)
  # A name that is not UTF-8 round-trips (os.fsdecode's surrogate escapes).
  odd = os.fsencode(tmp_path) + b"/caf\xe9"
  os.mkdir(odd)
  odd_path = ckpt.save(odd)
  assert os.fsencode(odd_path) == odd + b"/ckpt-1.dckpt"
  assert dist.latest_checkpoint(odd) == odd_path
  ckpt.restore(odd_path)
  odd_manager = dist.CheckpointManager(ckpt, odd + b"/m", max_to_keep=2)
  assert os.fsencode(odd_manager.save()) == odd + b"/m/ckpt-1.dckpt"
  assert odd_manager.checkpoints == [odd_manager.latest_checkpoint]
  assert os.fsencode(odd_manager.directory) == odd + b"/m"
  # A directory that cannot be listed raises; a missing one is no checkpoint.
  with pytest.raises(errors.FailedPreconditionError, match="cannot list the directory"):
    dist.latest_checkpoint(path)
  assert dist.latest_checkpoint(tmp_path / "missing") is None


def test_checkpoint_round_trip_and_bad_files(tmp_path):
  s, w, ckpt = _two_replica_checkpoint()
  path = ckpt.save(tmp_path)
  assert dist.latest_checkpoint(tmp_path) == path
  with s.scope():
    w.assign(np.array([9., 9.], np.float32))
  ckpt.restore(path)
  np.testing.assert_array_equal(np.asarray(w.values[1]), [1., 2.])
  (tmp_path / "ckpt-9.dckpt").write_bytes(b"not a checkpoint")
  with pytest.raises(errors.DataLossError):
    ckpt.restore(tmp_path / "ckpt-9.dckpt")
  with pytest.raises(errors.InvalidArgumentError):
    dist.Checkpoint(x=3)


def _natural_pipeline():
  x = np.arange(100, dtype=np.float32)
  return (dist.data.Dataset.from_tensor_slices((x, 2 * x)).shuffle(50, seed=3)
          .map(lambda a, b: (a + 1, b)).batch(8).repeat())


def _global(step):
  return [np.concatenate([np.asarray(v) for v in part.values]) for part in step]


def test_checkpoint_save_and_restore_release_the_gil(tmp_path):
  """Another Python thread keeps running while a checkpoint is written and
  read: its longest pause during the call is far shorter than the call
  (a save holding the GIL would pause it for the whole write)."""
  import sys
  import threading
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  with s.scope():
    w = dist.Variable(np.ones(4 << 20, np.float32), name="w")  # 16 MiB: a save of 0.1-0.2 s here
  ckpt = dist.Checkpoint(w=w)
  stop, longest = threading.Event(), [0.0]

  def spin():
    last = time.perf_counter()
    while not stop.is_set():
      now = time.perf_counter()
      longest[0] = max(longest[0], now - last)
      last = now

  interval = sys.getswitchinterval()
  sys.setswitchinterval(0.0005)  # Python code hands the GIL over every 0.5 ms
  spinner = threading.Thread(target=spin)
  spinner.start()
  def timed(call):
    """(seconds of the call, the spinner's longest pause during it)"""
    longest[0], start = 0.0, time.perf_counter()
    call()
    return time.perf_counter() - start, longest[0]

  # Up to 3 tries each: one descheduling of the spinner on a busy machine
  # can pause it for milliseconds; a call that held the GIL would pause it
  # for its whole length every time.
  saved, restored = [], []
  try:
    time.sleep(0.05)
    for _ in range(3):
      saved.append(timed(lambda: ckpt.save(tmp_path)))
      if saved[-1][1] < saved[-1][0] / 2:
        break
    path = dist.latest_checkpoint(tmp_path)
    for _ in range(3):
      restored.append(timed(lambda: ckpt.restore(path)))
      if restored[-1][1] < restored[-1][0] / 2:
        break
  finally:
    stop.set()
    spinner.join()
    sys.setswitchinterval(interval)
  assert any(pause < seconds / 2 for seconds, pause in saved), saved
  assert any(pause < seconds / 2 for seconds, pause in restored), restored
  np.testing.assert_array_equal(np.asarray(w.values[1])[:3], [1, 1, 1])


def test_checkpoint_of_an_iterator_resumes_the_uninterrupted_steps(tmp_path):
  # The natural loop with TF's names: tf.train.Checkpoint(iterator=it).
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  reference = iter(s.experimental_distribute_dataset(_natural_pipeline()))
  expected = [_global(next(reference)) for _ in range(40)]
  it = iter(s.experimental_distribute_dataset(_natural_pipeline()))
  for _ in range(15):
    next(it)
  path = dist.Checkpoint(iterator=it).save(tmp_path)
  # A new definition of the same pipeline, as in a new process.
  again = iter(s.experimental_distribute_dataset(_natural_pipeline()))
  next(again)
  dist.Checkpoint(iterator=again).restore(path)
  for k in range(15, 40):
    got = _global(next(again))
    for a, b in zip(got, expected[k]):
      np.testing.assert_array_equal(a, b)


def test_checkpoint_refuses_an_iterator_it_cannot_replay():
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  it = iter(s.experimental_distribute_dataset(dist.data.Dataset.range(40).shuffle(8).batch(4)))
  with pytest.raises(errors.UnimplementedError, match="shuffle without a seed"):
    dist.Checkpoint(iterator=it)
