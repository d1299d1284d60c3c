#!/usr/bin/env python3
"""The layer check: every #include in the tree must point down the layers.

    driver  <-  ptx  <-  runtime_compat  <-  tools, examples, tests

- A layer's private headers (its src/ folder) are included only by that layer.
- A lower layer never includes a higher one's headers, public or private.
- What the layers truly share (logging, the environment reader, the trace's
  internal entry points, the recorder) lives in driver/internal/ and
  driver/recorder/, reachable from every layer through the
  drvshim_internal and drvshim_recorder targets.
- Tests may include anything (they test internals on purpose).

Usage: tools/dev/check_layers.py [ROOT]   (exit 1 and one line per violation)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')

# Where each layer's files live, lowest first.
LAYERS = [
    ("internal", ["driver/internal", "driver/recorder"]),
    ("driver", ["driver/include", "driver/src"]),
    ("ptx", ["ptx/include", "ptx/src"]),
    ("runtime_compat", ["runtime_compat/include", "runtime_compat/src"]),
    ("tools", ["tools", "examples"]),
]
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}


def layer_of(path):
    rel = os.path.relpath(path, ROOT)
    for name, dirs in LAYERS:
        if any(rel == d or rel.startswith(d + os.sep) for d in dirs):
            return name
    return None


def index_headers():
    """Header basename -> (layer, private?) for every header the layers own."""
    owners = {}
    for name, dirs in LAYERS:
        for d in dirs:
            base = os.path.join(ROOT, d)
            for dirpath, _, files in os.walk(base):
                for f in files:
                    if not f.endswith((".hpp", ".h", ".inc")):
                        continue
                    full = os.path.join(dirpath, f)
                    rel = os.path.relpath(full, base)
                    private = "/include/" not in "/" + os.path.relpath(full, ROOT) + "/"
                    key = rel if not private else f
                    owners.setdefault(key, (name, private, os.path.relpath(full, ROOT)))
    return owners


def main():
    owners = index_headers()
    problems = []
    for name, dirs in LAYERS:
        for d in dirs:
            for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
                if "/gen" in dirpath.replace(ROOT, ""):
                    continue
                for f in files:
                    if not f.endswith((".cpp", ".hpp", ".h", ".cu", ".cuh", ".inc")):
                        continue
                    path = os.path.join(dirpath, f)
                    mine = layer_of(path)
                    with open(path, errors="replace") as fh:
                        for lineno, line in enumerate(fh, 1):
                            m = INCLUDE.match(line)
                            if not m:
                                continue
                            target = m.group(1)
                            key = target if target in owners else os.path.basename(target)
                            if key not in owners:
                                continue  # the standard library, the toolkit, third-party headers
                            owner, private, where = owners[key]
                            rel = os.path.relpath(path, ROOT)
                            if RANK[owner] > RANK[mine]:
                                problems.append(f"{rel}:{lineno}: {mine} includes {target} of the higher layer {owner} ({where})")
                            elif private and owner != mine and owner != "internal":
                                problems.append(f"{rel}:{lineno}: {mine} includes {target}, private to {owner} ({where})")
    for p in problems:
        print(p)
    print(f"layer check: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
