#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds, on the CPU machine, what the GPU machine runs, and copies it into
# .gpu-bundle/ (git-ignored; copy it to the GPU machine with the checkout). The layout
# keeps the build tree's relative paths, so the $ORIGIN RPATHs still resolve.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${DRVSHIM_GPU_BUILD_DIR:-$root/build-gpu}
bundle=$root/.gpu-bundle
"$root/tools/setup-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target drvshim drvshim-probe drvshim_gpu_tests drvshim_gpu_interop init_order zero_copy_vadd pinned_stream_copy nvrtc_kernel bench_transfers bench_launch drvshim_bench_launch_cudart bench_compile bench_staging bench_peer drvshim_gpu_kernels drvshim_cudart drvshim_runtime_api_programs \
  drvshim-trace drvshim_trace_interposer drvshim_trace_audit drvshim_trace_preload trace_scenarios bench_trace bench_trace_recorder trace_cudart_programs \
  bench_startup drvshim_bench_startup_programs
rm -rf "$bundle"
mkdir -p "$bundle/driver" "$bundle/tools" "$bundle/tests" "$bundle/examples" "$bundle/runtime_compat"
# Real files, not links: a copy to another machine may keep links only as links.
cp -L "$build/driver/libdrvshim.so.0" "$bundle/driver/libdrvshim.so.0"
cp -L "$build/runtime_compat/libdrvshim_cudart.so.0" "$bundle/runtime_compat/libdrvshim_cudart.so.0"
cp -a "$build/tests/runtime_api" "$bundle/tests/"
cp -a "$build/tools/drvshim-probe" "$bundle/tools/"
cp -a "$build/tests/drvshim_gpu_tests" "$build/tests/drvshim_gpu_interop" "$bundle/tests/"
cp -a "$build/examples/init_order" "$build/examples/zero_copy_vadd" "$build/examples/pinned_stream_copy" \
  "$build/examples/nvrtc_kernel" "$bundle/examples/"
cp -a "$build/tools/bench_transfers" "$build/tools/bench_launch" "$build/tools/bench_launch_cudart" "$bundle/tools/"
cp -a "$build/tools/bench_compile" "$build/tools/bench_staging" "$build/tools/bench_peer" "$bundle/tools/"
cp -a "$root/tools/bench/bench_launch_cudacore.py" "$root/tools/bench/bench_compile_cupy.py" "$bundle/tools/"
# bench_startup (tools/gpu/run-startup-bench.sh) and its two nvcc builds (static cudart; -cudart none).
cp -a "$build/tools/bench_startup" "$build/tools/bench_startup_cudart" "$build/tools/bench_startup_rt" "$bundle/tools/"
cp -a "$build/tests/kernels" "$bundle/tests/"
# drvshim-trace: the command, its interposer and audit module (lib/ next to it), the
# benchmarks, the cudart programs, and the toolkit's CUPTI in case the GPU machine has none.
mkdir -p "$bundle/tools/trace/lib" "$bundle/tools/trace/cupti" "$bundle/tests/trace"
cp -a "$build/tools/trace/drvshim-trace" "$bundle/tools/trace/"
cp -L "$build/tools/trace/lib/libcuda.so.1" "$build/tools/trace/lib/libdrvshim_trace_audit.so" \
  "$build/tools/trace/lib/libdrvshim_trace_preload.so" "$bundle/tools/trace/lib/"
# The scenarios program (how an image ends: exec, _exit, signals) and its helper library.
cp -a "$build/tests/trace/trace_scenarios" "$bundle/tests/trace/"
cp -L "$build/tests/trace/libtrace_helper.so" "$bundle/tests/trace/"
cp -a "$root/tools/bench/bench_trace_torch.py" "$root/tools/gpu/bench-trace-torch.sh" "$bundle/tools/"
cp -a "$build/tools/bench_trace" "$build/tools/bench_trace_recorder" "$bundle/tools/"
cp -a "$build/tests/trace/cudart" "$bundle/tests/trace/"
cupti=$(ls "${DRVSHIM_CUDA_ROOT:-/usr/local/cuda}"/extras/CUPTI/lib64/libcupti.so.13 \
          "${DRVSHIM_CUDA_ROOT:-/usr/local/cuda}"/lib64/libcupti.so.13 "${DRVSHIM_CUDA_ROOT:-/usr/local/cuda}"/lib/libcupti.so.13 \
          2>/dev/null | head -n 1 || true)
if [[ -n $cupti ]]; then cp -L "$cupti" "$bundle/tools/trace/cupti/"; fi
cp -a "$root/tools/gpu/trace-gpu.sh" "$bundle/tools/"
strip --strip-debug "$bundle/driver/libdrvshim.so.0" "$bundle/tools/drvshim-probe" "$bundle/tests/drvshim_gpu_tests" \
  "$bundle/tests/drvshim_gpu_interop" "$bundle/examples/init_order" "$bundle/tools/bench_transfers" \
  "$bundle/tools/bench_launch" "$bundle/tools/bench_compile" "$bundle/tools/bench_staging" "$bundle/tools/bench_peer" \
  "$bundle/tools/trace/drvshim-trace" "$bundle/tools/trace/lib/libcuda.so.1" "$bundle/tools/trace/lib/libdrvshim_trace_audit.so" \
  "$bundle/tools/bench_trace" "$bundle/tools/bench_trace_recorder" "$bundle/tools/bench_startup"
git -C "$root" rev-parse HEAD > "$bundle/COMMIT"
git -C "$root" diff --quiet HEAD || echo "(with uncommitted changes)" >> "$bundle/COMMIT"
echo "bundle: $(du -sh "$bundle" | cut -f1) at $bundle (commit $(git -C "$root" rev-parse --short HEAD))"
