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


def git(root, *args):
    return subprocess.run(["git", "-C", root, "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def commit(root, message):
    with open(os.path.join(root, "f"), "a") as f:
        f.write("x")
    git(root, "add", "f")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD")


def expect(name, messages, code, needle="", base=None, base_time=None):
    global failures
    with tempfile.TemporaryDirectory() as root:
        git(root, "init", "-q")
        first = commit(root, "base\n\nthe start")
        for m in messages:
            commit(root, m)
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
       base_time=1893456000)
sys.exit(1 if failures else 0)
