#!/usr/bin/env bash
# MultiWorkerMirroredStrategy's cross-worker all_reduce, 2 workers x 1
# replica on this machine, against raw MPI_Allreduce interleaved in the same
# processes: first over the host's shared-memory segment (the default for
# workers on one host), then over MPI messages (DISTRIBUTE_SHARED_MEMORY=0,
# the path between hosts); then the in-process all_reduce of 2 replica
# threads at the same sizes, the reference issue 14 names. The segment's run
# also measures that reference inside the job (--in-process: worker 0's 2
# replica threads between the repetitions), and prints the shared block's
# time against it per repetition, so that the ratio does not span minutes.
# Usage: bench/run_multi_worker.sh   (builds the release preset)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release --target multi_worker_bench all_reduce_bench
run() {
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np 2 --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1 --mca btl self,vader "$@" \
    build/release/bench/multi_worker_bench ${BENCH_ARGS:-}
}
echo "== over the shared-memory segment"
BENCH_ARGS=--in-process run
echo "== over MPI messages (DISTRIBUTE_SHARED_MEMORY=0)"
run -x DISTRIBUTE_SHARED_MEMORY=0
echo "== in process, 2 replica threads"
build/release/bench/all_reduce_bench --benchmark_filter='BM_AllReduce(InPlace)?/(4096|262144|4194304|67108864)/2/real_time$' \
  --benchmark_repetitions=5 --benchmark_report_aggregates_only=true 2>&1 | grep -E "median|^BM_SpinMeeting"
