#!/usr/bin/env bash
# Kills checkpoint_resume (tests/checkpoint/resume_main.cc) with SIGKILL at
# 20 random moments (each after the run's first save), resumes it each time
# from its latest checkpoint, and
# checks that the run ends with the hash of an uninterrupted run (every
# row of every step, in order: the resumed input is bitwise the same).
# Usage: run_resume.sh <checkpoint_resume> [kills]
set -u
program=$1 kills=${2:-20} steps=${STEPS:-6000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
mkdir "$work/ref" "$work/run"
expected=$("$program" "$work/ref" "$steps" | sed -n 's/^hash //p')
[ -n "$expected" ] || fail "the uninterrupted run printed no hash"
killed=0 resumed=0 attempts=0
newest() { ls "$work/run" | sort -t- -k2 -n | tail -n 1; }
while [ "$killed" -lt "$kills" ] && [ "$attempts" -lt $((2 * kills)) ]; do
  attempts=$((attempts + 1))
  # Killed 0 to 40 ms after the run's first save of its own (a fixed delay
  # from the launch would land before it in a slow build, e.g. under
  # AddressSanitizer, and test nothing): every kill then interrupts a run
  # that has restored (or started) and saved, most of them mid-save.
  before=$(newest)
  "$program" "$work/run" "$steps" > "$work/out" 2>&1 &
  pid=$!
  for _ in $(seq 2000); do
    [ "$(newest)" != "$before" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.005
  done
  sleep "0.0$(printf '%02d' $((RANDOM % 40)))"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
  status=$?
  out=$(cat "$work/out")
  grep -q "^resumed at step" <<<"$out" && resumed=$((resumed + 1))
  if [ "$status" -eq 137 ]; then killed=$((killed + 1)); elif [ "$status" -ne 0 ]; then fail "run $attempts ended with $status: $out"; fi
  grep -q "^hash" <<<"$out" && break
done
out=$("$program" "$work/run" "$steps")
got=$(sed -n 's/^hash //p' <<<"$out")
echo "$killed kills, $resumed resumed runs; expected hash $expected, got $got"
[ "$killed" -ge "$kills" ] || fail "only $killed runs were killed mid-run, expected $kills (the steps ran too fast)"
# Most kills must have come after a checkpoint (else nothing was resumed),
# and the final run must have resumed mid-run.
[ "$resumed" -ge $((kills / 2)) ] || fail "only $resumed runs resumed from a checkpoint"
final=$(sed -n 's/^resumed at step \([0-9]*\)$/\1/p' <<<"$out")
[ -n "$final" ] && [ "$final" -gt 0 ] || fail "the final run did not resume from a checkpoint: $out"
[ "$got" = "$expected" ] || fail "the resumed run's hash differs from the uninterrupted run's"
echo PASS
