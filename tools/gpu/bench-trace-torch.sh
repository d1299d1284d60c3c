#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# drvshim-trace's cost on an unmodified framework: a launch-bound PyTorch loop
# (tools/bench/bench_trace_torch.py) run plain, under drvshim-trace --mode
# summary and --mode full, and under nsys profile -t cuda when nsys exists, in
# interleaved rounds (the order rotates each round). Writes a Markdown table of
# the median time per iteration, its spread (min-max) and the overhead against
# plain to RESULTS_DIR/torch-overhead.md:
#   tools/gpu/bench-trace-torch.sh BUNDLE_DIR RESULTS_DIR [ROUNDS] [ITERATIONS]
set -uo pipefail
bundle=$1
results=$2
rounds=${3:-10}
iterations=${4:-20000}
mkdir -p "$results"
tracer="$bundle/tools/trace/drvshim-trace"
script="$bundle/tools/bench_trace_torch.py"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
modes=(plain summary full)
[[ -n $nsys ]] && modes+=(nsys)
raw="$results/torch-overhead.raw"
: > "$raw"
for ((r = 0; r < rounds; ++r)); do
  for ((k = 0; k < ${#modes[@]}; ++k)); do
    mode=${modes[$(((k + r) % ${#modes[@]}))]}
    case $mode in
      plain) out=$(python3 "$script" "$iterations" 2>&1) ;;
      summary | full) out=$("$tracer" --mode "$mode" -q -- python3 "$script" "$iterations" 2>&1) ;;
      nsys) out=$("$nsys" profile -t cuda -o "/tmp/bench-trace-torch-$r" --force-overwrite true \
                   python3 "$script" "$iterations" 2>&1) ;;
    esac
    value=$(grep -o 'per_iter_us=[0-9.]*' <<<"$out" | cut -d= -f2)
    if [[ -z $value ]]; then
      echo "round $r $mode failed: $(tail -n 3 <<<"$out")" | tee -a "$raw"
      continue
    fi
    echo "$r $mode $value" >> "$raw"
  done
done
python3 - "$raw" "$results/torch-overhead.md" "$rounds" "$iterations" "${nsys:-none}" <<'PY'
import statistics, sys
raw, out, rounds, iterations, nsys = sys.argv[1:]
values = {}
for line in open(raw):
    parts = line.split()
    if len(parts) == 3 and parts[0].isdigit():
        values.setdefault(parts[1], []).append(float(parts[2]))
plain = statistics.median(values["plain"]) if values.get("plain") else None
lines = [f"PyTorch launch loop, {iterations} iterations of x.add_(1), {rounds} interleaved rounds (nsys: {nsys})",
         "", "| mode | median us/iter | min-max | runs | overhead vs plain |", "|---|---|---|---|---|"]
for mode in ("plain", "summary", "full", "nsys"):
    v = values.get(mode)
    if not v:
        continue
    m = statistics.median(v)
    over = f"{(m / plain - 1) * 100:+.1f} %" if plain else "?"
    lines.append(f"| {mode} | {m:.3f} | {min(v):.3f}-{max(v):.3f} | {len(v)} | {over} |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
