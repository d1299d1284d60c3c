#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs, on the GPU machine, the Runtime-API corpus built by
# tools/gpu/build-runtime-api.sh, each program at -O0 and -O2 under the
# toolkit's cudart, on libdrvshim_cudart (nvcc -cudart none; lazy policy, and
# eager for the -O2 build), and as the unchanged cudart binary on the drop-in
# libcudart.so.13 (only LD_LIBRARY_PATH changed), and compares them: exit
# code, standard output and standard error must be identical, apart from
# lines starting "[time]" and drvshim's own log lines ("[drvshim]").
#   tools/gpu/run-runtime-api.sh [BUNDLE_DIR] [RESULTS_DIR] [PROGRAM...]
# Defaults: .gpu-bundle-rt, ./gpu-results, every program of corpus.txt.
# Programs that need two GPUs (mode RUN_DUAL) skip cleanly with one; run them
# on the two-GPU kind by naming them. Exit code: non-zero when any run differs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=${1:-.gpu-bundle-rt}
results=${2:-./gpu-results}
shift $(( $# >= 2 ? 2 : $# ))
bundle=$(cd "$bundle" && pwd)
mkdir -p "$results"
log=$results/runtime-api.txt
summary=$results/runtime-api-summary.txt
: > "$log"
work=$(mktemp -d /tmp/drvshim-rt-run-XXXXXX)
trap 'rm -rf "$work"' EXIT

{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit:  $(tr '\n' ' ' < "$bundle/COMMIT" 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu:     /'
} | tee "$summary"

programs=("$@")
declare -A mode_of=()
while IFS='|' read -r name _ _ _ _ mode; do [[ -n $name ]] && mode_of[$name]=$mode; done < "$bundle/corpus.txt"
if [[ ${#programs[@]} -eq 0 ]]; then
  while IFS='|' read -r name _; do [[ -n $name ]] && programs+=("$name"); done < "$bundle/corpus.txt"
fi

# run LABEL OUTDIR ENV... -- BINARY: stdout, stderr (filtered) and exit code under OUTDIR/LABEL.*
run() {
  local label=$1 dir=$2
  shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 300 "$@" > "$dir/$label.out.raw" 2> "$dir/$label.err.raw"
  echo $? > "$dir/$label.rc"
  grep -v '^\[time\]' "$dir/$label.out.raw" > "$dir/$label.out"
  grep -v '\[drvshim\]' "$dir/$label.err.raw" > "$dir/$label.err"
}

same=0
differ=0
for name in "${programs[@]}"; do
  for opt in O0 O2; do
    dir=$work/${name}_$opt
    mkdir -p "$dir"
    bin=$bundle/bin/${name}_$opt
    run cudart "$dir" -- "${bin}_cudart"
    run drvshim "$dir" DRVSHIM_RT_POLICY=lazy -- "${bin}_drvshim"
    run dropin "$dir" LD_LIBRARY_PATH="$bundle/lib/drvshim/cudart" DRVSHIM_RT_POLICY=lazy -- "${bin}_cudart"
    variants=(drvshim dropin)
    # RUN_LAZY programs print the driver's state at each call: the eager
    # policy retains early on purpose, so only the lazy runs must match cudart.
    if [[ $opt == O2 && ${mode_of[$name]:-} != RUN_LAZY ]]; then
      run eager "$dir" DRVSHIM_RT_POLICY=eager -- "${bin}_drvshim"
      variants+=(eager)
    fi
    echo "== $name -$opt: cudart exit $(cat "$dir/cudart.rc") ==" >> "$log"
    cat "$dir/cudart.out.raw" >> "$log"
    sed 's/^/stderr: /' "$dir/cudart.err.raw" >> "$log"
    for v in "${variants[@]}"; do
      if cmp -s "$dir/cudart.rc" "$dir/$v.rc" && cmp -s "$dir/cudart.out" "$dir/$v.out" &&
         cmp -s "$dir/cudart.err" "$dir/$v.err"; then
        echo "-- $v: identical" >> "$log"
        same=$((same + 1))
      else
        echo "-- $v: DIFFERS (exit $(cat "$dir/$v.rc"))" >> "$log"
        diff "$dir/cudart.out" "$dir/$v.out" | sed 's/^/   stdout /' >> "$log"
        diff "$dir/cudart.err" "$dir/$v.err" | sed 's/^/   stderr /' >> "$log"
        sed 's/^/   drvshim log: /' "$dir/$v.err.raw" | grep '\[drvshim\]' | head -n 20 >> "$log"
        differ=$((differ + 1))
        echo "DIFFERS: $name -$opt ($v)" | tee -a "$summary"
      fi
    done
  done
done
echo "runtime-api comparison: ${#programs[@]} programs x 2 builds: $same runs identical to cudart, $differ differ" |
  tee -a "$summary"
[[ $differ -eq 0 ]]
