#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packaging test: installs drvshim into a temporary prefix, then builds and runs
# consumers against the fake driver: find_package on the installed tree,
# add_subdirectory of the source tree, plain g++ with pkg-config flags, the
# getting-started guide's programs on the installed fake, CUDA programs on
# drvshim::cudart and on the drop-in libcudart.
# Also runs the export check on the installed library.
#   run_consumers.sh SOURCE_DIR BUILD_DIR FAKE_DRIVER
set -euo pipefail
src=$1 build=$2 fake=$3
work=$(mktemp -d /tmp/drvshim_packaging_XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
export DRVSHIM_LIBCUDA=$fake

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libdrvshim.so.0' | head -n1)")
test -L "$libdir/libdrvshim.so" && test -e "$libdir/libdrvshim.so.0"
readelf -d "$libdir/libdrvshim.so.0" | grep -q 'SONAME.*libdrvshim.so.0' || { echo "missing SONAME"; exit 1; }
cmake -DLIB="$libdir/libdrvshim.so.0" -P "$src/tests/export_check.cmake"

echo "-- consumer 1: find_package(drvshim) on the installed tree"
cmake -S "$src/tests/packaging/consumer" -B "$work/c1" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/c1" >/dev/null
LD_LIBRARY_PATH=$libdir "$work/c1/consumer"

echo "-- consumer 2: add_subdirectory(drvshim)"
# No build type given: drvshim must not choose one for the project that vendors it
# (nor may the caller's environment: CMake reads CMAKE_BUILD_TYPE and CMAKE_GENERATOR from it).
env -u CMAKE_BUILD_TYPE -u CMAKE_GENERATOR \
  cmake -S "$src/tests/packaging/subdir" -B "$work/c2" -DDRVSHIM_SOURCE_DIR="$src" >/dev/null
cmake --build "$work/c2" -j"$(nproc)" --target consumer >/dev/null
"$work/c2/consumer"
# Consumer defaults: a vendoring project gets neither warnings as errors on
# drvshim's targets, nor drvshim's install rules, nor drvshim's build type.
# What counts is the effect: drvshim's compile commands (found by its own
# warning flags) carry no -Werror, and an install installs nothing.
commands=$(find "$work/c2" \( -name flags.make -o -name build.ninja \) -exec cat {} + | grep -e "-Wnon-virtual-dtor" || true)
if [[ -z $commands ]]; then
  echo "add_subdirectory: found no compile command of drvshim's targets to check"; exit 1
fi
# -Werror itself, not -Werror=<one warning> (Debian's default flags carry -Werror=format-security).
if grep -Eq -e '(^|[[:space:]])-Werror([[:space:]]|$)' <<<"$commands"; then
  echo "add_subdirectory: drvshim's targets are compiled with -Werror in a vendoring project"; exit 1
fi
if ! grep -qx "CMAKE_BUILD_TYPE:STRING=" "$work/c2/CMakeCache.txt"; then
  echo "add_subdirectory: drvshim set the vendoring project's build type:"
  grep "^CMAKE_BUILD_TYPE" "$work/c2/CMakeCache.txt" || true
  exit 1
fi
cmake --install "$work/c2" --prefix "$work/c2-installed" >/dev/null
if [[ -d $work/c2-installed ]] && [[ -n $(find "$work/c2-installed" -mindepth 1 -print -quit) ]]; then
  echo "add_subdirectory: installing the vendoring project installed drvshim's files:"
  find "$work/c2-installed" -type f | head
  exit 1
fi

echo "-- consumer 3: g++ with pkg-config flags only"
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs drvshim)
echo "   pkg-config: $flags"
if grep -q -e '-std=' <<<"$flags"; then
  echo "pkg-config's flags choose the C++ standard ($flags): a consumer's newer one would be overridden"; exit 1
fi
# Before C++20 the first error says what is needed, not 170 errors about concepts.
if out=$(g++ -std=c++17 -fsyntax-only "$src/tests/packaging/consumer/main.cpp" $(pkg-config --cflags drvshim) 2>&1); then
  echo "a C++17 build of a drvshim consumer compiled"; exit 1
fi
grep -m1 "error" <<<"$out" | grep -q "drvshim needs C++20 or later" || { echo "C++17 build, first errors:"; grep -m3 error <<<"$out"; exit 1; }
# As README says: the consumer's standard, and an rpath to the package's libdir.
for std in c++20 c++23; do
  g++ -std=$std "$src/tests/packaging/consumer/main.cpp" $flags \
    -Wl,-rpath,"$(pkg-config --variable=libdir drvshim)" -o "$work/c3-$std"
  "$work/c3-$std"
done

echo "-- docs/getting-started.md: every marked program, against the installed package and its fake driver"
test -f "$prefix/include/drvshim/fakecuda.h" && test -f "$libdir/libdrvshim_fakecuda.so"
"$src/tests/docs/run_getting_started.sh" "$prefix" "$src/docs/getting-started.md"

echo "-- the installed tools start without LD_LIBRARY_PATH"
readelf -d "$prefix/bin/drvshim-probe" | grep -q 'RUNPATH.*\$ORIGIN' || { echo "drvshim-probe has no RUNPATH \$ORIGIN"; exit 1; }
env -u LD_LIBRARY_PATH "$prefix/bin/drvshim-probe" --json >/dev/null
if [[ -x $prefix/bin/drvshim-trace ]]; then
  env -u LD_LIBRARY_PATH "$prefix/bin/drvshim-trace" --help >/dev/null
fi
echo "-- consumer 4: a CUDA program with -rdc on drvshim::cudart (drvshim_use_cudart)"
readelf -d "$libdir/libdrvshim_cudart.so.0" | grep -q 'RUNPATH.*\$ORIGIN' || { echo "libdrvshim_cudart has no RUNPATH \$ORIGIN"; exit 1; }
CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc} cmake -S "$src/tests/packaging/cudart_consumer" -B "$work/c4" \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/c4" >/dev/null
# No LD_LIBRARY_PATH: the installed libdrvshim_cudart finds libdrvshim beside it.
"$work/c4/cudart_consumer"

echo "-- consumer 5: a -cudart shared program on the drop-in libcudart.so.13"
test -L "$libdir/drvshim/cudart/libcudart.so.13"
"${CUDACXX:-/usr/local/cuda/bin/nvcc}" -cudart shared --no-compress -gencode arch=compute_90,code=compute_90 \
  -I"$src/tests/runtime_api" "$src/tests/runtime_api/vector_add.cu" -o "$work/c5"
readelf -d "$work/c5" | grep -q 'NEEDED.*libcudart.so.13'
LD_LIBRARY_PATH=$libdir/drvshim/cudart "$work/c5"
echo "packaging: all five consumers built and ran"
