#!/usr/bin/env bash
# Runs multi_worker_fault <mode> as 2 workers under mpirun and checks that the
# job ends with a non-zero status, within its bound, with the expected error
# on worker 0.
# Usage: run_fault.sh <mpiexec> <multi_worker_fault> throw|stuck|kill|exit|kill_detect|kill_detect_forked [shm|mpi|shm_shared]
#   shm (default): the workers' collectives go through the shared-memory
#   segment; mpi: through MPI messages (DISTRIBUTE_SHARED_MEMORY=0).
#   kill_detect: worker 1 is killed as in `kill`, under mpirun's
#   --enable-recovery (mpirun does not end the job when a process dies, so
#   worker 0 must notice the death itself): worker 0 raises UnavailableError
#   naming worker 1 within a second, not at its 10 s deadline (over the
#   segment: its pid watch; over MPI messages: the process watch's
#   connection, src/transport/peer_watch.h). (Open MPI
#   4.1.4 then ends such a job with status 0 although worker 0 aborts it:
#   the status is not checked in that mode.) kill_detect_forked: the same
#   after every worker forked a child that outlives worker 1 by 5 s (it holds
#   copies of worker 1's connections unless they are closed at the fork).
#   shm_shared: over the segment, the failing all_reduce an in-place one of
#   a block from experimental_allocate_shared (the segment's in-place path).
set -u
mpiexec=$1 program=$2 mode=$3 transport=${4:-shm}
flags=(-np 2 --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1 --mca btl self,vader)
[ "$transport" = mpi ] && flags+=(-x DISTRIBUTE_SHARED_MEMORY=0)
shared=()
[ "$transport" = shm_shared ] && shared=(shared)
program_mode=$mode
if [ "$mode" = kill_detect ] || [ "$mode" = kill_detect_forked ]; then
  flags+=(--enable-recovery)
  program_mode=kill
  [ "$mode" = kill_detect_forked ] && program_mode=kill_forked
fi
start=$(date +%s%N)
out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 "$mpiexec" "${flags[@]}" \
  "$program" "$program_mode" "${shared[@]}" 2>&1)
status=$?
elapsed=$((($(date +%s%N) - start) / 1000000))
printf '%s\n---\n%s transport: status %s after %s ms\n' "$out" "$transport" "$status" "$elapsed"
fail() { echo "FAIL ($mode, $transport): $*"; exit 1; }
[ "$status" -ne 124 ] || fail "the job did not end within 60 s"
[ "$status" -ne 0 ] || [ "${mode%_forked}" = kill_detect ] || fail "mpirun ended with status 0 after a failed worker"
# How long worker 0 waited in the collective, from its own report.
waited() { sed -n "s/^worker 0: $1 after \([0-9]*\) ms.*/\1/p" <<<"$out" | head -n 1; }
# Worker 0 raised `error` (an error code name) naming `text`, within `low`
# to `high` ms of waiting in the collective.
expect() {
  local error=$1 text=$2 low=$3 high=$4 ms
  ms=$(waited "$error")
  [ -n "$ms" ] || fail "worker 0 did not raise $error"
  grep -qF "$text" <<<"$out" || fail "the message does not contain: $text"
  [ "$ms" -ge "$low" ] && [ "$ms" -lt "$high" ] || fail "worker 0 waited $ms ms (expected $low to $high ms)"
}
case $mode in
  throw) expect UNAVAILABLE "worker 1 reported a failure (worker 1: local replica 0 failed: boom in the training step)" 0 1000 ;;
  exit) expect UNAVAILABLE "worker 1 reported a failure (worker 1 left: its MultiWorkerMirroredStrategy was destroyed" 0 1000 ;;
  stuck) expect DEADLINE_EXCEEDED "nothing received from worker(s) [1]" 1900 4000 ;;
  # mpirun ends the job when a process dies: the job ended because of that
  # death (mpirun's notice), and worker 0, if it got to say anything, named
  # worker 1 rather than anything else.
  kill) grep -qE "process rank 1 .* exited on signal 9" <<<"$out" || fail "mpirun did not report worker 1's death"
        if grep -q "^worker 0: " <<<"$out"; then
          grep -qE "^worker 0: UNAVAILABLE .*worker 1 \(pid " <<<"$out" || fail "worker 0 raised something else"
        fi ;;
  kill_detect|kill_detect_forked) expect UNAVAILABLE "worker 1 (pid " 0 1000
               grep -qF "ended without reporting a failure (killed or crashed" <<<"$out" || fail "no death message" ;;
  *) fail "unknown mode" ;;
esac
# The job ends within its bound (kill: the collective timeout is 10 s).
[ "$elapsed" -lt 20000 ] || fail "the job took $elapsed ms to end"
echo "PASS ($mode, $transport)"
