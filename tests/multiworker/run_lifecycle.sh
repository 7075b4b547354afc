#!/usr/bin/env bash
# Runs multi_worker_lifecycle under mpirun and checks the workers' verdicts:
# the job must end within 60 s and print `passes` lines "PASS <mode>" and no
# "FAIL" (a job that ends by a worker's error may end with any status).
# Usage: run_lifecycle.sh <mpiexec> <program> <workers> <passes> <mode> [args...]
set -u
mpiexec=$1 program=$2 workers=$3 passes=$4
shift 4
start=$(date +%s%N)
out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 "$mpiexec" -np "$workers" --oversubscribe \
  --mca oob_tcp_if_include lo --mca pml ob1 --mca btl self,vader "$program" "$@" 2>&1)
status=$?
elapsed=$((($(date +%s%N) - start) / 1000000))
printf '%s\n---\nstatus %s after %s ms\n' "$out" "$status" "$elapsed"
fail() { echo "FAIL ($*)"; exit 1; }
[ "$status" -ne 124 ] || fail "the job did not end within 60 s"
! grep -q ": FAIL " <<<"$out" || fail "a worker failed"
got=$(grep -c ": PASS " <<<"$out")
[ "$got" -eq "$passes" ] || fail "$got workers passed, expected $passes"
echo "PASS ($*)"
