#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layer check: every #include in the tree must point down the layers.

    driver (+ internal)  <-  ptx  <-  runtime_compat  <-  tools, examples, tests

- A layer's private headers (its src/ folder) are included only by that layer.
- A lower layer never includes a higher one's headers, public or private.
- A public header (under include/) includes only public headers: it is
  installed, and nothing it includes from src/ or internal/ would be.
- What the layers truly share (logging, the environment reader, the trace's
  internal entry points, the library loader, the CUresult table) lives in
  common/, reachable from every layer through the drvshim_internal
  target; the trace recorder in recorder/ (drvshim_recorder), whose
  public headers are its include/ and whose src/ is its own. Both are the
  driver layer's shared part, so they rank with the driver: they may use the
  driver's public headers (log_internal.hpp declares its functions over
  drvshim/log.hpp's levels; the driver implements them), never its private ones.
- Tests may include anything (they test internals on purpose); they are not
  scanned. A benchmark of an internal is a test that measures: it may include
  exactly the private headers BENCHMARKS_OF_INTERNALS names for it, nothing else.

Usage: tools/dev/check_layers.py [ROOT]   (exit 1 and one line per violation)
tests/layers/test_check_layers.py checks that it fails on violating trees.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
OPAQUE_INCLUDE = re.compile(r'^\s*#\s*include(_next)?\b')
SOURCE_EXTENSIONS = (".cpp", ".cc", ".cxx", ".c", ".hpp", ".hh", ".hxx", ".h", ".cu", ".cuh", ".inc", ".ipp", ".inl",
                     ".tpp")

# Where each layer's files live, and its rank (lowest first; equal ranks may
# use each other's public headers).
LAYERS = [
    ("internal", 0, ["common"]),
    ("recorder", 0, ["recorder"]),
    ("driver", 0, ["driver/include", "driver/src"]),
    ("ptx", 1, ["ptx/include", "ptx/src"]),
    ("runtime_compat", 2, ["runtime_compat/include", "runtime_compat/src"]),
    ("tools", 3, ["tools", "examples"]),
]
RANK = {name: rank for name, rank, _ in LAYERS}

# file -> the private headers of a lower layer it measures. bench_cache_key
# times the compile cache's key hash (ptx/src/cache/sha256.hpp) against OpenSSL's:
# the hash is hidden inside libdrvshim, so the benchmark compiles it in, as
# the unit tests do (tools/CMakeLists.txt).
BENCHMARKS_OF_INTERNALS = {
    "tools/bench/bench_cache_key.cpp": {"sha256.hpp"},
}


def layer_of(rel):
    for name, _, dirs in LAYERS:
        if any(rel == d or rel.startswith(d + "/") for d in dirs):
            return name
    return None


def is_public(rel):
    return "/include/" in "/" + rel + "/"


def index_headers():
    """Include spelling -> [(layer, private?, path)] for every header the layers own.

    A public header is spelled by its path under include/ (drvshim/log.hpp); a
    private one by its file name (core.hpp), the way the layers include them.
    """
    owners = {}
    for name, _, dirs in LAYERS:
        for d in dirs:
            base = os.path.join(ROOT, d)
            for dirpath, _, files in os.walk(base):
                for f in sorted(files):
                    if not f.endswith((".hpp", ".h", ".inc", ".cuh")):
                        continue
                    full = os.path.join(dirpath, f)
                    rel = os.path.relpath(full, ROOT).replace(os.sep, "/")
                    private = not is_public(rel)
                    key = f if private else os.path.relpath(full, base).replace(os.sep, "/")
                    owners.setdefault(key, []).append((name, private, rel))
    return owners


def resolve(owners, including_rel, target, quoted):
    """The header `target` names from `including_rel`, or None (not ours)."""
    # A quoted name next to the including file is that file (the compiler looks there first).
    beside = os.path.normpath(os.path.join(os.path.dirname(including_rel), target)).replace(os.sep, "/")
    if quoted and os.path.isfile(os.path.join(ROOT, beside)):
        layer = layer_of(beside)
        if layer is not None:
            return (layer, not is_public(beside), beside)
    candidates = owners.get(target) or owners.get(os.path.basename(target))
    if not candidates:
        return None  # the standard library, the toolkit, third-party headers, generated files
    mine = layer_of(including_rel)
    for c in candidates:
        if c[0] == mine:
            return c  # two layers may each have a state.hpp: one's own wins
    return candidates[0]


def main():
    owners = index_headers()
    problems = []
    for _, _, dirs in LAYERS:
        for d in dirs:
            for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
                # Only drvshim-trace's generator folder is skipped (it writes
                # code that includes the driver headers on purpose).
                rel_dir = os.path.relpath(dirpath, ROOT).replace(os.sep, "/")
                if rel_dir == "tools/trace/gen" or rel_dir.startswith("tools/trace/gen/"):
                    continue
                for f in sorted(files):
                    if not f.endswith(SOURCE_EXTENSIONS):
                        continue
                    path = os.path.join(dirpath, f)
                    rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
                    mine = layer_of(rel)
                    allowed = BENCHMARKS_OF_INTERNALS.get(rel, set())
                    with open(path, errors="replace") as fh:
                        for lineno, line in enumerate(fh, 1):
                            m = INCLUDE.match(line)
                            if not m:
                                # An include the check cannot read (a macro, a
                                # comment before the path, #include_next) is a
                                # violation: it could point anywhere.
                                if OPAQUE_INCLUDE.match(line):
                                    problems.append(f"{rel}:{lineno}: an include whose path the layer check cannot "
                                                    f"read: {line.strip()} (spell the path out)")
                                continue
                            target = m.group(2)
                            found = resolve(owners, rel, target, m.group(1) == '"')
                            if found is None:
                                continue
                            owner, private, where = found
                            if where == rel:
                                continue
                            if RANK[owner] > RANK[mine]:
                                problems.append(f"{rel}:{lineno}: {mine} includes {target} of the higher layer {owner} ({where})")
                            elif is_public(rel) and private:
                                problems.append(f"{rel}:{lineno}: public header includes {target}, which is not public ({where})")
                            elif private and owner != mine and owner != "internal" and os.path.basename(target) not in allowed:
                                problems.append(f"{rel}:{lineno}: {mine} includes {target}, private to {owner} ({where})")
    for p in problems:
        print(p)
    print(f"layer check: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
