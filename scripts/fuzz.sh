#!/usr/bin/env bash
# Builds the libFuzzer programs (the fuzz preset: clang-14, ASan + UBSan)
# and runs each on its corpus for the given number of seconds, one after
# the other. Fails when any of them finds a crash: a sanitizer report, or an
# exception that is not a distribute::Error.
#
# Usage: scripts/fuzz.sh [seconds]   (default 60 per fuzzer)
#
# The committed seeds in fuzz/corpus/<name>/ are only read; what the fuzzer
# adds goes to build/fuzz/corpus/<name>/ (kept between runs), a crashing
# input to build/fuzz/artifacts/<name>-crash-*. Rerun one input with
#   build/fuzz/fuzz/fuzz_<name> build/fuzz/artifacts/<name>-crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "fuzz: expected a number of seconds >= 1, got '$seconds'" >&2
  exit 2
fi

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for name in checkpoint csv tf_config slurm tfrecord; do
  printf '\n==== fuzz_%s for %ss\n' "$name" "$seconds"
  corpus=build/fuzz/corpus/$name
  mkdir -p "$corpus" build/fuzz/artifacts
  if ! build/fuzz/fuzz/fuzz_$name "$corpus" "fuzz/corpus/$name" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="build/fuzz/artifacts/$name-"; then
    failed+=("$name")
  fi
done
if ((${#failed[@]} > 0)); then
  echo "fuzz: found crashes in ${failed[*]} (inputs in build/fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz: no crashes in ${seconds}s per fuzzer"
