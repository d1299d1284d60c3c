#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Commit messages follow the house rule: a subject of at most 72 characters,
then a blank line and a body that says why.

Checks every commit after BASE (the last commit before the rule) up to HEAD.
Where BASE is not in the history (a shallow clone) the commits made after
BASE's time are checked. Without git history at
all (a source tarball) there is nothing to check: exit 77, which ctest
reports as skipped.

Usage: tools/dev/check_commits.py [ROOT] [BASE]   (exit 1 and one line per violation)
"""
import subprocess
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
BASE = sys.argv[2] if len(sys.argv) > 2 else "7d865f51cb1f3d1d6bb0a3eaed389af5069956c6"
# BASE's commit time: in a shallow clone without BASE, the commits after it by time.
BASE_TIME = sys.argv[3] if len(sys.argv) > 3 else "1796581923"
MAX_SUBJECT = 72


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)


def main():
    if git("rev-parse", "--verify", "-q", "HEAD").returncode != 0:
        print("check_commits: no git history here (a source tarball?); nothing to check")
        return 77
    if git("cat-file", "-e", BASE + "^{commit}").returncode == 0:
        span, what = [f"{BASE}..HEAD"], f"after {BASE[:12]}"
    else:
        # Filtered here, not with --since: git stops its walk at the first
        # older commit, so one commit with a skewed clock would hide the rest.
        span, what = ["HEAD"], "made after the rule (shallow history)"
    log = git("log", "--format=%ct%x00%h%x00%s%x00%b%x1e", *span)
    if log.returncode != 0:
        print(log.stderr.strip())
        return 2
    problems = []
    count = 0
    for entry in log.stdout.split("\x1e"):
        entry = entry.strip("\n")
        if not entry:
            continue
        when, sha, subject, body = entry.split("\x00", 3)
        if span == ["HEAD"] and int(when) <= int(BASE_TIME):
            continue
        count += 1
        if len(subject) > MAX_SUBJECT:
            problems.append(f"{sha}: subject of {len(subject)} characters (at most {MAX_SUBJECT}): {subject}")
        if subject.startswith(("fixup!", "squash!")):
            problems.append(f"{sha}: a fixup commit: {subject}")
        if not body.strip() and not subject.startswith("Merge "):
            problems.append(f"{sha}: no body saying why: {subject}")
    for p in problems:
        print(p)
    print(f"commit check: {count} commit(s) {what}, {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
