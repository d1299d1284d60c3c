#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Lists the repository paths a Markdown page names that do not exist.

Usage: tools/dev/check_doc_paths.py [PAGE ...]   (default: every user page: README.md,
CONTRIBUTING.md, CHANGELOG.md, docs/*.md, lab/README.md)
Run from the repository root. A path is a word with a slash (driver/src/seam/core.hpp) or a file name
with a source or doc extension (core.hpp); a bare file name passes when a file of that name
exists anywhere in the tree. Exit status 1 when something is missing.
"""
import os
import re
import sys

EXT = r"\.(?:cpp|hpp|h|md|py|sh|inc|cu|txt|cmake)"
PATH = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]*|[\w-]+" + EXT + r")(?![\w])")
# Names that are not repository paths: the toolkit's headers, the user's own
# files in examples of use, the loader's $ORIGIN.
NOT_PATHS = {"cuda.h", "cudaProfiler.h", "cudaTypedefs.h", "cuda_fp16.h", "driver_types.h", "cuda_runtime_api.h",
             "cuda_profiler_api.h", "app.cpp", "prog.cu", "train.py", "a.cu", "b.cu", "bad.cu", "xbad.cu", "x.h",
             "app_test.cpp", "ORIGIN/.."}
# Where an include spelling (drvshim/drvshim.hpp) names a public header.
INCLUDE_DIRS = ("driver/include", "ptx/include", "runtime_compat/include", "recorder/include", "tools/fakecuda/include")


def names_in_tree():
    names = set()
    for root, dirs, files in os.walk("."):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build")]
        names.update(files)
    return names


def main(pages):
    tree = names_in_tree()
    missing = []
    for page in pages:
        text = open(page, encoding="utf-8").read()
        for name in sorted(set(PATH.findall(text))):
            name = name.rstrip(".").rstrip("/")
            if "/" not in name and not re.search(EXT + "$", name):  # "interposer/": relative to the text
                continue
            if name.endswith(".hpp/.cpp"):  # "x.hpp/.cpp": both files
                name = name[: -len("/.cpp")]
            if name in NOT_PATHS or not re.search(EXT + "$", name) and "/" in name and "." not in name.split("/")[-1] and not os.path.isdir(name):
                # a/b prose ("conductor/crew") and directories named without a trailing slash
                if not any(part in ("driver", "ptx", "runtime_compat", "common", "recorder", "tools", "tests", "docs", "examples") for part in name.split("/")[:1]):
                    continue
            if any(os.path.exists(os.path.join(d, name)) for d in INCLUDE_DIRS):
                continue
            if os.path.exists(name) or ("/" not in name and name in tree):
                continue
            missing.append(f"{page}: {name}")
    print("\n".join(missing))
    return 1 if missing else 0


if __name__ == "__main__":
    import glob
    sys.exit(main(sys.argv[1:] or ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "lab/README.md"]
                  + sorted(glob.glob("docs/*.md"))))
