#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The commit check fails on a long subject and on a missing body, passes good
commits, and checks every commit there is where its base is not in the history."""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.abspath(sys.argv[1])
failures = 0


def git(root, *args, when=None):
    env = dict(os.environ)
    if when is not None:
        env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"] = f"@{when} +0000"
    return subprocess.run(["git", "-C", root, "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          capture_output=True, text=True, check=True, env=env).stdout.strip()


# Commits are dated 2026-01-01 unless a test says otherwise, so the tests do not depend on today's date.
WHEN = 1767225600


def commit(root, message, when=WHEN):
    with open(os.path.join(root, "f"), "a") as f:
        f.write("x")
    git(root, "add", "f")
    git(root, "commit", "-q", "-m", message, when=when)
    return git(root, "rev-parse", "HEAD")


def expect(name, messages, code, needle="", base=None, base_time=None, times=None):
    global failures
    with tempfile.TemporaryDirectory() as root:
        git(root, "init", "-q")
        first = commit(root, "base\n\nthe start")
        for i, m in enumerate(messages):
            commit(root, m, when=times[i] if times else WHEN)
        args = [root, base or first] + ([str(base_time)] if base_time is not None else [])
        r = subprocess.run([sys.executable, CHECK, *args], capture_output=True, text=True)
        if r.returncode != code or needle not in r.stdout:
            failures += 1
            print(f"FAIL {name}: exit {r.returncode}, output:\n{r.stdout}{r.stderr}")
        else:
            print(f"ok   {name}")


expect("good commits pass", ["Add a thing\n\nBecause it was missing."], 0)
expect("a subject over 72 characters", ["A" * 73 + "\n\nwhy"], 1, "subject of 73 characters")
expect("a commit without a body", ["Add a thing"], 1, "no body saying why")
expect("a base not in the history: the commits after its time are checked", ["Add a thing\n\nwhy"], 0,
       "shallow history", base="0" * 40, base_time=0)
expect("... and a bad one there fails", ["A" * 80 + "\n\nwhy"], 1, "subject of 80 characters", base="0" * 40,
       base_time=0)
expect("... and older ones are not", ["A" * 80 + "\n\nwhy"], 0, "0 commit(s)", base="0" * 40,
       base_time=WHEN + 10)
expect("... and a commit with an older clock in between hides none after it",
       ["B" * 80 + "\n\nwhy", "older clock\n\nwhy", "fine\n\nwhy"], 1, "subject of 80 characters", base="0" * 40,
       base_time=WHEN + 10, times=[WHEN + 100, WHEN - 1000, WHEN + 200])
sys.exit(1 if failures else 0)
