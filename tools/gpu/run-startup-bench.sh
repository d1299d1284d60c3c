#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Start-up to the first kernel's result, on the GPU machine, from a
# bundle built on the CPU machine (tools/gpu/bundle.sh): the CUDA Runtime
# (lazy), drvshim explicit and background initialisation, runtime_compat under
# lazy / eager / background, with T = 0, 100 and 300 ms of host work before
# the first kernel, one fresh process per sample; on one GPU, and on two when
# the machine has them. Writes RESULTS_DIR/startup.md (with date, commit and GPU).
#   tools/gpu/run-startup-bench.sh [BUNDLE_DIR] [RESULTS_DIR] [bench_startup options...]
# Defaults: .gpu-bundle and ./gpu-results;
# options default to 11 samples of busy host work (see tools/bench/bench_startup.cpp).
# As a smoke test against the fake driver, on any machine:
#   DRVSHIM_LIBCUDA=build-dev/tests/libdrvshim_fakecuda.so DRVSHIM_FAKE_INIT_DELAY_MS=100 \
#     build-dev/tools/bench_startup --samples 3
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:-$root/.gpu-bundle}
results=${2:-$root/gpu-results}
shift $(( $# >= 2 ? 2 : $# ))
mkdir -p "$results"
out=$results/startup.md
devices=1
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [[ ${gpus:-0} -ge 2 ]]; then devices=1,2; fi
{
  echo "# bench_startup"
  echo
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:  $(tr '\n' ' ' < "$bundle/COMMIT" 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu:     /'
  echo "cpus:    $(nproc)"
  echo
} > "$out"
"$bundle/tools/bench_startup" --devices "$devices" --out "$out" "$@"
status=$?
echo "bench_startup exit code: $status" | tee -a "$out"
exit $status
