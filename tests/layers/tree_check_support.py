# SPDX-License-Identifier: Apache-2.0
"""What the self-tests of the tree checks share: write a small tree, run the
check on it, and compare its exit status and output with what is expected."""
import os
import subprocess
import sys
import tempfile


class TreeCheck:
    def __init__(self, check, clean):
        self.check = check
        self.clean = clean
        self.failures = 0

    def run(self, extra):
        with tempfile.TemporaryDirectory() as root:
            for rel, text in {**self.clean, **extra}.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            r = subprocess.run([sys.executable, self.check, root], capture_output=True, text=True)
            return r.returncode, r.stdout

    def expect(self, name, extra, code, needle=None):
        rc, out = self.run(extra)
        if rc != code or (needle and needle not in out):
            self.failures += 1
            print(f"FAIL {name}: exit {rc}, output:\n{out}")
        else:
            print(f"ok   {name}")

    def exit(self):
        sys.exit(1 if self.failures else 0)
