#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs, on the GPU machine, everything that needs the real driver, from a
# bundle built on the CPU machine (tools/gpu/bundle.sh), and writes every log
# into one results folder:
#   tools/gpu/run-gpu-suite.sh [BUNDLE_DIR] [RESULTS_DIR]
# Defaults: .gpu-bundle and ./gpu-results.
# Exit code: non-zero when any GPU test failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:-$root/.gpu-bundle}
results=${2:-$root/gpu-results}
mkdir -p "$results"
status=0

{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:  $(cat "$bundle/COMMIT" 2>/dev/null | tr '\n' ' ' || echo unknown)"
  echo "host:    $(uname -srm)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu:     /'
} | tee "$results/machine.txt"

echo "== drvshim-probe =="
"$bundle/tools/drvshim-probe" 2>&1 | tee "$results/probe.txt"
echo "probe exit code: ${PIPESTATUS[0]}" | tee -a "$results/probe.txt"
"$bundle/tools/drvshim-probe" --json --bandwidth > "$results/probe.json" 2>/dev/null
echo "probe --json --bandwidth exit code: $?"

for suite in drvshim_gpu_tests drvshim_gpu_interop; do
  echo "== $suite =="
  # The two-GPU tests (MultiGpu*) run in their own step below, where there are two devices.
  "$bundle/tests/$suite" --gtest_filter='-MultiGpu*' 2>&1 | tee "$results/$suite.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  if grep -q "\[  SKIPPED \]" "$results/$suite.txt"; then
    echo "$suite: tests were skipped: no usable driver here" | tee -a "$results/$suite.txt"
    status=1
  fi
done

if [[ ${DRVSHIM_SKIP_SANITIZER:-0} != 1 ]]; then
  echo "== compute-sanitizer memcheck over the GPU tests =="
  "$root/tools/gpu/sanitize-gpu-tests.sh" "$bundle" "$results" || status=1
fi

echo "== examples =="
export DRVSHIM_CACHE_DIR=${DRVSHIM_CACHE_DIR:-$(mktemp -d /tmp/drvshim-example-cache-XXXXXX)}
: > "$results/examples.txt"
for ex in init_order nvrtc_kernel zero_copy_vadd pinned_stream_copy; do
  echo "== examples/$ex ==" | tee -a "$results/examples.txt"
  "$bundle/examples/$ex" 2>&1 | tee -a "$results/examples.txt"
  rc=${PIPESTATUS[0]}
  echo "$ex exit code: $rc" | tee -a "$results/examples.txt"
  [[ $rc -eq 0 ]] || status=1
done

echo "== Runtime-API programs on libdrvshim_cudart.so (nvcc -cudart none) =="
for policy in lazy eager; do
  for prog in vector_add zero_copy streams; do
    echo "== runtime_api/$prog, DRVSHIM_RT_POLICY=$policy ==" | tee -a "$results/examples.txt"
    DRVSHIM_RT_POLICY=$policy DRVSHIM_RT_TRACE=1 "$bundle/tests/runtime_api/$prog" 2>&1 | tee -a "$results/examples.txt"
    rc=${PIPESTATUS[0]}
    echo "$prog ($policy) exit code: $rc" | tee -a "$results/examples.txt"
    [[ $rc -eq 0 ]] || status=1
  done
done

if [[ ${DRVSHIM_SKIP_BENCH:-0} != 1 ]]; then
  echo "== bench_transfers =="
  "$bundle/tools/bench_transfers" "$results/bench_transfers.md" 2>&1
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi

if [[ ${DRVSHIM_SKIP_LAUNCH_BENCH:-0} != 1 ]]; then
  echo "== launch cost (three rounds, the variants alternating) =="
  out="$results/bench_launch.md"
  : > "$out"
  for round in 1 2 3; do
    echo "round $round" >> "$out"
    "$bundle/tools/bench_launch" "$bundle/tests/kernels/kernels.cubin" "$out" || status=1
    "$bundle/tools/bench_launch_cudart" "$out" || status=1
    PYTHONUNBUFFERED=1 python3 "$bundle/tools/bench_launch_cudacore.py" "$bundle/tests/kernels/kernels.cubin" "$out" \
      || echo "cuda.core benchmark failed (see above)" | tee -a "$out"
  done
  cat "$out"
fi

if [[ ${DRVSHIM_SKIP_STAGING_BENCH:-0} != 1 ]]; then
  echo "== staging engine and pinned pool =="
  "$bundle/tools/bench_staging" "$results/bench_staging.md" || status=1
  # The CPU budget: the process restricted to 1, 2, 4 and 8 CPUs (as a container
  # CPU limit would), where staging must never be slower than the driver's own path.
  for cpus in 0 0-1 0-3 0-7; do
    # taskset accepts a list naming CPUs the machine lacks and runs on the rest.
    if (( ${cpus##*-} >= $(nproc --all) )); then
      echo "== taskset -c $cpus: this machine lacks those CPUs, skipped ==" | tee -a "$results/bench_staging_cpus.md"
      continue
    fi
    echo "== staging copies with taskset -c $cpus ==" | tee -a "$results/bench_staging_cpus.md"
    echo "### taskset -c $cpus" >> "$results/bench_staging_cpus.md"
    taskset -c "$cpus" "$bundle/tools/bench_staging" "$results/bench_staging_cpus.md" copies || status=1
  done
fi

if [[ ${DRVSHIM_SKIP_COMPILE_BENCH:-0} != 1 ]]; then
  echo "== compile cache: drvshim vs CuPy RawModule =="
  out="$results/bench_compile.md"
  : > "$out"
  cache_dir=$(mktemp -d /tmp/drvshim-bench-cache-XXXXXX)
  "$bundle/tools/bench_compile" "$out" "$cache_dir/c" || status=1
  PYTHONUNBUFFERED=1 python3 "$bundle/tools/bench_compile_cupy.py" "$out" || echo "CuPy benchmark failed (see above)" | tee -a "$out"
  rm -rf "$cache_dir"
fi

devices=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [[ ${devices:-0} -ge 2 ]]; then
  echo "== $devices devices: the two-GPU tests, contract cases and bench_peer (tools/gpu/run-multi-gpu.sh) =="
  "$root/tools/gpu/run-multi-gpu.sh" "$bundle" "$results" || status=1
else
  echo "== ${devices:-0} device(s): the two-GPU tests and bench_peer need two (a machine with two GPUs); not run =="
fi

echo "== init trace (DRVSHIM_TRACE_FILE) =="
DRVSHIM_TRACE_FILE=/tmp/drvshim_probe_trace.jsonl "$bundle/tools/drvshim-probe" >/dev/null 2>&1
head -n 12 /tmp/drvshim_probe_trace.jsonl 2>/dev/null

echo "gpu suite exit status: $status"
exit $status
