#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The self-contained check fails on each kind of finding and passes a clean tree."""
import os
import subprocess
import sys
import tempfile

CHECK = sys.argv[1]
CLEAN = {
    "driver/src/a.cpp": "// Retries once: the driver may answer NOT_READY first.\n",
    "tools/test.sh": "# google/sanitizers issue 1353: LeakSanitizer's tracer\n",
    "lab/README.md": "Run of issue 29, this session.\n",
    "CHANGELOG.md": "- fixed in issue 12\n",
}


def run(extra):
    with tempfile.TemporaryDirectory() as root:
        for rel, text in {**CLEAN, **extra}.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        r = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
        return r.returncode, r.stdout


failures = 0


def expect(name, extra, code, needle=None):
    global failures
    rc, out = run(extra)
    if rc != code or (needle and needle not in out):
        failures += 1
        print(f"FAIL {name}: exit {rc}, output:\n{out}")
    else:
        print(f"ok   {name}")


expect("a clean tree passes", {}, 0)
expect("an issue number in a comment", {"ptx/src/b.cpp": "// see issue 19, item 4\n"}, 1,
       "ptx/src/b.cpp:1: a numbered work item")
expect("an issue number in a user page", {"docs/x.md": "Fixed by Issue #7.\n"}, 1, "docs/x.md:1:")
expect("a work period", {"tests/unit/t.cpp": "// added this session\n"}, 1, "a work period")
expect("a path outside the repository", {"docs/y.md": "see ../shared/design/ARCHITECTURE.md\n"}, 1,
       "a path outside the repository")
sys.exit(1 if failures else 0)
