#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs tools/gpu/torch_on_drvshim.py on the GPU machine twice, under the
# real cudart and with the drop-in preloaded (libcudart.so.13 of the
# runtime bundle, tools/gpu/build-runtime-api.sh), and diffs the two.
#   tools/gpu/torch-on-drvshim.sh [BUNDLE_DIR] [RESULTS_DIR]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=$(cd "${1:-.gpu-bundle-rt}" && pwd)
results=${2:-./gpu-results/torch}
mkdir -p "$results"
{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:  $(tr '\n' ' ' < "$bundle/COMMIT" 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu:     /'
  python3 -c 'import torch; print("torch:  ", torch.__version__)' 2>&1
} > "$results/summary.txt"
python3 "$here/torch_on_drvshim.py" > "$results/cudart.txt" 2> "$results/cudart.err"
echo "cudart exit: $?" >> "$results/summary.txt"
DRVSHIM_RT_TRACE=${DRVSHIM_RT_TRACE:-} LD_PRELOAD=$bundle/lib/drvshim/cudart/libcudart.so.13 \
  python3 "$here/torch_on_drvshim.py" > "$results/drvshim.txt" 2> "$results/drvshim.err"
echo "drvshim exit: $?" >> "$results/summary.txt"
if diff "$results/cudart.txt" "$results/drvshim.txt" > "$results/diff.txt"; then
  echo "identical" >> "$results/summary.txt"
else
  echo "differ: $(grep -c '^>' "$results/diff.txt") lines" >> "$results/summary.txt"
fi
cat "$results/summary.txt"
