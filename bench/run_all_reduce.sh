#!/usr/bin/env bash
# The library's in-process all_reduce (all_reduce_bench) and MPI_Allreduce
# between 2 processes (mpi_allreduce_bench), measured in one run on this
# machine. Needs the packages of scripts/setup.sh (Open MPI among them).
# Usage: bench/run_all_reduce.sh   (from anywhere; builds the release preset)
set -euo pipefail
cd "$(dirname "$0")/.."

cmake --preset release
cmake --build --preset release --target all_reduce_bench mpi_allreduce_bench

echo
echo "== library all_reduce (all_reduce_bench, medians of 5 repetitions) =="
# Keep the context header and the column titles, then the medians only.
build/release/bench/all_reduce_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  | grep -E -v '_(mean|stddev|cv) '

echo
echo "== the 2-replica all_reduce with each reduction kernel forced (DISTRIBUTE_REDUCE_ISA, medians of 5) =="
for isa in baseline avx2 avx512; do
  DISTRIBUTE_REDUCE_ISA=$isa build/release/bench/all_reduce_bench --benchmark_filter='^BM_AllReduce(InPlace)?/[0-9]+/2/' \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median |ERROR|error' | sed "s/^/$isa  /" ||
    echo "$isa: not measured (see the error above)"
done

echo
echo "== MPI_Allreduce (mpi_allreduce_bench, mpirun -np 2) =="
# As root Open MPI refuses to start without these two variables. Loopback for
# the out-of-band channel, and the shared-memory (vader) and self transports:
# no network interfaces or InfiniBand/UCX probing in a container.
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun -np 2 --oversubscribe \
  --mca oob_tcp_if_include lo --mca pml ob1 --mca btl self,vader \
  build/release/bench/mpi_allreduce_bench
