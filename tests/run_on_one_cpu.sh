#!/usr/bin/env bash
# Runs a command as `taskset -c N` would, N being the first CPU this process
# may use (CPU 0 unless the mask excludes it), with DISTRIBUTE_EXPECTED_CPUS=1:
# the tests that read it check that the library then counts one CPU.
# Usage: run_on_one_cpu.sh <program> [args...]
set -euo pipefail
cpu=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*\([0-9]*\).*/\1/p' /proc/self/status)
DISTRIBUTE_EXPECTED_CPUS=1 exec taskset -c "${cpu:-0}" "$@"
