#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Records the real cudart's answers for the nodriver scenario
# (expected/nodriver.txt.gz) on a machine without the NVIDIA driver, such as
# the CPU machine: the -cudart none build of the cases runs on the toolkit's
# libcudart.so.13 put in the place of libdrvshim_cudart.so.0 (the program's
# RUNPATH comes after LD_LIBRARY_PATH), one process per case as run.py's
# fresh scenario runs them.
#   record_nodriver.sh BUILD_DIR [CUDA_ROOT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
cuda=${2:-/usr/local/cuda}
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  echo "record_nodriver.sh: this machine has a CUDA driver (libcuda.so.1); run it where there is none" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lib"
ln -s "$cuda/lib64/libcudart.so.13" "$work/lib/libdrvshim_cudart.so.0"
LD_LIBRARY_PATH=$work/lib python3 "$here/run.py" "$build/tests/runtime_api/conformance/conf_drvshim" "$work/out" \
  --scenarios fresh --jobs 2 --timeout 60
python3 - "$work/out/fresh.txt" "$here/expected/nodriver.txt.gz" "$here" <<'PY'
import gzip, sys
sys.path.insert(0, sys.argv[3])
from check_fake import comparable  # the projection CI compares
lines = []
for line in open(sys.argv[1], encoding="utf-8"):
    head, _, rest = line.rstrip("\n").partition(" | ")
    lines.append(head + " | " + comparable(rest))
with open(sys.argv[2], "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as out:
    out.write(("\n".join(lines) + "\n").encode())
print(f"{len(lines)} cases written to {sys.argv[2]}")
PY
