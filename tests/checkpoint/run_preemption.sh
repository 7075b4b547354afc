#!/usr/bin/env bash
# SIGTERM to one worker of a 2-worker job (tests/checkpoint/preemption_main.cc)
# at a random moment: the job must exit with status 42 within BOUND seconds
# of the signal, having saved a checkpoint at one agreed step; rerunning the
# same command resumes from it. After ROUNDS such rounds, a last run ends
# with the hash (the rows of every step, in order, and the variable's bits)
# of an uninterrupted run.
# Usage: run_preemption.sh <mpiexec> <mpirun flags...> -- <checkpoint_preemption>
set -u
mpiexec=$1; shift
flags=()
while [ "$1" != "--" ]; do flags+=("$1"); shift; done
shift
program=$1
rounds=${ROUNDS:-5} steps=${STEPS:-6000} bound=${BOUND:-10}
work=$(mktemp -d)
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
job() { "$mpiexec" -np 2 "${flags[@]}" "$program" "$1" "$steps" "$work/pids"; }
mkdir "$work/ref" "$work/run" "$work/pids"
expected=$(job "$work/ref" | sed -n 's/^hash //p')
[ -n "$expected" ] || fail "the uninterrupted run printed no hash"
preempted=0
for round in $(seq "$rounds"); do
  rm -f "$work/pids"/*
  job "$work/run" > "$work/out" 2>&1 &
  mpirun_pid=$!
  for _ in $(seq 300); do
    [ -s "$work/pids/worker0" ] && [ -s "$work/pids/worker1" ] && break
    sleep 0.1
  done
  [ -s "$work/pids/worker0" ] && [ -s "$work/pids/worker1" ] || fail "round $round: the workers did not start"
  sleep "0.$(printf '%03d' $((50 + RANDOM % 400)))"
  victim=$((RANDOM % 2))
  kill -TERM "$(cat "$work/pids/worker$victim")" 2>/dev/null
  sent=$(date +%s%N)
  # The job must end within the bound.
  for _ in $(seq $((bound * 20))); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$mpirun_pid" 2>/dev/null; then fail "round $round: the job still runs $bound s after SIGTERM to worker $victim"; fi
  wait "$mpirun_pid"
  status=$?
  took_ms=$((($(date +%s%N) - sent) / 1000000))
  resumed=$(sed -n 's/^worker 0 resumed at step \([0-9]*\)$/\1/p' "$work/out")
  echo "round $round: SIGTERM to worker $victim after resuming at step $resumed; status $status after ${took_ms} ms"
  # A run that ended before the signal took effect (the signal may then
  # find the handler gone and end the process: its status does not count).
  grep -q "^hash" "$work/out" && break
  [ "$status" -eq 42 ] || fail "round $round: expected exit status 42 after SIGTERM, got $status: $(cat "$work/out")"
  preempted=$((preempted + 1))
done
rm -f "$work/pids"/*
out=$(job "$work/run")
got=$(sed -n 's/^hash //p' <<<"$out")
final=$(sed -n 's/^worker 0 resumed at step \([0-9]*\)$/\1/p' <<<"$out")
echo "$preempted preempted runs; the last resumed at step $final; expected hash $expected, got $got"
[ "$preempted" -ge $((rounds - 1)) ] || fail "only $preempted of $rounds runs were preempted (the steps ran too fast)"
[ -n "$final" ] && [ "$final" -gt 0 ] || fail "the last run did not resume from a checkpoint: $out"
[ "$got" = "$expected" ] || fail "the resumed run's hash differs from the uninterrupted run's"
echo PASS
