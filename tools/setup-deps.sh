#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages drvshim's build needs. Idempotent: installs
# (and runs apt-get update) only when something is missing. The CUDA toolkit
# is expected at /usr/local/cuda (its headers describe the driver ABI; libcuda
# itself is never linked).
set -euo pipefail

# libxxhash-dev: the compile cache's entry checksum (XXH3, used header-only).
# python3: drvshim-trace's wrappers are generated from the toolkit's headers at build time.
# libbenchmark-dev: tools/bench/bench_cache_key.cpp, the one micro-benchmark its model fits (docs/DESIGN.md, "Dependencies").
# clang-format, clang-tidy: the house style, checked by tools/dev/check_style.py in CI.
packages=(cmake g++ make pkg-config binutils libspdlog-dev libfmt-dev libgtest-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev libxxhash-dev python3 clang-format clang-tidy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup-deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cuda_root=${DRVSHIM_CUDA_ROOT:-/usr/local/cuda}
if [[ ! -f "$cuda_root/include/cuda.h" || ! -f "$cuda_root/include/cudaTypedefs.h" ]]; then
  echo "setup-deps: no CUDA toolkit headers under $cuda_root/include (cuda.h, cudaTypedefs.h)." >&2
  echo "            Install the CUDA toolkit, or set DRVSHIM_CUDA_ROOT to its root." >&2
  exit 1
fi
