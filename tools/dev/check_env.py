#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The environment check: every read of the environment goes through the one reader.

drvshim's components read environment variables only through
common/env_table.cpp (drvshim::detail::env::value and the helpers over it),
whose table (common/env_table.hpp) lists every variable with what it accepts, its default and its
effect (README.md's "Environment" is generated from it). This check fails on:

- a use of getenv or secure_getenv (a call, a pointer to it, its name in a
  string for dlsym) anywhere else in the components
  (driver, ptx, runtime_compat, common, recorder, the probe, drvshim-trace,
  the examples, and the fake driver in tools/fakecuda; the tests and benchmarks
  may set and read what they like);
- a use of `environ` outside the files ENVIRON_USERS names with their reason;
- a "DRVSHIM_..." string literal naming a variable the table does not list
  (a typo there would be read as an unset variable);
- in the repository's scripts (shell, Python, .ci/run, and CMake test
  environments), a DRVSHIM_* variable set or read that the table does not
  list: the programs they run warn about unknown DRVSHIM_* names, and a typo
  there silently does nothing.

Usage: tools/dev/check_env.py [ROOT]   (exit 1 and one line per violation)
tests/layers/test_check_env.py checks that it fails on violating trees.
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
# Benchmarks (tools/bench) are measurements like the tests: they set up the
# environment of what they measure and are not scanned.
COMPONENTS = ["driver", "ptx", "runtime_compat", "common", "recorder", "tools/probe", "tools/trace", "examples",
              "tools/fakecuda"]
READER = {"common/env_table.cpp"}  # the one reader
# (A name passed to the reader is checked by the compiler: env::Name is consteval.)
# Files that hand the whole environment on rather than read a variable from it.
ENVIRON_USERS = {
    "common/env_table.cpp": "the reader itself",
    "common/env.cpp": "names DRVSHIM_* variables that are not in the table",
    "tools/trace/cli/traced_process.cpp": "builds the traced program's environment from drvshim-trace's own",
    "tools/trace/preload/preload.cpp": "passes the program's environment on to the exec it wraps",
}
SOURCE_EXTENSIONS = (".cpp", ".cc", ".cxx", ".c", ".hpp", ".hh", ".hxx", ".h", ".inc", ".inl", ".ipp", ".tpp", ".cu",
                     ".cuh")
GETENV = re.compile(r"\b(?:secure_)?getenv\b")
GETENV_NAME = re.compile(r'"(?:secure_)?getenv"')
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
ENVIRON = re.compile(r"\b_*environ\b")
LITERAL = re.compile(r'"(DRVSHIM_[A-Z0-9_]*[A-Z0-9])"')
TABLE_ENTRY = re.compile(r'^\s*\{"([A-Z_][A-Z0-9_]*)",', re.M)


def strip_comments(line, in_block):
    """The line without comments (and the new block-comment state); strings are kept."""
    out = []
    i = 0
    while i < len(line):
        if in_block:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i = end + 2
            in_block = False
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            in_block = True
            i += 2
        elif line[i] == '"':
            j = i + 1
            while j < len(line) and line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            out.append(line[i:j + 1])
            i = j + 1
        else:
            out.append(line[i])
            i += 1
    return "".join(out), in_block


SCRIPT_PATTERNS = {
    # (A CMake option on a command line, "-D DRVSHIM_X=...", is not an environment variable.)
    "sh": [re.compile(r"\$\{?(DRVSHIM_[A-Z0-9_]+)"),
           re.compile(r"(?:^|[;(|&]|(?<!-D)\s)(?:export\s+)?[\"']?(DRVSHIM_[A-Z0-9_]+)=")],
    "py": [re.compile(r"(?:environ(?:\.get\(|\.setdefault\(|\[)|getenv\()\s*[\"'](DRVSHIM_[A-Z0-9_]+)"),
           re.compile(r"[\"'](DRVSHIM_[A-Z0-9_]+)=|[\"'](DRVSHIM_[A-Z0-9_]+)[\"']\s*:|\b(DRVSHIM_[A-Z0-9_]+)=")],
    "cmake": [re.compile(r"[\";](DRVSHIM_[A-Z0-9_]+)="), re.compile(r"ENV\{(DRVSHIM_[A-Z0-9_]+)\}")],
}


def script_kind(rel):
    if rel.endswith(".sh") or rel == ".ci/run":
        return "sh"
    if rel.endswith(".py"):
        return "py"
    if rel.endswith(".cmake") or os.path.basename(rel) == "CMakeLists.txt":
        return "cmake"
    return None


def check_scripts(known, problems):
    for dirpath, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in (".git", "lab", ".gpu-bundle", ".gpu-bundle-rt")
                         and not d.startswith("build"))
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, f), ROOT).replace(os.sep, "/")
            kind = script_kind(rel)
            if kind is None or rel.startswith("tests/layers/") or rel == "tools/dev/check_env.py":
                continue
            with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                for lineno, line in enumerate(fh, 1):
                    for pattern in SCRIPT_PATTERNS[kind]:
                        for found in pattern.findall(line):
                            name = next((g for g in found if g), "") if isinstance(found, tuple) else found
                            if name and name not in known:
                                problems.append(f"{rel}:{lineno}: {name} is set or read here but is not in "
                                                "common/env_table.hpp's table")


def main():
    table_path = os.path.join(ROOT, "common/env_table.hpp")
    known = set(TABLE_ENTRY.findall(open(table_path, encoding="utf-8").read()))
    problems = []
    if not known:
        problems.append("common/env_table.hpp: no table entries found")
    for comp in COMPONENTS:
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, comp)):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith(SOURCE_EXTENSIONS):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT).replace(os.sep, "/")
                in_block = False
                with open(os.path.join(dirpath, f), encoding="utf-8", errors="replace") as fh:
                    for lineno, raw in enumerate(fh, 1):
                        code, in_block = strip_comments(raw.rstrip("\n"), in_block)
                        bare = STRING.sub('""', code)
                        if rel not in READER and (GETENV.search(bare) or GETENV_NAME.search(code)):
                            problems.append(f"{rel}:{lineno}: reads the environment directly ({code.strip()}); "
                                            "use drvshim::detail::env::value (common/env.hpp) and list the variable "
                                            "in common/env_table.hpp")
                        if rel not in ENVIRON_USERS and ENVIRON.search(bare):
                            problems.append(f"{rel}:{lineno}: uses environ; read variables through common/env.hpp "
                                            "(or name this file and why in tools/dev/check_env.py)")
                        for name in LITERAL.findall(code):
                            if name not in known:
                                problems.append(f"{rel}:{lineno}: {name} is not in common/env_table.hpp's table")
    check_scripts(known, problems)
    for p in problems:
        print(p)
    print(f"environment check: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
