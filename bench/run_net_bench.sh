#!/usr/bin/env bash
# The cross-worker all_reduce between 2 hosts over TCP, against raw
# MPI_Allreduce interleaved in the same processes (multi_worker_bench): the
# hosts are network namespaces joined by veth pairs on a bridge
# (tests/net/hosts.sh), one worker per host, Open MPI's TCP transport
# (btl self,tcp). Needs root and `ip netns` (scripts/setup.sh installs
# iproute2); the namespaces are removed at exit.
# Usage: bench/run_net_bench.sh [bytes...]   (builds the release preset;
#   default sizes 4 KiB, 256 KiB, 4 MiB, 64 MiB; DISTRIBUTE_PROCESS_WATCH=0
#   turns the process watch off)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release --target multi_worker_bench
net_skip() { echo "cannot run: $*" >&2; exit 1; }
source tests/net/hosts.sh
net_hosts_up 2
# Waiting MPI processes yield the core: with 2 busy-polling workers on 2
# cores, the kernel's packet processing (softirq, ksoftirqd) waits for a
# time slice and an MPI_Allreduce of 4 KiB took 8 ms instead of 70 us.
net_flags+=(--mca mpi_yield_when_idle 1)
# DISTRIBUTE_PROCESS_WATCH=0 in the environment: the workers without the
# process watch (src/transport/peer_watch.h), to measure what it costs.
[ -n "${DISTRIBUTE_PROCESS_WATCH:-}" ] && net_flags+=(-x DISTRIBUTE_PROCESS_WATCH)
net_mpirun "$(command -v mpirun)" build/release/bench/multi_worker_bench "$@"
