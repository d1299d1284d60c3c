#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The coverage table of docs/runtime-compat.md, generated from what
libdrvshim_cudart.so exports against the toolkit's cuda_runtime_api.h (and
cuda_profiler_api.h): every function, by the header's groups, implemented or
not supported (exported, returns cudaErrorNotSupported naming itself), and
the per-thread-default-stream forms (_ptsz/_ptds).

  gen_runtime_coverage.py INCLUDE_DIR LIBRARY SOURCE_DIR            print the table
  gen_runtime_coverage.py INCLUDE_DIR LIBRARY SOURCE_DIR --check DOC  fail when DOC's table differs
  gen_runtime_coverage.py INCLUDE_DIR LIBRARY SOURCE_DIR --write DOC  replace DOC's table

The table sits between the markers <!-- coverage:begin --> and <!-- coverage:end -->.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cudart_api  # noqa: E402

BEGIN, END = "<!-- coverage:begin -->", "<!-- coverage:end -->"


def exports(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.split()[1:2] in (["T"], ["W"])}


def table(include_dir, library, source_dir):
    declared = cudart_api.header_functions(include_dir)
    groups = cudart_api.header_groups(include_dir)
    groups.append(("Profiler Control", ["cudaProfilerStart", "cudaProfilerStop"]))
    exported = exports(library)
    implemented = cudart_api.defined_functions(source_dir)

    def status(name):
        if name not in exported:
            return "missing"
        return "implemented" if name in implemented else "not supported"

    lines = []
    total = done = 0
    body = []
    for title, names in groups:
        n_done = sum(1 for n in names if status(n) == "implemented")
        total += len(names)
        done += n_done
        body.append(f"\n#### {title} ({n_done} of {len(names)} implemented)\n")
        body.append("| function | status | per-thread stream form |")
        body.append("|---|---|---|")
        for n in names:
            variant = next((v for v in (n + "_ptsz", n + "_ptds") if v in declared), None)
            vtext = f"`{variant}` {status(variant)}" if variant else ""
            body.append(f"| `{n}` | {status(n)} | {vtext} |")
    entry = sorted(n for n in implemented if n.startswith("__cuda"))
    lines.append(f"{done} of {total} functions of cuda_runtime_api.h and cuda_profiler_api.h implemented; every other "
                 "one is exported and returns `cudaErrorNotSupported` after logging an error that names it "
                 "(\"missing\" would mean not exported at all). The graphics interoperability functions "
                 "(OpenGL, EGL, VDPAU, Direct3D) are outside the scope and not exported.")
    lines.append("")
    lines.append(f"Registration and launch entry points of nvcc 13 ({len(entry)}, as libcudart.so.13 exports): "
                 + ", ".join(f"`{n}`" for n in entry) + ".")
    lines.extend(body)
    return "\n".join(lines) + "\n"


def main():
    include_dir, library, source_dir = sys.argv[1:4]
    text = table(include_dir, library, source_dir)
    if len(sys.argv) == 4:
        sys.stdout.write(text)
        return 0
    mode, doc = sys.argv[4], sys.argv[5]
    content = open(doc, encoding="utf-8").read()
    m = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), content, re.S)
    if not m:
        sys.exit(f"{doc}: no {BEGIN} ... {END} section")
    if mode == "--check":
        if m.group(1) != text:
            sys.stderr.write(f"{doc}: the coverage table is stale; regenerate it with\n  python3 {sys.argv[0]} "
                             f"{include_dir} <libdrvshim_cudart.so> {source_dir} --write {doc}\n")
            return 1
        print(f"{doc}: coverage table current")
        return 0
    if mode == "--write":
        open(doc, "w", encoding="utf-8").write(content[:m.start(1)] + text + content[m.end(1):])
        return 0
    sys.exit(f"unknown mode {mode}")


sys.exit(main())
