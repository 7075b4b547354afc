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
# PER_HOST=2: two workers per host (ranks host by host): the library's
#   hierarchical mode (each host's segment, then MPI between one worker per
#   host), or its MPI messages alone with DISTRIBUTE_SHARED_MEMORY=0;
#   VADER=1 lets Open MPI use its shared-memory transport between the
#   workers of one host too (btl self,vader,tcp), for MPI_Allreduce's best.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release --target multi_worker_bench
net_skip() { echo "cannot run: $*" >&2; exit 1; }
source tests/net/hosts.sh
net_hosts_up 2 "${PER_HOST:-1}"
if [ "${VADER:-0}" = 1 ]; then
  for i in "${!net_flags[@]}"; do [ "${net_flags[$i]}" = self,tcp ] && net_flags[$i]=self,vader,tcp; done
fi
# Waiting MPI processes yield the core: with 2 busy-polling workers on 2
# cores, the kernel's packet processing (softirq, ksoftirqd) waits for a
# time slice and an MPI_Allreduce of 4 KiB took 8 ms instead of 70 us.
net_flags+=(--mca mpi_yield_when_idle 1)
# DISTRIBUTE_PROCESS_WATCH=0 in the environment: the workers without the
# process watch (src/transport/peer_watch.h), to measure what it costs.
[ -n "${DISTRIBUTE_PROCESS_WATCH:-}" ] && net_flags+=(-x DISTRIBUTE_PROCESS_WATCH)
[ -n "${DISTRIBUTE_SHARED_MEMORY:-}" ] && net_flags+=(-x DISTRIBUTE_SHARED_MEMORY)
net_mpirun "$(command -v mpirun)" build/release/bench/multi_worker_bench "$@"
