"""Python overheads over the C++ core, each as a ratio to a reference measured
in the same run (bench/run_python_bench.sh runs it and the C++ reference).

  wrap        convert_to_tensor of a numpy array (4 KiB and 64 MiB): O(1)
  run         strategy.run of a trivial Python function on 2 replicas,
              against a bare C++ run() (run_overhead_bench in the same script)
  all_reduce  from Python, 4 MiB and 64 MiB float32 on 2 replicas, inside one
              run (as all_reduce_bench's BM_AllReduce does), against the C++
              figure passed in --cxx (microseconds per call)

Prints one JSON object per line."""
import argparse
import json
import statistics
import time

import numpy as np

import distribute as dist


def median_us(fn, repeat, inner=1):
  samples = []
  for _ in range(repeat):
    start = time.perf_counter()
    for _ in range(inner):
      fn()
    samples.append((time.perf_counter() - start) / inner * 1e6)
  return statistics.median(samples)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--cxx", type=json.loads, default={}, help='{"4194304": us, "67108864": us, "run": us}')
  args = parser.parse_args()
  results = []
  for size in (4096, 64 << 20):
    a = np.ones(size // 4, np.float32)
    us = median_us(lambda: dist.convert_to_tensor(a), 200, 100)
    results.append({"case": f"wrap {size} B", "us": round(us, 3)})
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  us = median_us(lambda: s.run(lambda: None), 50, 200)
  row = {"case": "run trivial, 2 replicas", "us": round(us, 2)}
  if "run" in args.cxx:
    row["cxx_us"] = args.cxx["run"]
    row["ratio"] = round(us / args.cxx["run"], 2)
  results.append(row)
  for size in (4 << 20, 64 << 20):
    n = size // 4
    calls = 200 if size <= (4 << 20) else 20
    timings = {}

    def body():
      ctx = dist.get_replica_context()
      x = np.full(n, ctx.replica_id_in_sync_group + 1.0, np.float32)
      for _ in range(3):
        ctx.all_reduce("sum", x)  # warm-up: the pooled buffers' pages
      start = time.perf_counter()
      for _ in range(calls):
        ctx.all_reduce("sum", x)
      timings[ctx.replica_id_in_sync_group] = (time.perf_counter() - start) / calls * 1e6

    per_call = []
    for _ in range(5):
      s.run(body)
      per_call.append(timings[0])
    us = statistics.median(per_call)
    row = {"case": f"all_reduce {size} B, 2 replicas", "us": round(us, 1)}
    if str(size) in args.cxx:
      row["cxx_us"] = args.cxx[str(size)]
      row["ratio"] = round(us / args.cxx[str(size)], 3)
    results.append(row)
  for row in results:
    print(json.dumps(row))


if __name__ == "__main__":
  main()
