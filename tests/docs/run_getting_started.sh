#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Documentation test: compiles every program a guide marks for CI (an HTML
# comment "<!-- snippet: NAME env: VAR=value links: fakecuda -->" on the line
# before its fence; extract_snippets.py) against an installed drvshim, with the
# package's pkg-config flags only, and runs each on the package's fake driver
# with the snippet's environment. Fails naming every snippet that does not
# compile or does not exit 0, and when the guide marks no program at all.
#   run_getting_started.sh PREFIX DOC
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 PREFIX DOC" >&2
  exit 2
fi
prefix=$1 doc=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d /tmp/drvshim_snippets_XXXXXX)
trap 'rm -rf "$work"' EXIT

pc=$(find "$prefix" -path '*/pkgconfig/drvshim.pc' -print -quit 2>/dev/null || true)
if [[ -z $pc ]]; then
  echo "run_getting_started: no pkgconfig/drvshim.pc under $prefix (install drvshim there first)" >&2
  exit 1
fi
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(cd "$(pkg-config --variable=libdir drvshim)" && pwd -P)
fake=$libdir/libdrvshim_fakecuda.so
if [[ ! -f $fake ]]; then
  echo "run_getting_started: the package has no fake driver ($fake)" >&2
  exit 1
fi
read -r -a flags <<<"$(pkg-config --cflags --libs drvshim)"

python3 "$here/extract_snippets.py" "$doc" "$work/src" >"$work/manifest"
count=$(wc -l <"$work/manifest")
if ((count == 0)); then
  echo "run_getting_started: $doc marks no program (<!-- snippet: NAME --> before a C++ fence)" >&2
  exit 1
fi

failed=()
while IFS=$'\x1f' read -r name links env; do
  src=$work/src/$name.cpp bin=$work/bin/$name
  mkdir -p "$work/bin" "$work/run/$name"
  extra=()
  [[ $links == *fakecuda* ]] && extra+=(-ldrvshim_fakecuda)
  if ! g++ -std=c++20 -Wall -Wextra -Werror "$src" "${flags[@]}" "${extra[@]}" -Wl,-rpath,"$libdir" -o "$bin" \
    </dev/null >"$work/$name.compile.log" 2>&1; then
    echo "snippet $name: does not compile:"
    cat "$work/$name.compile.log"
    failed+=("$name (compile)")
    continue
  fi
  read -r -a snippet_env <<<"$env"
  # Only the snippet's settings of the fake (none inherited from the caller); a
  # compile cache of the run's own; the snippet's env last, so it may override.
  status=0
  (cd "$work/run/$name" &&
    env -u DRVSHIM_FAKE_PROFILE -u DRVSHIM_FAKE_FAIL -u DRVSHIM_FAKE_CC -u DRVSHIM_FAKE_INIT_DELAY_MS \
      DRVSHIM_LIBCUDA="$fake" DRVSHIM_CACHE_DIR="$work/cache" "${snippet_env[@]}" \
      timeout 300 "$bin" </dev/null) >"$work/$name.run.log" 2>&1 || status=$?
  if ((status != 0)); then
    echo "snippet $name: exited with status $status${env:+ (env: $env)}:"
    cat "$work/$name.run.log"
    failed+=("$name (exit $status)")
    continue
  fi
  echo "snippet $name: ok${env:+ (env: $env)}${links:+ (links: $links)}"
done <"$work/manifest"

if ((${#failed[@]})); then
  echo "run_getting_started: ${#failed[@]} of $count snippets of $doc failed: ${failed[*]}" >&2
  exit 1
fi
echo "run_getting_started: all $count snippets of $doc compiled and ran"
