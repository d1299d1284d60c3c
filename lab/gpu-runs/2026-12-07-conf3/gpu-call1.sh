#!/usr/bin/env bash
# GPU call 1 (2026-12-07 conf3): the conformance suite (cudart and -cudart
# none builds, all eight scenarios), and the fork probe under both runtimes.
set -uo pipefail
b=$(pwd)/.gpu-bundle-rt
r=$OUT/conf3
mkdir -p "$r"
nvidia-smi --query-gpu=name,driver_version,pci.sub_device_id --format=csv,noheader | tee "$r/gpu.txt"
conf=$b/conformance
here=lab/gpu-runs/2026-12-07-conf3
/usr/local/cuda/bin/nvcc -O1 -o /tmp/fork_cudart "$here/fork_probe.cpp" &
/usr/local/cuda/bin/nvcc -O1 -cudart none -o /tmp/fork_drvshim "$here/fork_probe.cpp" -L"$b/lib" -l:libdrvshim_cudart.so.0 -Xlinker -rpath="$b/lib" &
pre=(--no-driver-preload "$conf/no_driver.so" --jobs 16 --timeout 30)
t0=$SECONDS
python3 "$conf/run.py" "$conf/conf_cudart" "$r/cudart" "${pre[@]}"
echo "cudart: $((SECONDS - t0)) s"
python3 "$conf/run.py" "$conf/conf_drvshim" "$r/drvshim" "${pre[@]}"
echo "drvshim: $((SECONDS - t0)) s"
python3 "$conf/compare.py" "$r/cudart" "$r/drvshim" --explained "$conf/explained.txt" > "$r/diff-drvshim.txt"
python3 "$conf/compare.py" "$r/cudart" "$r/drvshim" --explained "$conf/explained.txt" --table > "$r/table-drvshim.md"
tail -n 3 "$r/diff-drvshim.txt"
wait
for way in cudart drvshim; do
  for env in "" "CUDA_VISIBLE_DEVICES="; do
    echo "fork $way ${env:-(device)}: $(env $env /tmp/fork_$way 2>&1 | tr '\n' ' ')" | tee -a "$r/fork.txt"
  done
done
grep -v "^cuda" "$r/diff-drvshim.txt" | head -5
head -c 4000 "$r/diff-drvshim.txt"
(cd "$OUT" && tar czf conf3.tgz conf3 && rm -rf conf3)
