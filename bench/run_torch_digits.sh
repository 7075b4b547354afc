#!/usr/bin/env bash
# The PyTorch digits training from Python (bench/torch_digits.py) in every
# configuration, interleaved in rounds: single-process torch with 2 and 1
# threads, this package with 2 replica threads, 2 processes x 1 replica
# under mpirun over the host's shared-memory segment, the same with the
# gradients in one block from experimental_allocate_shared (--shared-grads),
# and over MPI messages (DISTRIBUTE_SHARED_MEMORY=0), and PyTorch DDP (gloo,
# 2 processes).
# Prints samples/s per configuration and round.
# Usage: bench/run_torch_digits.sh   (ROUNDS=3 EPOCHS=100; needs the release
# build, and scripts/setup.sh --bench-peers for OpenBLAS)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=build/release/python OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rounds=${ROUNDS:-3} epochs=${EPOCHS:-100}
mpi=(mpirun -np 2 --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1 --mca btl self,vader)
py=(/usr/bin/python3 bench/torch_digits.py)
sps() { grep '^RESULT' | sed -n 's/.*samples_per_second=\([0-9]*\).*/\1/p'; }
printf '%-6s %12s %12s %12s %12s %12s %12s %12s\n' round torch_2t torch_1t threads_2 procs_shm procs_shared procs_mpi ddp
for round in $(seq "$rounds"); do
  a=$("${py[@]}" single --threads 2 --epochs "$epochs" 2>&1 | sps)
  b=$("${py[@]}" single --threads 1 --epochs "$epochs" 2>&1 | sps)
  c=$("${py[@]}" distribute --replicas 2 --epochs "$epochs" 2>&1 | sps)
  d=$("${mpi[@]}" "${py[@]}" mwms --epochs "$epochs" 2>&1 | sps)
  g=$("${mpi[@]}" "${py[@]}" mwms --shared-grads --epochs "$epochs" 2>&1 | sps)
  e=$("${mpi[@]}" -x DISTRIBUTE_SHARED_MEMORY=0 "${py[@]}" mwms --epochs "$epochs" 2>&1 | sps)
  f=$("${py[@]}" ddp --world-size 2 --epochs "$epochs" 2>&1 | sps)
  printf '%-6s %12s %12s %12s %12s %12s %12s %12s\n' "$round" "$a" "$b" "$c" "$d" "$g" "$e" "$f"
done
