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
- a path outside the repository: "../shared/", "/work/";
- in code, a lab run by number ("run 25") rather than by its folder;
and, in every source, script and CMake file, a missing licence line
("SPDX-License-Identifier: Apache-2.0" in its first three lines).

Usage: tools/dev/check_self_contained.py [ROOT]   (exit 1 and one line per finding)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
SUFFIXES = (".cpp", ".hpp", ".h", ".c", ".cu", ".cuh", ".inc", ".py", ".sh", ".cmake", ".txt", ".md", ".in", ".map",
            ".supp")
# Files without a suffix that are scanned too.
EXTRA = (".ci/run", ".clang-tidy", ".clang-format")
SKIPPED = ("lab/", "CHANGELOG.md", "tools/dev/check_self_contained.py", "tests/layers/test_check_self_contained.py")
# A numbered issue is another project's when the word before it names that
# project ("google/sanitizers issue 1353", "CMake issue 23456").
OTHER_PROJECT = re.compile(r"([\w.+-]+/[\w.+-]+|CMake|GCC|gcc|LLVM|llvm|Clang|clang|glibc|spdlog|fmt|CUDA|NVIDIA|Ninja)\s+$")
WORK_ITEM = re.compile(r"\b(?:sub-?)?issues?[ -]#?\d+|\(#\d+\)|\bPR #?\d+", re.I)
CODE = (".cpp", ".hpp", ".h", ".c", ".cu", ".cuh", ".inc", ".py", ".sh", ".cmake")
# In code a lab run is named by its folder (lab/gpu-runs/<date>-runN), which
# exists in the repository; the docs define "run N" as that folder.
LAB_RUN = re.compile(r"\b[Rr]uns? \d+\b")
RULES = [
    (re.compile(r"\b(?:this|last|previous|next|earlier|later|a former) session\b", re.I), "a work period"),
    (re.compile(r"\.\./shared/|~/shared/|(?<![\w.-])shared/(?:design|research)/|(?<![\w.])/work(?:/|\b)"),
     "a path outside the repository"),
    (re.compile(r"\bnvidia-h[12]00(?:-x\d)?\b|\bdevice tool\b"), "the GPU lab's tooling"),
]


LICENSED = (".cpp", ".hpp", ".h", ".c", ".cu", ".cuh", ".inc", ".py", ".sh", ".cmake", ".in", ".map", ".supp")
SPDX = "SPDX-License-Identifier: Apache-2.0"


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True, check=True).stdout
        return out.split()
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirs, names in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in (".git", ".gpu-bundle", ".gpu-bundle-rt") and not d.startswith("build")]
            files += [os.path.relpath(os.path.join(dirpath, n), ROOT) for n in names]
        return files


def main():
    findings = []
    for rel in sorted(tracked_files()):
        if rel.startswith(SKIPPED) or not (rel.endswith(SUFFIXES) or os.path.basename(rel) == "CMakeLists.txt"
                                           or rel in EXTRA):
            continue
        try:
            lines = open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace").read().splitlines()
        except OSError:
            continue
        if (rel.endswith(LICENSED) or os.path.basename(rel) == "CMakeLists.txt" or rel in EXTRA) and not any(
                SPDX in line for line in lines[:3]):
            findings.append(f"{rel}:1: no licence line (\"{SPDX}\" in the first three lines)")
        for lineno, line in enumerate(lines, 1):
            for m in WORK_ITEM.finditer(line):
                if not OTHER_PROJECT.search(line[: m.start()]):
                    findings.append(f"{rel}:{lineno}: a numbered work item: \"{m.group(0)}\" (say what it means instead)")
            if (rel.endswith(CODE) or os.path.basename(rel) == "CMakeLists.txt") and LAB_RUN.search(line):
                findings.append(f"{rel}:{lineno}: a lab run by number: \"{LAB_RUN.search(line).group(0)}\" "
                                "(name its folder, lab/gpu-runs/<date>-runN)")
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
