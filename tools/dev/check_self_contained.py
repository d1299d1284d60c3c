#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Code comments and user docs stand on their own: nothing in them needs the
project's work tracker, its work periods or files outside the repository.

Fails on, in every tracked source, script, CMake file and user page (lab/,
the raw GPU runs and their history, and CHANGELOG.md's release notes are
not scanned):
- a numbered work item: "issue 19", "item 8 of issue 29" (another project's
  issue, "google/sanitizers issue 1353", names its project and passes);
- a work period: "this session", "last session";
- a path outside the repository: "../shared/", "/work/".

Usage: tools/dev/check_self_contained.py [ROOT]   (exit 1 and one line per finding)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
SUFFIXES = (".cpp", ".hpp", ".h", ".c", ".cu", ".cuh", ".inc", ".py", ".sh", ".cmake", ".txt", ".md", ".in", ".map",
            ".supp")
SKIPPED = ("lab/", "CHANGELOG.md", "tools/dev/check_self_contained.py", "tests/layers/test_check_self_contained.py")
RULES = [
    (re.compile(r"(?<![\w/.-])(?<!sanitizers )(?<!llvm )(?<!gcc )\b[Ii]ssues? #?\d+"), "a numbered work item"),
    (re.compile(r"\b(?:this|last|previous|next) session\b", re.I), "a work period"),
    (re.compile(r"\.\./shared/|(?<![\w.])/work/"), "a path outside the repository"),
]


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True, check=True).stdout
        return out.split()
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirs, names in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
            files += [os.path.relpath(os.path.join(dirpath, n), ROOT) for n in names]
        return files


def main():
    findings = []
    for rel in sorted(tracked_files()):
        if rel.startswith(SKIPPED) or not (rel.endswith(SUFFIXES) or os.path.basename(rel) == "CMakeLists.txt"):
            continue
        try:
            lines = open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace").read().splitlines()
        except OSError:
            continue
        for lineno, line in enumerate(lines, 1):
            for pattern, what in RULES:
                m = pattern.search(line)
                if m:
                    findings.append(f"{rel}:{lineno}: {what}: \"{m.group(0)}\" (say what it means instead)")
    for f in findings:
        print(f)
    print(f"self-contained check: {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
