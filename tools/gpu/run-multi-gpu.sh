#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The two-GPU part of the GPU suite (a machine with two GPUs), from a bundle built
# on the CPU machine (tools/gpu/bundle.sh); run-gpu-suite.sh calls it when it
# finds two devices, and it runs on its own too:
#   tools/gpu/run-multi-gpu.sh [BUNDLE_DIR] [RESULTS_DIR]
# Writes into RESULTS_DIR: machine_multi.txt (devices, topology), probe_multi.txt
# and probe_multi.json (every device's section, the P2P links, with --bandwidth
# the P2P bandwidth and latency matrices and H2D/D2H per device),
# multi_gpu_tests.txt (the MultiGpu* GPU tests and the two-device contract
# cases), multi_gpu_interop.txt (the Runtime enables peer access first),
# init_order_multi.txt (both devices' primary-context lifecycles), bench_peer.md.
# Exit code: non-zero when a test failed or was skipped (two devices are expected here).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:-$root/.gpu-bundle}
results=${2:-$root/gpu-results}
mkdir -p "$results"
status=0
commit=$(head -n1 "$bundle/COMMIT" 2>/dev/null || echo unknown)

{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:  $(tr '\n' ' ' < "$bundle/COMMIT" 2>/dev/null || echo unknown)"
  nvidia-smi -L 2>&1
  nvidia-smi topo -m 2>&1
} | tee "$results/machine_multi.txt"
devices=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [[ ${devices:-0} -lt 2 ]]; then
  echo "run-multi-gpu: $devices device(s) here; the two-GPU tests need two (a machine with two GPUs)" | tee -a "$results/machine_multi.txt"
  exit 1
fi

echo "== drvshim-probe on $devices devices =="
"$bundle/tools/drvshim-probe" --bandwidth 2>&1 | tee "$results/probe_multi.txt"
echo "probe --bandwidth exit code: ${PIPESTATUS[0]}" | tee -a "$results/probe_multi.txt"
"$bundle/tools/drvshim-probe" --json --bandwidth > "$results/probe_multi.json" 2>/dev/null
rc=$?
echo "probe --json --bandwidth exit code: $rc"
[[ $rc -eq 0 ]] || status=1

run_suite() {  # binary, output file
  "$bundle/tests/$1" --gtest_filter='MultiGpu*' 2>&1 | tee "$results/$2"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
  if grep -q "\[  SKIPPED \]" "$results/$2"; then
    echo "$1: tests were skipped although $devices devices are present" | tee -a "$results/$2"
    status=1
  fi
}
echo "== two-GPU tests and contract cases =="
run_suite drvshim_gpu_tests multi_gpu_tests.txt
echo "== two GPUs next to the CUDA Runtime =="
run_suite drvshim_gpu_interop multi_gpu_interop.txt

echo "== examples/init_order: every device's primary context =="
"$bundle/examples/init_order" 2>&1 | tee "$results/init_order_multi.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

if [[ ${DRVSHIM_SKIP_PEER_BENCH:-0} != 1 ]]; then
  echo "== bench_peer: peer copies against raw calls, the probe's P2P bandwidth against nvbandwidth's way =="
  "$bundle/tools/bench_peer" "$results/bench_peer.md" "$commit" || status=1
fi

echo "two-GPU suite exit status: $status"
exit $status
