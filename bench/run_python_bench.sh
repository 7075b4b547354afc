#!/usr/bin/env bash
# The Python package's overheads against the C++ calls, measured in one run:
# the C++ figures first (run_overhead_bench BM_RunVoid/2, all_reduce_bench
# BM_AllReduce at 4 MiB and 64 MiB on 2 replicas), then bench/python_bench.py
# with them as references. Needs a release build (cmake --build --preset release).
# The all_reduce ratios are python_bench.py's own: the Python loop against
# the same loop in C++ on the same strategy's threads, alternating in one
# process (the all_reduce_bench figures are printed beside them).
# Usage: bench/run_python_bench.sh   (ROUNDS=3 by default: the median of 3 C++ repetitions)
#   INTERLEAVED=N: instead, N rounds of the 4 MiB and 64 MiB all_reduce
#   only, each the C++ figure then the Python one right after it, so that
#   every ratio compares two measurements seconds apart (the host's speed
#   drifts: 64 MiB took 3.0 to 4.6 ms in C++ within minutes, 2026-12-06);
#   prints each round's ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release
rounds=${ROUNDS:-3}
json() { "$build/bench/$1" --benchmark_filter="$2" --benchmark_repetitions="$rounds" \
  --benchmark_report_aggregates_only=true --benchmark_format=json 2>/dev/null; }
median_us() { /usr/bin/python3 -c '
import json, sys
runs = [b for b in json.load(sys.stdin)["benchmarks"] if b.get("aggregate_name") == "median"]
b = runs[0]
scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
print(round(b["real_time"] * scale, 3))'; }
if [ -n "${INTERLEAVED:-}" ]; then
  for round in $(seq "$INTERLEAVED"); do
    ar4=$(json all_reduce_bench '^BM_AllReduce/4194304/2/real_time$' | median_us)
    ar64=$(json all_reduce_bench '^BM_AllReduce/67108864/2/real_time$' | median_us)
    echo "round $round: C++ all_reduce 4 MiB ${ar4} us, 64 MiB ${ar64} us"
    PYTHONPATH=$build/python /usr/bin/python3 bench/python_bench.py --cases all_reduce --sizes 4194304,67108864 \
      --cxx "{\"4194304\": $ar4, \"67108864\": $ar64}"
  done
  exit 0
fi
run_us=$(json run_overhead_bench '^BM_RunVoid/2/real_time$' | median_us)
ar4k=$(json all_reduce_bench '^BM_AllReduce/4096/2/real_time$' | median_us)
ar4=$(json all_reduce_bench '^BM_AllReduce/4194304/2/real_time$' | median_us)
ar64=$(json all_reduce_bench '^BM_AllReduce/67108864/2/real_time$' | median_us)
echo "C++: run ${run_us} us, all_reduce 4 KiB ${ar4k} us, 4 MiB ${ar4} us, 64 MiB ${ar64} us"
PYTHONPATH=$build/python /usr/bin/python3 bench/python_bench.py \
  --cxx "{\"run\": $run_us, \"4096\": $ar4k, \"4194304\": $ar4, \"67108864\": $ar64}"
