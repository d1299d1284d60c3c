#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds, on the CPU machine, the Runtime-API corpus (tests/runtime_api) for
# the comparison on the GPU machine (tools/gpu/run-runtime-api.sh), into
# .gpu-bundle-rt/ (git-ignored; copy it to the GPU machine with the checkout):
#   bin/<program>_<O0|O2>_cudart    nvcc -cudart shared: the toolkit's libcudart
#                                   (RUNPATH /usr/local/cuda/lib64; with
#                                   LD_LIBRARY_PATH=lib/drvshim/cudart it runs on
#                                   the drop-in instead)
#   bin/<program>_<O0|O2>_drvshim   nvcc -cudart none, linked with libdrvshim_cudart
#   lib/                            libdrvshim.so.0, libdrvshim_cudart.so.0 and the
#                                   drop-in lib/drvshim/cudart/libcudart.so.13, as installed
#   corpus.txt                      the programs (name|sources|flags|gencode|rdc|mode)
# Both builds of a program use the same sources, flags and -gencode (SASS for
# sm_90 and PTX, unless the program names its own).
#   tools/gpu/build-runtime-api.sh [BUILD_DIR] [PROGRAM...]
# With PROGRAM names, only those programs of the corpus are built.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-${DRVSHIM_GPU_BUILD_DIR:-$root/build-gpu}}
shift $(( $# >= 1 ? 1 : 0 ))
only=("$@")
bundle=${DRVSHIM_RT_BUNDLE:-$root/.gpu-bundle-rt}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
src=$root/tests/runtime_api

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target drvshim drvshim_cudart drvshim_runtime_api_programs
prefix=$(mktemp -d /tmp/drvshim-rt-prefix-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libdrvshim_cudart.so.0' | head -n1)")

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib/drvshim/cudart" "$bundle/obj"
# Real files, not links (a copy to another machine may keep links only as links).
cp -L "$libdir/libdrvshim.so.0" "$libdir/libdrvshim_cudart.so.0" "$bundle/lib/"
cp -L "$libdir/libdrvshim_cudart.so.0" "$bundle/lib/drvshim/cudart/libcudart.so.13"
strip --strip-debug "$bundle/lib/libdrvshim.so.0" "$bundle/lib/libdrvshim_cudart.so.0" \
  "$bundle/lib/drvshim/cudart/libcudart.so.13"
if ((${#only[@]})); then
  for name in "${only[@]}"; do
    grep "^$name|" "$build/tests/runtime_api/corpus.txt" || { echo "build-runtime-api: no program $name in the corpus" >&2; exit 2; }
  done > "$bundle/corpus.txt"
else
  cp "$build/tests/runtime_api/corpus.txt" "$bundle/corpus.txt"
fi
cp "$root/tools/gpu/run-runtime-api.sh" "$bundle/"

default_gencode="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"
link_drvshim=(-L"$libdir" -ldrvshim_cudart -Xlinker --enable-new-dtags -Xlinker '-rpath=$ORIGIN/../lib')
link_cudart=(-Xlinker --enable-new-dtags -Xlinker -rpath=/usr/local/cuda/lib64)
count=0
while IFS='|' read -r name sources flags gencode rdc mode; do
  [[ -n $name ]] || continue
  read -ra srcs <<< "$sources"
  srcs=("${srcs[@]/#/$src/}")
  read -ra extra <<< "$flags"
  read -ra arch <<< "${gencode:-$default_gencode}"
  for opt in O0 O2; do
    base=$bundle/bin/${name}_${opt}
    echo "   $name -$opt"
    "$nvcc" "-$opt" -cudart shared "${arch[@]}" "${extra[@]}" ${rdc:+-rdc=true} "${srcs[@]}" -o "${base}_cudart" \
      "${link_cudart[@]}"
    if [[ -n $rdc ]]; then
      objs=()
      for s in "${srcs[@]}"; do
        o=$bundle/obj/${name}_${opt}_$(basename "${s%.cu}").o
        "$nvcc" "-$opt" -rdc=true -cudart none "${arch[@]}" "${extra[@]}" -c "$s" -o "$o"
        objs+=("$o")
      done
      "$nvcc" -dlink "${arch[@]}" "${objs[@]}" -o "$bundle/obj/${name}_${opt}_dlink.o"
      "$nvcc" -cudart none "${objs[@]}" "$bundle/obj/${name}_${opt}_dlink.o" -o "${base}_drvshim" "${link_drvshim[@]}"
    else
      "$nvcc" "-$opt" -cudart none "${arch[@]}" "${extra[@]}" "${srcs[@]}" -o "${base}_drvshim" "${link_drvshim[@]}"
    fi
    count=$((count + 1))
  done
done < "$bundle/corpus.txt"
rm -rf "$bundle/obj"

# The differential conformance suite (tests/runtime_api/conformance): the
# generated cases built against the toolkit's cudart and against libdrvshim_cudart.
conf=$root/tests/runtime_api/conformance
mkdir -p "$bundle/conformance"
python3 "$conf/gen_cases.py" "$(dirname "$nvcc")/../include" "$root/runtime_compat/src" "$bundle/conformance/cases.cu"
cp "$conf/harness.cuh" "$conf/run.py" "$conf/compare.py" "$conf/explained.txt" "$bundle/conformance/"
conf_flags=(-std=c++17 -O1 -I"$conf" --no-compress $default_gencode)
"$nvcc" "${conf_flags[@]}" -cudart shared "$bundle/conformance/cases.cu" -o "$bundle/conformance/conf_cudart" "${link_cudart[@]}"
"$nvcc" "${conf_flags[@]}" -cudart none "$bundle/conformance/cases.cu" -o "$bundle/conformance/conf_drvshim" \
  -L"$libdir" -ldrvshim_cudart -Xlinker --enable-new-dtags -Xlinker '-rpath=$ORIGIN/../lib'
# The nodriver scenario's preloaded stand-in for a machine without the driver.
g++ -std=c++20 -O1 -shared -fPIC "$conf/no_driver.cpp" -o "$bundle/conformance/no_driver.so" -ldl
cp "$root/tools/gpu/run-conformance.sh" "$bundle/"
echo "   conformance: $(python3 "$conf/gen_cases.py" "$(dirname "$nvcc")/../include" "$root/runtime_compat/src" --count) cases"
git -C "$root" rev-parse HEAD > "$bundle/COMMIT"
git -C "$root" diff --quiet HEAD || echo "(with uncommitted changes)" >> "$bundle/COMMIT"
echo "runtime-api bundle: $count builds x 2 runtimes, $(du -sh "$bundle" | cut -f1) at $bundle"
