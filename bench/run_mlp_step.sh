#!/usr/bin/env bash
# The trainer's MLP step against one core's floating-point peak and against
# OpenBLAS's sgemm at the same shapes, in one run (issue 14, item 1):
# mlp_step_bench (see its header for what each benchmark does), then the
# medians and the ratios. Needs scripts/setup.sh's packages; the OpenBLAS
# rows need an OpenBLAS (scripts/setup.sh --bench-peers installs it).
# Usage: bench/run_mlp_step.sh   (REPETITIONS, default 5)
set -euo pipefail
cd "$(dirname "$0")/.."

REPETITIONS=${REPETITIONS:-5}
cmake --preset release >/dev/null
cmake --build --preset release --target mlp_step_bench >/dev/null

out=$(mktemp)
trap 'rm -f "$out"' EXIT
build/release/bench/mlp_step_bench --benchmark_repetitions="$REPETITIONS" --benchmark_report_aggregates_only=true \
  --benchmark_out="$out" --benchmark_out_format=json >/dev/null

/usr/bin/python3 - "$out" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
ctx = doc["context"]
print(f"host: {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz, load {ctx.get('load_avg')}")
med = {}
labels = {}
for b in doc["benchmarks"]:
    if b.get("error_occurred"):
        print(f"{b['run_name']}: skipped: {b.get('error_message')}")
        continue
    if b.get("aggregate_name") != "median":
        continue
    med[b["run_name"]] = b
    if b.get("label"):
        labels[b["run_name"]] = b["label"]
def gf(name):
    return med[name]["flops"] / 1e9 if name in med else None
print()
print(f"{'benchmark (median of repetitions)':34} {'CPU time':>12} {'GFLOP/s':>9}")
for name, b in med.items():
    print(f"{name:34} {b['cpu_time'] / 1e3:10.1f} us {b['flops'] / 1e9:9.1f}")
for name, label in labels.items():
    print(f"{name}: {label}")
print()
peak = gf("BM_FmaPeak/avx2")
print("ratios (GFLOP/s over GFLOP/s):")
for rows in (256, 128):
    for isa in ("baseline", "avx2_fma"):
        step = gf(f"BM_MlpStep/{isa}/{rows}")
        blas = gf(f"BM_OpenBlasGemms/{rows}")
        if step is None:
            continue
        parts = []
        if peak:
            parts.append(f"{step / peak:.2f} of the AVX2 FMA peak")
        if blas:
            parts.append(f"{step / blas:.2f}x OpenBLAS's sgemms alone")
        print(f"  MLP step {isa:9} {rows} rows: " + ", ".join(parts))
    blas = gf(f"BM_OpenBlasGemms/{rows}")
    if blas and peak:
        print(f"  OpenBLAS sgemms    {rows} rows: {blas / peak:.2f} of the AVX2 FMA peak")
one = med.get("BM_MlpStep/avx2_fma/256")
two = next((b for n, b in med.items() if n.startswith("BM_MlpStep/avx2_fma_two_threads/128")), None)
if one and two:
    print(f"  2 threads x 128 rows at once: {two['items_per_second']:,.0f} samples/s against "
          f"{one['items_per_second']:,.0f} for 1 thread x 256 rows: a compute ceiling of "
          f"{two['items_per_second'] / one['items_per_second']:.2f}x for the 1-to-2 replica speed-up")
EOF
