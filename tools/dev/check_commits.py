#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Commit messages follow the house rule: a subject of at most 72 characters,
then a blank line and a body that says why.

Checks every commit after BASE (the last commit before the rule) up to HEAD.
Where BASE is not in the history (a shallow clone, a source tarball) there is
nothing to check: exit 77, which ctest reports as skipped.

Usage: tools/dev/check_commits.py [ROOT] [BASE]   (exit 1 and one line per violation)
"""
import subprocess
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
BASE = sys.argv[2] if len(sys.argv) > 2 else "7d865f5"
MAX_SUBJECT = 72


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)


def main():
    if git("cat-file", "-e", BASE + "^{commit}").returncode != 0:
        print(f"check_commits: {BASE} is not in this history (shallow clone or no git); nothing to check")
        return 77
    log = git("log", "--format=%h%x00%s%x00%b%x1e", f"{BASE}..HEAD")
    if log.returncode != 0:
        print(log.stderr.strip())
        return 2
    problems = []
    count = 0
    for entry in log.stdout.split("\x1e"):
        entry = entry.strip("\n")
        if not entry:
            continue
        count += 1
        sha, subject, body = entry.split("\x00", 2)
        if len(subject) > MAX_SUBJECT:
            problems.append(f"{sha}: subject of {len(subject)} characters (at most {MAX_SUBJECT}): {subject}")
        if subject.startswith(("fixup!", "squash!")):
            problems.append(f"{sha}: a fixup commit: {subject}")
        if not body.strip() and not subject.startswith("Merge "):
            problems.append(f"{sha}: no body saying why: {subject}")
    for p in problems:
        print(p)
    print(f"commit check: {count} commit(s) after {BASE}, {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
