"""Run by test_multi_worker.py under mpirun -np 2: a MultiWorkerMirroredStrategy
from Python. Mode "ok": collectives, reduce, a distributed dataset and an
in-place all_reduce of a block from experimental_allocate_shared, then a
clean exit. Mode "fail": worker 1's replica raises; worker 0, waiting in
all_reduce, raises UnavailableError naming worker 1. Mode "interrupt":
worker 1 gets a SIGINT while its all_reduce waits for worker 0 (which
comes 3 s late): KeyboardInterrupt on worker 1, UnavailableError naming
the interrupt on worker 0 (at its first or second all_reduce). Mode
"preempt <dir> <signal_at>": 12 steps of the natural input loop under a
PreemptionCheckpointHandler in <dir>; worker 1 sends itself SIGTERM during
step <signal_at> (-1: never): every worker saves after that step and exits
with 42; the rerun resumes and prints the final weight's bits."""
import os
import signal
import sys
import threading
import time

import numpy as np

import distribute as dist

mode = sys.argv[1]
shared_memory = len(sys.argv) < 3 or sys.argv[2] != "mpi" or mode == "preempt"  # "mpi": shared_memory=False
# TF's way to give the timeout (CommunicationOptions), and this library's option.
s = dist.MultiWorkerMirroredStrategy(
    communication_options=dist.experimental.CommunicationOptions(timeout_seconds=20), shared_memory=shared_memory)
w = s._core.worker_index
out = s.run(lambda: dist.get_replica_context().all_reduce("sum", np.array([w + 1.0], np.float32)))
ds = dist.data.Dataset.range(8).batch(4)
total = sum(int(s.reduce("sum", step, axis=0)) for step in s.experimental_distribute_dataset(ds))
with open("/proc/self/maps") as maps:
  segment = "/dev/shm/distribute-" in maps.read()
print(f"worker {w}: all_reduce {float(np.asarray(s.experimental_local_results(out)[0])[0])} dataset {total} "
      f"segment {segment}", flush=True)
# One local replica: run returns this worker's value itself, and reduce and
# gather of it without an axis go across the workers, as TF's.
plain = s.run(lambda: np.array([w + 1.0], np.float32))
plain_sum = float(np.asarray(s.reduce("sum", plain))[0])
plain_mean = float(np.asarray(s.reduce("mean", plain))[0])
print(f"worker {w}: plain distributed {isinstance(plain, dist.DistributedValues)} sum {plain_sum} mean {plain_mean} "
      f"gather {np.asarray(s.gather(plain, 0)).tolist()}", flush=True)
# A distributed dataset's steps are PerReplica across workers, also of one
# local replica (TF's _always_wrap), and its batch dimension is unknown (a
# worker whose data ended gets empty batches).
distributed = s.experimental_distribute_dataset(dist.data.Dataset.range(8).batch(4, drop_remainder=True))
first = next(iter(distributed))
print(f"worker {w}: step {type(first).__name__} of {len(s.experimental_local_results(first))} spec "
      f"{type(distributed.element_spec).__name__} {distributed.element_spec._value_specs[0].shape}", flush=True)
# A block from experimental_allocate_shared, summed in place: in the host's
# shared memory with the segment (its address in a /dev/shm mapping).
block = s.experimental_allocate_shared(300_001)[0]
assert block.dtype == np.float32 and block.shape == (300_001,) and not block.any()


def fill_and_sum():
  block[:] = np.arange(300_001, dtype=np.float32) * (w + 1)
  dist.get_replica_context().all_reduce_in_place("sum", block)


s.run(fill_and_sum)
sums = np.array_equal(block, np.arange(300_001, dtype=np.float32) * 3)
address = block.ctypes.data
with open("/proc/self/maps") as maps:
  in_shm = any(int(line.split()[0].split("-")[0], 16) <= address < int(line.split()[0].split("-")[1], 16)
               and "/dev/shm/distribute-" in line for line in maps)
print(f"worker {w}: shared block in shm {in_shm} sums {sums}", flush=True)
if mode == "fail":
  def step():
    if w == 1:
      # "long": a report far beyond MPI's eager limit (sent cut to 1 KiB).
      raise RuntimeError("worker one's replica failed" + (" and said so at length" * 2000 if "long" in sys.argv else ""))
    dist.get_replica_context().all_reduce("sum", np.ones(4, np.float32))
  try:
    s.run(step)
  except dist.errors.UnavailableError as e:
    print(f"worker {w}: UnavailableError: {e}", flush=True)
  except RuntimeError as e:
    print(f"worker {w}: RuntimeError: {e}", flush=True)
if mode == "interrupt":
  calls = []

  def late_step():
    calls.append(1)
    if w == 0 and len(calls) == 1:
      time.sleep(3.0)
    dist.get_replica_context().all_reduce("sum", np.ones(4, np.float32))
  if w == 1:
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
  start = time.monotonic()
  try:
    # Worker 1's contribution to the first all_reduce may already be there
    # when worker 0 arrives (small messages are sent eagerly): worker 0's
    # next one then finds the report.
    s.run(late_step)
    s.run(late_step)
    print(f"worker {w}: no exception", flush=True)
  except KeyboardInterrupt:
    print(f"worker {w}: KeyboardInterrupt after {time.monotonic() - start:.2f} s", flush=True)
    # Stays until worker 0 has seen the report: a process leaving with a
    # broken channel ends the whole job (MPI_Abort).
    time.sleep(4.0)
  except dist.errors.UnavailableError as e:
    print(f"worker {w}: UnavailableError: {e}", flush=True)
if mode == "preempt":
  from distribute.experimental import PreemptionCheckpointHandler
  directory, signal_at = sys.argv[3], int(sys.argv[4])
  data = dist.data.Dataset.from_tensor_slices(np.arange(48, dtype=np.float32)).shuffle(24, seed=5).batch(4).repeat()
  with s.scope():
    weight = dist.Variable(np.float32(0), name="w")
    it = iter(s.experimental_distribute_dataset(data))
    handler = PreemptionCheckpointHandler(dist.Checkpoint(w=weight, iterator=it), directory)
  print(f"worker {w}: resumed at {handler.total_run_calls}", flush=True)

  def step(number):
    if w == 1 and number == signal_at:
      os.kill(os.getpid(), signal.SIGTERM)
    batch = next(it)
    out = s.run(lambda x: dist.get_replica_context().all_reduce("sum", np.float32(np.asarray(x).sum())), args=(batch,))
    total = np.asarray(s.experimental_local_results(out)[0])
    with s.scope():
      weight.assign(np.float32(np.asarray(weight.value()) * np.float32(0.5) + total))

  for number in range(handler.total_run_calls, 12):
    handler.run(step, number)
  handler.close()
  print(f"worker {w}: final {np.float32(np.asarray(weight.value())).view(np.uint32)}", flush=True)
