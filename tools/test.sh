#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds everything and runs all tests (installing the build's packages first):
#   1. the main build: unit tests against the fake driver, the export check,
#      and the GPU tests (reported as skipped where there is no driver);
#   2. a few planted bugs (tools/dev/mutants.toml, those marked for CI), each
#      of which the unit tests must catch;
#   3. the sanitizer lanes: the unit tests rebuilt with ASan+UBSan, and with
#      TSan (the concurrency stress tests among them), and run again.
# This is the README's test command and what .ci/run runs.
#
#   tools/test.sh           everything (what CI runs)
#   tools/test.sh --quick   the main build and its unit tests only (no GPU, lint, packaging or sanitizer lanes)
#
# Builds use Ninja where it is installed, and ccache where it is installed
# (CCACHE_BASEDIR is the checkout, so a second clone hits the first one's cache).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
quick=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h | --help) sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tools/test.sh: unknown argument \"$arg\"; accepted: --quick, --help" >&2; exit 2 ;;
  esac
done
"$root/tools/setup-deps.sh"
jobs=$(nproc)
start=$SECONDS

# The generator for a build directory: Ninja when installed, unless the
# directory was configured with another one before (CMake refuses to switch).
generator_args() {
  local dir=$1
  if [[ -f $dir/CMakeCache.txt ]]; then
    return 0
  fi
  if command -v ninja >/dev/null; then
    echo "-GNinja"
  fi
}
if command -v ccache >/dev/null; then
  # NOHASHDIR: with -g the working directory is hashed by default, which would
  # keep a second clone from hitting.
  # SLOPPINESS: ccache caches nothing built with precompiled headers (the
  # unit tests) unless told which of their inputs to ignore.
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 \
    CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
fi
lane_time() { echo "-- $1 took $(((SECONDS - lane_start) / 60))m$(((SECONDS - lane_start) % 60))s"; lane_start=$SECONDS; }
lane_start=$SECONDS

echo "== main build =="
build=${DRVSHIM_BUILD_DIR:-$root/build}
# A mutation check killed before it could restore the checkout left its
# journal in the build: put the file back before building anything.
if [[ -f $build/mutate-journal.json ]]; then
  python3 "$root/tools/dev/mutate.py" --in-place --build-dir "$build" --restore
fi
cmake -S "$root" -B "$build" $(generator_args "$build") -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j"$jobs"
if ((quick)); then
  (cd "$build" && ctest --output-on-failure -j"$jobs" --timeout 300 -L unit)
  lane_time "quick run (main build and unit tests)"
  exit 0
fi
(cd "$build" && ctest --output-on-failure -j"$jobs" --timeout 300 -LE gpu)
lane_time "main build and tests"

echo "== mutation check (the mutants marked for CI) =="
# A few of tools/dev/mutants.toml's planted bugs, each of which its tests must
# catch, so the tool and the list cannot rot; the checkout is restored and the
# build rebuilt afterwards. The whole list: CONTRIBUTING.md, "Run the mutation tests".
python3 "$root/tools/dev/mutate.py" --in-place --build-dir "$build" --ci --jobs "$jobs"
lane_time "mutation check"

echo "== GPU tests (real driver) =="
# Without a driver every GPU test reports "skipped" with the reason; ctest then
# still prints "100% tests passed", so say plainly that nothing ran.
gpu_log=$(mktemp)
(cd "$build" && ctest --output-on-failure -j"$jobs" --timeout 600 -L gpu) | tee "$gpu_log"
skipped=$(grep -c "(Skipped)" "$gpu_log" || true)
if [[ $skipped -gt 0 ]]; then
  echo "GPU tests: $skipped skipped (no usable CUDA driver or device here); they are not counted as passed."
fi
rm -f "$gpu_log"

echo "== sanitizer lane (ASan + UBSan) =="
asan=${DRVSHIM_ASAN_BUILD_DIR:-$root/build-asan}
cmake -S "$root" -B "$asan" $(generator_args "$asan") -DCMAKE_BUILD_TYPE=Debug -DDRVSHIM_SANITIZE=ON -DDRVSHIM_BUILD_TOOLS=ON
cmake --build "$asan" -j"$jobs" --target drvshim_unit_tests drvshim_recorder_tests drvshim_exit_program drvshim_fakecuda_nov2 drvshim-probe drvshim_cache_worker drvshim_fault_sweep \
  init_order zero_copy_vadd pinned_stream_copy nvrtc_kernel
asan_env=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
if ! (cd "$asan" && env "${asan_env[@]}" ctest --output-on-failure -j"$jobs" -L unit --timeout 300); then
  # No retry of failures in general. The one exception is a named sanitizer
  # bug: LeakSanitizer's own tracer thread can crash at exit ("Tracer caught
  # signal 11 ... LeakSanitizer has encountered a fatal error",
  # google/sanitizers issue 1353; seen on example_zero_copy_vadd after it had
  # printed a correct result, and every time on a test that ran NVRTC, reading
  # a dynamic-TLS block at an address like 0x1aad). Only when every failure is
  # that crash are those tests, and only those, run once more, with the leak
  # check off: the crash means LeakSanitizer could not check them at all, and
  # AddressSanitizer and UBSan still check every access. A leak or any other
  # error fails the lane.
  retry=$(python3 "$root/tools/dev/lsan_tracer_crashes.py" "$asan") || exit 1
  echo "ASan lane: LeakSanitizer's tracer crashed at exit in $retry; running those tests once more without the leak check"
  (cd "$asan" && env ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -R "$retry" --timeout 300)
fi

lane_time "ASan+UBSan lane"

echo "== sanitizer lane (TSan) =="
tsan=${DRVSHIM_TSAN_BUILD_DIR:-$root/build-tsan}
cmake -S "$root" -B "$tsan" $(generator_args "$tsan") -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDRVSHIM_SANITIZE=thread -DDRVSHIM_BUILD_TOOLS=ON \
  -DDRVSHIM_BUILD_EXAMPLES=OFF
cmake --build "$tsan" -j"$jobs" --target drvshim_unit_tests drvshim_recorder_tests drvshim_exit_program drvshim_fakecuda_nov2 drvshim-probe drvshim_cache_worker
# Any report fails the test (halt_on_error); the suppressions file lists what
# is not drvshim's and why.
(cd "$tsan" && TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tools/tsan.supp" \
  ctest --output-on-failure -j"$jobs" -L unit -LE sweep --timeout 600)
lane_time "TSan lane"
echo "== all lanes passed in $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s =="
