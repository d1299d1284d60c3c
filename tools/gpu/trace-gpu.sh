#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# drvshim-trace on the GPU machine, from a bundle built on the CPU
# machine (tools/gpu/bundle.sh). Traces a static-cudart program, a
# -cudart shared one, PyTorch, CuPy and cuda.core one-liners, drvshim's own
# example and a runtime_compat program, once with CUPTI; runs the overhead
# benchmarks; writes everything under one folder:
#   tools/gpu/trace-gpu.sh [BUNDLE_DIR] [RESULTS_DIR]
# Defaults: .gpu-bundle and ./gpu-results/trace.
# For each case: <case>.jsonl (the trace), <case>.chrome.json (ui.perfetto.dev),
# <case>.report.txt (timeline, summary, diagnostics), <case>.out (the program's output
# and the tracer's messages), and a line in summary.txt. Exit code: non-zero when a
# case that must work failed (a missing Python package is reported, not failed).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=${1:-$root/.gpu-bundle}
results=${2:-$root/gpu-results/trace}
mkdir -p "$results"
tracer="$bundle/tools/trace/drvshim-trace"
summary="$results/summary.txt"
status=0
: > "$summary"

{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:  $(cat "$bundle/COMMIT" 2>/dev/null | tr '\n' ' ' || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu:     /'
  python3 -c "import torch; print('torch:  ', torch.__version__, torch.version.cuda)" 2>&1 | tail -n 1
  python3 -c "import cupy; print('cupy:   ', cupy.__version__)" 2>&1 | tail -n 1
  python3 -c "import cuda.core as c; print('cuda.core:', getattr(c, '__version__', '?'))" 2>&1 | tail -n 1
} | tee "$results/machine.txt"

# trace CASE REQUIRED [tracer options] -- COMMAND...
trace() {
  local name=$1 required=$2
  shift 2
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  echo "== $name: $*"
  "$tracer" "${opts[@]}" --json "$results/$name.jsonl" --chrome "$results/$name.chrome.json" \
    --report "$results/$name.report.txt" -- "$@" > "$results/$name.out" 2>&1
  local rc=$?
  local diags
  diags=$(grep -c '^  \[' "$results/$name.report.txt" 2>/dev/null)
  echo "$name: exit $rc, $(grep -c . "$results/$name.jsonl" 2>/dev/null || echo 0) records, ${diags:-0} diagnostic(s)" \
    | tee -a "$summary"
  tail -n 3 "$results/$name.out"
  if [[ $rc -ne 0 && $required == required ]]; then status=1; fi
  return $rc
}

have() { python3 -c "import $1" >/dev/null 2>&1; }

trace cudart_static required -- "$bundle/tests/trace/cudart/cudart_static"
trace cudart_shared required -- "$bundle/tests/trace/cudart/cudart_shared"
trace drvshim_init_order required -- "$bundle/examples/init_order"
trace runtime_compat_vector_add required -- "$bundle/tests/runtime_api/vector_add"
trace cudart_static_summary required --mode summary -- "$bundle/tests/trace/cudart/cudart_static"

# CUPTI: the machine's own libcupti.so.13 when there is one, else the bundled copy.
cupti=$(find / -xdev -name 'libcupti.so.13*' -type f 2>/dev/null | head -n 1)
[[ -n $cupti ]] || cupti=$(ls "$bundle"/tools/trace/cupti/libcupti.so.13 2>/dev/null)
echo "libcupti: ${cupti:-none found}" | tee -a "$summary"
DRVSHIM_TRACE_CUPTI_LIB=$cupti trace cudart_static_cupti required --cupti -- "$bundle/tests/trace/cudart/cudart_static"
echo "cudart_static_cupti: $(grep -c '"kind":"runtime"' "$results/cudart_static_cupti.jsonl") Runtime-API records," \
  "$(grep -c '"rt":' "$results/cudart_static_cupti.jsonl") driver calls with their Runtime-API caller," \
  "$(grep -o '"api":"cupti[a-z-]*","args":"[^"]*' "$results/cudart_static_cupti.jsonl" | head -n 1)" | tee -a "$summary"

torch_code="import torch; x = torch.ones(1024, 1024, device='cuda'); print((x @ x).sum().item())"
cupy_code="import cupy as cp; x = cp.ones((1024, 1024), dtype=cp.float32); print(float((x @ x).sum()))"
cudacore_code="
try:
    from cuda.core import Device
except ImportError:
    from cuda.core.experimental import Device
d = Device(0); d.set_current(); s = d.create_stream(); buf = d.allocate(1 << 20, stream=s); s.sync(); print(d.name)"
if have torch; then
  if ! trace torch optional -- python3 -c "$torch_code"; then
    echo "torch failed under drvshim-trace; again without the LD_AUDIT module" | tee -a "$summary"
    trace torch_no_audit optional --no-audit -- python3 -c "$torch_code"
  fi
  trace torch_cupti optional --cupti -- python3 -c "$torch_code"
else
  echo "torch: not installed, skipped" | tee -a "$summary"
fi
jax_code="import jax.numpy as jnp; x = jnp.ones((1024, 1024)); print(float((x @ x).sum()))"
numba_code="from numba import cuda; import numpy as np; a = cuda.to_device(np.ones(1024)); print(a.copy_to_host().sum())"
if have jax; then trace jax optional -- python3 -c "$jax_code"; else echo "jax: not installed, skipped" | tee -a "$summary"; fi
if have numba; then trace numba optional -- python3 -c "$numba_code"; else echo "numba: not installed, skipped" | tee -a "$summary"; fi
# How an image ends, on the real driver: the records before an exec, _exit, a fatal signal,
# a fork worker's _exit, and a program that closes its descriptors, must all be there.
export LD_LIBRARY_PATH="$bundle/tests/trace${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
scenarios="$bundle/tests/trace/trace_scenarios"
for ending in exec _exit SIGSEGV SIGABRT SIGTERM; do
  trace "end_$ending" optional -- "$scenarios" end "$ending"
done
trace fork_worker optional -- "$scenarios" fork-worker
trace close_fds optional -- "$scenarios" close-fds "$results/close_fds.own.txt"
python3 - "$results" <<'PY' | tee -a "$summary"
import json, os, sys
results = sys.argv[1]
for case in ("end_exec", "end__exit", "end_SIGSEGV", "end_SIGABRT", "end_SIGTERM", "fork_worker", "close_fds"):
    path = os.path.join(results, case + ".jsonl")
    if not os.path.exists(path):
        print(f"{case}: no trace")
        continue
    records = [json.loads(l) for l in open(path) if l.strip()]
    calls = [r for r in records if r["kind"] == "call" and r.get("lib") == "trace_scenarios"]
    ends = [r["args"] for r in records if r["kind"] == "process" and r["api"] in ("trace-end", "exec")]
    print(f"{case}: {len(calls)} calls of the program recorded, ended: {'; '.join(ends) or 'no final record'}")
own = os.path.join(results, "close_fds.own.txt")
if os.path.exists(own):
    print(f"close_fds: the program's own file holds {open(own).read()!r}")
PY

if have cupy; then trace cupy optional -- python3 -c "$cupy_code"; else echo "cupy: not installed, skipped" | tee -a "$summary"; fi
if have cuda.core; then trace cuda_core optional -- python3 -c "$cudacore_code"; else echo "cuda.core: not installed, skipped" | tee -a "$summary"; fi

if have triton && have torch; then
  triton_script="$results/triton_add.py"
  cat > "$triton_script" <<'PY'
import torch
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


x = torch.ones(4096, device="cuda")
y = torch.empty_like(x)
add_one[(4,)](x, y, 4096, BLOCK=1024)
print(y.sum().item())
PY
  trace triton optional -- python3 "$triton_script"
else
  echo "triton: not installed, skipped" | tee -a "$summary"
fi
# The Runtime's own probes (cuCtxGetDevice on a thread with no context) must not be findings.
for case in torch triton cupy jax numba cuda_core; do
  [[ -f $results/$case.report.txt ]] || continue
  echo "$case: $(grep -c 'no-current-context' "$results/$case.report.txt") no-current-context," \
    "$(grep -c 'unbalanced-context-stack' "$results/$case.report.txt") unbalanced-context-stack line(s)" \
    | tee -a "$summary"
done

echo "== in-process trace (drvshim-probe --trace) =="
"$bundle/tools/drvshim-probe" --trace "$results/probe_inprocess.jsonl" > "$results/probe_inprocess.out" 2>&1
echo "drvshim-probe --trace: exit $?, $(grep -c . "$results/probe_inprocess.jsonl") records" | tee -a "$summary"
"$tracer" --analyse "$results/probe_inprocess.jsonl" --report "$results/probe_inprocess.report.txt"

if [[ ${DRVSHIM_SKIP_TRACE_BENCH:-0} != 1 ]]; then
  echo "== overhead: launch loop untraced / summary / full =="
  out="$results/overhead.md"
  : > "$out"
  # Driver API: rounds interleaved in 5 processes (the decision) and 7 repetitions of whole
  # processes; cudart: 9 repetitions of whole processes. Medians, 95 % intervals, spread, verdict.
  "$bundle/tools/bench_trace" --tracer "$tracer" --workload self --processes 5 --rounds 60 --repeat 7 \
    --out "$out" || status=1
  "$bundle/tools/bench_trace" --tracer "$tracer" --workload "cudart:$bundle/tools/bench_launch_cudart" --repeat 9 \
    --out "$out" || status=1
  echo "== the recorder's own cost (in-process trace) =="
  "$bundle/tools/bench_trace_recorder" 200000 "$results/recorder.md" || status=1
  cat "$out"
fi

if have torch && [[ ${DRVSHIM_SKIP_TORCH_BENCH:-0} != 1 ]]; then
  echo "== overhead on a launch-bound PyTorch loop =="
  "$bundle/tools/bench-trace-torch.sh" "$bundle" "$results" "${DRVSHIM_TORCH_ROUNDS:-10}" 20000
fi

echo "trace-gpu exit status: $status" | tee -a "$summary"
exit $status
