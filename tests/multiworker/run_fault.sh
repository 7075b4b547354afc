#!/usr/bin/env bash
# Runs multi_worker_fault <mode> as 2 workers under mpirun and checks that the
# job ends with a non-zero status, within its bound, with the expected error
# on worker 0.
# Usage: run_fault.sh <mpiexec> <multi_worker_fault> throw|stuck|kill|exit
set -u
mpiexec=$1 program=$2 mode=$3
start=$(date +%s%N)
out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 "$mpiexec" -np 2 --oversubscribe \
  --mca oob_tcp_if_include lo --mca pml ob1 --mca btl self,vader "$program" "$mode" 2>&1)
status=$?
elapsed=$((($(date +%s%N) - start) / 1000000))
printf '%s\n---\nstatus %s after %s ms\n' "$out" "$status" "$elapsed"
fail() { echo "FAIL ($mode): $*"; exit 1; }
[ "$status" -ne 124 ] || fail "the job did not end within 60 s"
[ "$status" -ne 0 ] || fail "mpirun ended with status 0 after a failed worker"
# How long worker 0 waited in the collective, from its own report.
waited() { sed -n "s/^worker 0: $1 after \([0-9]*\) ms.*/\1/p" <<<"$out" | head -n 1; }
case $mode in
  throw)
    ms=$(waited UNAVAILABLE)
    [ -n "$ms" ] || fail "worker 0 did not raise UnavailableError"
    grep -q "worker 1 reported a failure (worker 1: local replica 0 failed: boom in the training step)" <<<"$out" \
      || fail "the message does not say what failed where"
    [ "$ms" -lt 1000 ] || fail "worker 0 waited $ms ms (bound: 1000 ms)"
    ;;
  stuck)
    ms=$(waited DEADLINE_EXCEEDED)
    [ -n "$ms" ] || fail "worker 0 did not raise DeadlineExceededError"
    grep -q "nothing received from worker(s) \[1\]" <<<"$out" || fail "the message does not name worker 1"
    [ "$ms" -ge 1900 ] && [ "$ms" -lt 4000 ] || fail "worker 0 waited $ms ms (timeout: 2000 ms)"
    [ "$elapsed" -lt 20000 ] || fail "the job took $elapsed ms to end"
    ;;
  exit)
    ms=$(waited UNAVAILABLE)
    [ -n "$ms" ] || fail "worker 0 did not raise UnavailableError"
    grep -q "worker 1 reported a failure (worker 1 left: its MultiWorkerMirroredStrategy was destroyed" <<<"$out" \
      || fail "the message does not say that worker 1 left"
    [ "$ms" -lt 1000 ] || fail "worker 0 waited $ms ms (bound: 1000 ms)"
    ;;
  kill)
    [ "$elapsed" -lt 20000 ] || fail "the job took $elapsed ms to end (collective timeout: 10 s)"
    ;;
  *) fail "unknown mode" ;;
esac
echo "PASS ($mode)"
