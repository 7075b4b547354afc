#!/usr/bin/env bash
# MultiWorkerMirroredStrategy's cross-worker all_reduce against raw
# MPI_Allreduce, 2 workers on this machine, interleaved in one run.
# Usage: bench/run_multi_worker.sh   (builds the release preset)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release --target multi_worker_bench
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun -np 2 --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1 --mca btl self,vader \
  build/release/bench/multi_worker_bench
