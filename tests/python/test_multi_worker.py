"""MultiWorkerMirroredStrategy from Python under a real mpirun (2 workers on
loopback and shared memory), when mpirun is installed."""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import _deps

SCRIPT = pathlib.Path(__file__).resolve().parent / "multi_worker_script.py"
mpirun = shutil.which("mpirun")


@pytest.fixture(autouse=True)
def _needs_mpirun():
  _deps.mpirun()  # a skip without mpirun, a failure under CTest in a build with MPI


def launch(mode, transport="shm", *extra, **env_extra):
  env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env_extra)
  env.pop("DISTRIBUTE_SHARED_MEMORY", None)
  command = [mpirun, "-np", "2", "--oversubscribe", "--mca", "oob_tcp_if_include", "lo", "--mca", "pml", "ob1",
             "--mca", "btl", "self,vader", sys.executable, str(SCRIPT), mode, transport, *extra]
  return subprocess.run(command, env=env, capture_output=True, text=True, timeout=90)


@pytest.mark.parametrize("transport", ["shm", "mpi"])
def test_two_workers_agree_and_exit_cleanly(transport):
  done = launch("ok", transport)
  assert done.returncode == 0, done.stdout + done.stderr
  # Workers on one host share a segment unless shared_memory=False.
  segment = transport == "shm"
  for w in (0, 1):
    assert f"worker {w}: all_reduce 3.0 dataset 28 segment {segment}" in done.stdout, done.stdout + done.stderr
    assert f"worker {w}: plain distributed False sum 3.0 mean 1.5 gather [1.0, 2.0]" in done.stdout, done.stdout + done.stderr
    assert f"worker {w}: step PerReplica of 1 spec PerReplicaSpec (None,)" in done.stdout, done.stdout + done.stderr
    # The shared block lives in the segment's shared memory only with it.
    assert f"worker {w}: shared block in shm {segment} sums True" in done.stdout, done.stdout + done.stderr


def test_a_failing_worker_is_reported_to_the_other():
  done = launch("fail")
  assert "worker 1: RuntimeError: worker one's replica failed" in done.stdout, done.stdout + done.stderr
  assert "worker 0: UnavailableError" in done.stdout and "worker 1" in done.stdout, done.stdout + done.stderr
  assert done.returncode != 0  # a broken channel ends the job with an error status


def test_a_long_failure_report_over_mpi_reaches_the_other_cut():
  # Over MPI alone (no segment, no process watch): the failing worker makes
  # no MPI call after its report, so a report beyond the eager limit would
  # leave the other in MPI_Recv until the job is aborted; it is cut to 1 KiB.
  done = launch("fail", "mpi", "long", DISTRIBUTE_PROCESS_WATCH="0")
  out = done.stdout + done.stderr
  line = [l for l in done.stdout.splitlines() if l.startswith("worker 0: UnavailableError")]
  assert line, out
  assert "worker one's replica failed and said so at length" in line[0] and line[0].endswith("...)"), out
  assert len(line[0]) < 1500, out


def test_ctrl_c_on_one_worker_interrupts_it_and_is_reported_to_the_other():
  done = launch("interrupt")
  out = done.stdout + done.stderr
  line = [l for l in done.stdout.splitlines() if l.startswith("worker 1: KeyboardInterrupt after")]
  assert line, out
  assert float(line[0].split()[-2]) < 2.5, out  # before worker 0 arrives (3 s): the wait itself was interrupted
  assert "worker 0: UnavailableError" in done.stdout and "interrupted on worker 1" in done.stdout, out


def test_sigterm_to_one_worker_saves_on_every_worker_and_the_rerun_resumes(tmp_path):
  reference = launch("preempt", "shm", str(tmp_path / "reference"), "-1")
  assert reference.returncode == 0, reference.stdout + reference.stderr
  # (The workers' lines may interleave: searched, not split.)
  expected = re.findall(r"worker 0: final \d+", reference.stdout)
  assert expected, reference.stdout + reference.stderr
  preempted = launch("preempt", "shm", str(tmp_path / "run"), "5")
  assert preempted.returncode == 42, preempted.stdout + preempted.stderr
  assert "final" not in preempted.stdout
  resumed = launch("preempt", "shm", str(tmp_path / "run"), "-1")
  assert resumed.returncode == 0, resumed.stdout + resumed.stderr
  for w in (0, 1):
    assert f"worker {w}: resumed at 6" in resumed.stdout, resumed.stdout  # steps 0..5 were saved
  assert expected[0] in resumed.stdout, resumed.stdout
