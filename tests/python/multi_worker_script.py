"""Run by test_multi_worker.py under mpirun -np 2: a MultiWorkerMirroredStrategy
from Python. Mode "ok": collectives, reduce and a distributed dataset, then
a clean exit. Mode "fail": worker 1's replica raises; worker 0, waiting in
all_reduce, raises UnavailableError naming worker 1."""
import sys

import numpy as np

import distribute as dist

mode = sys.argv[1]
s = dist.MultiWorkerMirroredStrategy(timeout_seconds=20)
w = s._core.worker_index
out = s.run(lambda: dist.get_replica_context().all_reduce("sum", np.array([w + 1.0], np.float32)))
ds = dist.data.Dataset.range(8).batch(4)
total = sum(int(s.reduce("sum", step, axis=0)) for step in s.experimental_distribute_dataset(ds))
print(f"worker {w}: all_reduce {float(np.asarray(s.experimental_local_results(out)[0])[0])} dataset {total}", flush=True)
if mode == "fail":
  def step():
    if w == 1:
      raise RuntimeError("worker one's replica failed")
    dist.get_replica_context().all_reduce("sum", np.ones(4, np.float32))
  try:
    s.run(step)
  except dist.errors.UnavailableError as e:
    print(f"worker {w}: UnavailableError: {e}", flush=True)
  except RuntimeError as e:
    print(f"worker {w}: RuntimeError: {e}", flush=True)
