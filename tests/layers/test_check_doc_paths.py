#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The doc-path check fails on a page naming a missing path and passes one that names real ones."""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.abspath(sys.argv[1])
failures = 0
with tempfile.TemporaryDirectory() as root:
    os.makedirs(os.path.join(root, "driver/src/seam"))
    os.makedirs(os.path.join(root, "driver/include/drvshim"))
    open(os.path.join(root, "driver/src/seam/core.hpp"), "w").close()
    open(os.path.join(root, "driver/include/drvshim/device.hpp"), "w").close()
    cases = [
        ("real paths, an include spelling, a user's file", "See driver/src/seam/core.hpp, core.hpp, "
         "`#include <drvshim/device.hpp>` and your app.cpp.\n", 0, ""),
        ("a moved file", "See driver/src/core.hpp.\n", 1, "page.md: driver/src/core.hpp"),
        ("a missing file name", "See gone.cpp.\n", 1, "page.md: gone.cpp"),
    ]
    for name, text, code, needle in cases:
        with open(os.path.join(root, "page.md"), "w") as f:
            f.write(text)
        r = subprocess.run([sys.executable, CHECK, "page.md"], cwd=root, capture_output=True, text=True)
        if r.returncode != code or needle not in r.stdout:
            failures += 1
            print(f"FAIL {name}: exit {r.returncode}, output:\n{r.stdout}{r.stderr}")
        else:
            print(f"ok   {name}")
sys.exit(1 if failures else 0)
