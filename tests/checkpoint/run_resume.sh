#!/usr/bin/env bash
# Kills checkpoint_resume (tests/checkpoint/resume_main.cc) with SIGKILL at
# 20 random moments, resumes it each time from its latest checkpoint, and
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
while [ "$killed" -lt "$kills" ] && [ "$attempts" -lt $((2 * kills)) ]; do
  attempts=$((attempts + 1))
  # 10 to 150 ms into the run (6000 steps take longer than 20 of those
  # here; a run that ends before its kill is not counted).
  out=$(timeout -s KILL "0.$(printf '%03d' $((10 + RANDOM % 140)))" "$program" "$work/run" "$steps")
  status=$?
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
