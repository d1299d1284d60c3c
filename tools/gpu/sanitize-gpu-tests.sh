#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# compute-sanitizer memcheck (with leak check) over the single-GPU tests, on
# the GPU machine:
#   tools/gpu/sanitize-gpu-tests.sh BUNDLE_DIR RESULTS_DIR
# Passes when memcheck reports 0 memory errors and 0 leaks, and every CUDA API
# error it saw is one a test provokes on purpose (the list below, each with
# the reason). The test that faults a kernel on purpose (an illegal address,
# in a child process) is left out: memcheck would report the fault it exists
# to cause.
set -uo pipefail
bundle=${1:?bundle}
results=${2:?results}
sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
log="$results/compute-sanitizer.txt"
report="$results/compute-sanitizer-summary.txt"

# API errors the tests cause on purpose: "API | error | why".
expected=$(cat <<'LIST'
cuFuncGetParamInfo|CUDA_ERROR_INVALID_VALUE|the parameter probe ends at the first index past the last parameter
cuModuleLoadDataEx|CUDA_ERROR_INVALID_PTX|tests load PTX with a syntax error to check the JIT log
cuLibraryLoadData|CUDA_ERROR_INVALID_PTX|tests load PTX with a syntax error to check the JIT log
cuKernelGetFunction|CUDA_ERROR_INVALID_PTX|lazy loading: the broken library's JIT error comes at the first binding
cuLibraryGetKernel|CUDA_ERROR_INVALID_PTX|lazy loading: the broken library's JIT error comes at the first kernel lookup
cuLinkAddData|CUDA_ERROR_INVALID_PTX|the JIT log of a broken image, run through the linker again
cuModuleLoadDataEx|CUDA_ERROR_INVALID_IMAGE|tests load an image that is not one
cuModuleLoadDataEx|CUDA_ERROR_NO_BINARY_FOR_GPU|a cubin for another architecture is refused
cuModuleGetFunction|CUDA_ERROR_NOT_FOUND|a missing kernel is named with the module's kernels
cuLibraryGetKernel|CUDA_ERROR_NOT_FOUND|a missing kernel is named with the library's kernels
cuModuleGetGlobal|CUDA_ERROR_NOT_FOUND|a missing global is named
cuDevicePrimaryCtxSetFlags|CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE|contract case: flags set after activation
cuMemHostRegister|CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED|registration contract cases: overlapping ranges
cuMemHostRegister|CUDA_ERROR_INVALID_VALUE|registration contract case: pinned memory registered again
cuMemHostUnregister|CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED|registration contract case: unregistered twice
cuMemAlloc|CUDA_ERROR_OUT_OF_MEMORY|an allocation larger than the device, for the error's numbers
cuEventElapsedTime|CUDA_ERROR_INVALID_HANDLE|elapsed() of an event without timing
cuDeviceGetAttribute|CUDA_ERROR_INVALID_VALUE|attributes unknown to this driver read as "unknown"
cuInit|CUDA_ERROR_NOT_INITIALIZED|the fork test: CUDA cannot be initialised again in a child
LIST
)

"$sanitizer" --tool memcheck --leak-check full --report-api-errors explicit --print-limit 10000 \
  --target-processes all --error-exitcode 0 \
  "$bundle/tests/drvshim_gpu_tests" --gtest_filter='-MultiGpu*:*IllegalAddress*' > "$log" 2>&1
rc=$?
status=0
{
  echo "compute-sanitizer memcheck over drvshim_gpu_tests (exit $rc)"
  grep -E "ERROR SUMMARY|LEAK SUMMARY|========= (Leaked|Invalid)" "$log" | sort | uniq -c
  echo
  echo "CUDA API errors reported (count, API, error) and whether a test causes them on purpose:"
  # memcheck writes: Program hit CUDA_ERROR_X (error N) due to "text" on CUDA API call to cuY_v2.
  grep -oE "Program hit [A-Za-z_]+ \(error [0-9]+\) due to \"[^\"]*\" on CUDA API call to [A-Za-z0-9_]+" "$log" |
    sed -E 's/Program hit ([A-Za-z_]+) .* on CUDA API call to ([A-Za-z0-9_]+)/\2|\1/' | sort | uniq -c |
    while read -r count key; do
      api=${key%%|*}
      base=${api%_v[0-9]*}
      err=${key#*|}
      why=$(printf '%s\n' "$expected" | awk -F'|' -v a="$base" -v e="$err" '$1 == a && $2 == e { print $3 }')
      if [[ -n $why ]]; then
        echo "  $count  $api  $err  expected: $why"
      else
        echo "  $count  $api  $err  UNEXPECTED"
      fi
    done
} > "$report"
cat "$report"
if grep -q "UNEXPECTED" "$report"; then status=1; fi
# Memory errors: every "ERROR SUMMARY" line must say 0 errors (API errors are listed above).
if grep -E "ERROR SUMMARY: [1-9]" "$log" >/dev/null; then
  api_only=$(grep -cE "Program hit" "$log")
  errors=$(grep -E "ERROR SUMMARY" "$log" | grep -oE "[0-9]+ error" | awk '{s += $1} END {print s + 0}')
  if [[ $errors -gt $api_only ]]; then
    echo "memcheck found $((errors - api_only)) error(s) besides the API errors above" | tee -a "$report"
    status=1
  fi
fi
if grep -qE "Leaked [0-9]+ bytes" "$log"; then
  echo "memcheck found leaks" | tee -a "$report"
  status=1
fi
if grep -qE "\[  FAILED  \]" "$log"; then
  echo "tests failed under compute-sanitizer" | tee -a "$report"
  status=1
fi
echo "compute-sanitizer status: $status" | tee -a "$report"
exit $status
