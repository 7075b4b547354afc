"""Python overheads over the C++ core, each as a ratio to a reference measured
in the same run (bench/run_python_bench.sh runs it and the C++ reference).

  wrap        convert_to_tensor of a numpy array (4 KiB and 64 MiB): O(1)
  run         strategy.run of a trivial Python function on 2 replicas,
              against a bare C++ run() (run_overhead_bench in the same script)
  run-after-work  the same run after 100, 200 and 1000 us of Python code
              between calls (a busy loop; the run() call alone timed): the
              replica threads' idle spin window (DISTRIBUTE_IDLE_SPIN_US=0
              to compare with the base window of 50 us)
  all_reduce  from Python, 4 KiB, 4 MiB and 64 MiB float32 on 2 replicas, inside one
              run (as all_reduce_bench's BM_AllReduce does), against the same
              loop in C++ on the same strategy's threads (the module's
              _benchmark_all_reduce), the two alternating --pairs times:
              the ratio is the median of each pair's (the host's speed
              drifts within seconds); a C++ figure passed in --cxx (from
              all_reduce_bench, the script) is printed beside it
  ctrl-c      a real SIGINT while run() waits for a replica busy in Python,
              and while the caller's replica waits in an all_reduce: the
              time from the signal to the KeyboardInterrupt in the caller
              (target: under 1 s), against the 50 ms polling interval

Prints one JSON object per line."""
import argparse
import json
import os
import signal
import statistics
import threading
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
  parser.add_argument("--cases", default="wrap,run,run-after-work,all_reduce,ctrl-c",
                      help="which of wrap, run, run-after-work, all_reduce, ctrl-c (comma-separated)")
  parser.add_argument("--sizes", default="4096,4194304,67108864", help="all_reduce sizes in bytes")
  parser.add_argument("--pairs", type=int, default=9, help="all_reduce: alternations of the C++ and the Python loop")
  args = parser.parse_args()
  cases = set(args.cases.split(","))
  results = []
  for size in (4096, 64 << 20) if "wrap" in cases else ():
    a = np.ones(size // 4, np.float32)
    us = median_us(lambda: dist.convert_to_tensor(a), 200, 100)
    results.append({"case": f"wrap {size} B", "us": round(us, 3)})
  s = dist.MirroredStrategy(["CPU:0", "CPU:1"])
  if "run" in cases:
    us = median_us(lambda: s.run(lambda: None), 50, 200)
    row = {"case": "run trivial, 2 replicas", "us": round(us, 2)}
    if "run" in args.cxx:
      row["cxx_us"] = args.cxx["run"]
      row["ratio"] = round(us / args.cxx["run"], 2)
    results.append(row)
  if "run-after-work" in cases:
    # A step's own Python code between runs, as a busy loop: the run() call
    # alone is timed (its median over 2000 calls), so an idle replica thread
    # that went to sleep during the work shows as its wake-up.
    for work_us in (100, 200, 1000):
      samples = []
      for _ in range(2000):
        end = time.perf_counter() + work_us / 1e6
        while time.perf_counter() < end:
          pass
        start = time.perf_counter()
        s.run(lambda: None)
        samples.append((time.perf_counter() - start) * 1e6)
      results.append({"case": f"run trivial after {work_us} us of Python work, 2 replicas",
                      "us": round(statistics.median(samples), 2)})
  sizes = [int(b) for b in args.sizes.split(",")] if "all_reduce" in cases else []
  for size in sizes:
    n = size // 4
    calls = 2000 if size <= (4 << 10) else 200 if size <= (4 << 20) else 20
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

    python_us, cxx_us, ratios = [], [], []
    for _ in range(args.pairs):
      cxx_us.append(s._core._benchmark_all_reduce(size, calls))
      s.run(body)
      python_us.append(timings[0])
      ratios.append(python_us[-1] / cxx_us[-1])
    row = {"case": f"all_reduce {size} B, 2 replicas", "us": round(statistics.median(python_us), 1),
           "cxx_same_process_us": round(statistics.median(cxx_us), 1),
           "ratio": round(statistics.median(ratios), 3),
           "ratios": [round(r, 2) for r in ratios]}
    if str(size) in args.cxx:
      row["cxx_us"] = args.cxx[str(size)]
    results.append(row)
  if "ctrl-c" in cases:
    results += ctrl_c_latency(s)
  for row in results:
    print(json.dumps(row))


def ctrl_c_latency(strategy, rounds=10):
  """Seconds from a SIGINT to the KeyboardInterrupt out of run()."""
  def busy(seconds=30.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
      pass

  def waits_for_busy_replica():
    if dist.get_replica_context().replica_id_in_sync_group == 1:
      busy()

  def caller_in_all_reduce():
    ctx = dist.get_replica_context()
    if ctx.replica_id_in_sync_group == 1:
      busy()
    ctx.all_reduce("sum", np.ones(4, np.float32))

  rows = []
  for name, fn in (("run waiting for a busy replica", waits_for_busy_replica),
                   ("caller's replica in all_reduce", caller_in_all_reduce)):
    latencies = []
    for _ in range(rounds):
      sent = []

      def send():
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

      timer = threading.Timer(0.1, send)
      timer.start()
      try:
        strategy.run(fn)
      except KeyboardInterrupt:
        latencies.append((time.perf_counter() - sent[0]) * 1e3)
      timer.join()
    rows.append({"case": f"ctrl-c, {name}", "median_ms": round(statistics.median(latencies), 1),
                 "max_ms": round(max(latencies), 1), "poll_interval_ms": 50, "target_ms": 1000})
  return rows


if __name__ == "__main__":
  main()
