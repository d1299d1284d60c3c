#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The self-contained check fails on each kind of finding and passes a clean tree."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tree_check_support import TreeCheck  # noqa: E402

CHECK = sys.argv[1]
LICENCE = "// SPDX-License-Identifier: Apache-2.0\n"
CLEAN = {
    "driver/src/a.cpp": LICENCE + "// Retries once: the driver may answer NOT_READY first.\n",
    "tools/test.sh": "#!/bin/sh\n# SPDX-License-Identifier: Apache-2.0\n# google/sanitizers issue 1353: LeakSanitizer's tracer\n",
    "lab/README.md": "Run of issue 29, this session.\n",
    "CHANGELOG.md": "- fixed in issue 12\n",
}


_check = TreeCheck(CHECK, CLEAN)
expect = _check.expect


expect("a clean tree passes", {}, 0)
expect("an issue number in a comment", {"ptx/src/b.cpp": LICENCE + "// see issue 19, item 4\n"}, 1,
       "ptx/src/b.cpp:2: a numbered work item")
expect("an issue number in a user page", {"docs/x.md": "Fixed by Issue #7.\n"}, 1, "docs/x.md:1:")
for text in ("see (#29)", "ISSUE 19", "PR #12", "issue-19", "sub-issue 3"):
    expect(f"a work item spelt {text!r}", {"docs/y.md": text + "\n"}, 1, "a numbered work item")
expect("a lab run by number in code", {"driver/src/r.cpp": LICENCE + "// 66 % (H200 run 33)\n"}, 1,
       "a lab run by number")
expect("a lab run by number in a doc page is a citation key", {"docs/r.md": "H200 run 33\n"}, 0)
expect("another project's issue", {"docs/z.md": "the CMake issue 23456 workaround\n"}, 0)
expect("a work period spelt 'earlier session'", {"docs/w.md": "as an earlier session found\n"}, 1, "a work period")
expect("a design note outside the repository", {"docs/u.md": "see shared/design/BASELINE.md\n"}, 1,
       "a path outside the repository")
expect("the lab's machine kinds", {"docs/k.md": "run on kind nvidia-h200-x2\n"}, 1, "the GPU lab's tooling")
expect("a linker script without the licence line", {"tools/x/exports.map": "{ global: f; };\n"}, 1,
       "tools/x/exports.map:1: no licence line")
expect("/work without a slash", {"docs/v.md": "cd /work && make\n"}, 1, "a path outside the repository")
expect("the CI script is scanned", {".ci/run": "#!/bin/sh\n# SPDX-License-Identifier: Apache-2.0\n# issue 5\n"}, 1,
       ".ci/run:3:")
expect("a work period", {"tests/unit/t.cpp": LICENCE + "// added this session\n"}, 1, "a work period")
expect("a source without the licence line", {"common/x.hpp": "#pragma once\n"}, 1, "common/x.hpp:1: no licence line")
expect("a CMake file without the licence line", {"driver/CMakeLists.txt": "add_library(x)\n"}, 1,
       "driver/CMakeLists.txt:1: no licence line")
expect("a path outside the repository", {"docs/y.md": "see ../shared/design/ARCHITECTURE.md\n"}, 1,
       "a path outside the repository")
_check.exit()
