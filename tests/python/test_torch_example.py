"""examples/python/torch_digits.py: a torch.nn MLP trained data-parallel with
gradients all-reduced in place through zero-copy views. Needs Debian's
python3-torch (scripts/setup.sh installs it): skipped without it, except
under CTest (DISTRIBUTE_REQUIRE_TORCH=1), where a missing torch fails."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import _deps  # noqa: E402

torch = _deps.torch()

import distribute as dist  # noqa: E402

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"
sys.path.insert(0, str(EXAMPLE))
import torch_digits  # noqa: E402


def weights(model):
  return [p.detach().numpy().copy() for p in model.parameters()]


def test_one_and_two_replicas_end_with_the_same_weights_and_learn():
  # (With one BLAS thread, OMP_NUM_THREADS=1 as CTest and the example set:
  # a threaded OpenBLAS rounds differently under another concurrency.)
  one, acc1 = torch_digits.train(dist.MirroredStrategy(["CPU:0"]), epochs=4)
  two, acc2 = torch_digits.train(dist.MirroredStrategy(["CPU:0", "CPU:1"]), epochs=4)
  for a, b in zip(weights(one), weights(two)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  assert acc1 == pytest.approx(acc2, abs=0.01)


def test_it_reaches_95_percent():
  _, accuracy = torch_digits.train(dist.MirroredStrategy(["CPU:0", "CPU:1"]), epochs=15)
  assert accuracy >= 0.95


def test_the_models_grads_stay_views_of_their_block():
  model, _ = torch_digits.train(dist.MirroredStrategy(["CPU:0", "CPU:1"]), epochs=1)
  # Every .grad is a view of the one block (one storage), at consecutive
  # offsets: backward accumulated into them, nothing replaced them.
  storages = {p.grad.storage().data_ptr() for p in model.parameters()}
  assert len(storages) == 1
  offsets = [p.grad.storage_offset() for p in model.parameters()]
  sizes = [p.grad.numel() for p in model.parameters()]
  assert offsets == [sum(sizes[:i]) for i in range(len(sizes))]


def test_the_grads_are_reduced_in_place():
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  grads = [torch.full((1 << 16,), float(r + 1)) for r in range(2)]  # 256 KiB each
  addresses = [g.data_ptr() for g in grads]
  s.run(lambda: dist.get_replica_context().all_reduce_in_place(
      "sum", [grads[dist.get_replica_context().replica_id_in_sync_group]]))
  for g, address in zip(grads, addresses):
    assert g.data_ptr() == address and float(g[0]) == 3.0 and float(g[-1]) == 3.0


def test_the_same_script_under_mpirun():
  mpirun = _deps.mpirun()
  env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
  done = subprocess.run([mpirun, "-np", "2", "--oversubscribe", "--mca", "oob_tcp_if_include", "lo", "--mca", "pml",
                         "ob1", "--mca", "btl", "self,vader", sys.executable, str(EXAMPLE / "torch_digits.py"),
                         "--strategy", "multi_worker", "--replicas", "1"],
                        env=env, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stdout + done.stderr
  accuracy = float(done.stdout.split("test accuracy")[1])
  assert accuracy >= 0.95
