#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds drvshim-probe (installing the build's packages first) and runs it.
# Arguments are passed to the probe. Exit code: the probe's (0 ran, 2 no
# driver, 3 no device; see docs/probe.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup-deps.sh"
build=${DRVSHIM_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target drvshim-probe -j"$(nproc)" >/dev/null
exec "$build/tools/drvshim-probe" "$@"
