#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs, on the GPU machine, the differential conformance suite built by
# tools/gpu/build-runtime-api.sh three ways: against the toolkit's cudart
# (the reference), on libdrvshim_cudart (nvcc -cudart none) and as the
# unchanged cudart build on the drop-in libcudart.so.13; compares each with
# the reference (tests/runtime_api/conformance/compare.py).
#   tools/gpu/run-conformance.sh [BUNDLE_DIR] [RESULTS_DIR] [run.py options...]
# Exit code: non-zero when a case differs and is not explained.
set -uo pipefail
bundle=$(cd "${1:-.gpu-bundle-rt}" && pwd)
results=${2:-./gpu-results/conformance}
shift $(( $# >= 2 ? 2 : $# ))
mkdir -p "$results"
conf=$bundle/conformance
explained=()
[[ -f $conf/explained.txt ]] && explained=(--explained "$conf/explained.txt")
{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:  $(tr '\n' ' ' < "$bundle/COMMIT" 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu:     /'
} > "$results/summary.txt"
preload=(--no-driver-preload "$conf/no_driver.so")
python3 "$conf/run.py" "$conf/conf_cudart" "$results/cudart" "${preload[@]}" "$@"
python3 "$conf/run.py" "$conf/conf_drvshim" "$results/drvshim" "${preload[@]}" "$@"
LD_LIBRARY_PATH=$bundle/lib/drvshim/cudart python3 "$conf/run.py" "$conf/conf_cudart" "$results/dropin" "${preload[@]}" "$@"
status=0
for way in drvshim dropin; do
  python3 "$conf/compare.py" "$results/cudart" "$results/$way" "${explained[@]}" > "$results/diff-$way.txt" || status=1
  python3 "$conf/compare.py" "$results/cudart" "$results/$way" "${explained[@]}" --table > "$results/table-$way.md"
  echo "$way: $(tail -n 2 "$results/diff-$way.txt" | head -n 1)" | tee -a "$results/summary.txt"
done
exit $status
