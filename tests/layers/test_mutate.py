#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The mutation tool refuses a list that does not apply, plants exactly one
mutant, and always puts the original back: after an exception, and (through
its journal) after a run that was killed."""
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

spec = importlib.util.spec_from_file_location("mutate", sys.argv[1])
mutate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mutate)

failures = []


def check(what, ok):
    if not ok:
        failures.append(what)


def refused(what, toml, files, needle):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        (root / "m.toml").write_text(toml)
        try:
            mutate.load(root / "m.toml", root)
        except mutate.SetupError as e:
            check(f"{what}: the message names it ({needle!r} in {e})", needle in str(e))
            return
        failures.append(f"{what}: accepted")


ENTRY = "[[mutant]]\nid = '{id}'\nfile = 'a.cpp'\nbefore = '''{before}'''\nafter = '''{after}'''\nharm = 'h'\n"
FILES = {"a.cpp": "int f() { return 1; }\nint g() { return 1; }\n"}

refused("a text found twice", ENTRY.format(id="x", before="return 1;", after="return 2;"), FILES, "found 2 times")
refused("a text not found", ENTRY.format(id="x", before="return 3;", after="return 2;"), FILES, "found 0 times")
refused("no change", ENTRY.format(id="x", before="int f()", after="int f()"), FILES, "the same text")
refused("a missing key", "[[mutant]]\nid = 'x'\nfile = 'a.cpp'\nbefore = 'int f()'\n", FILES, "missing after, harm")
refused("an unknown key", ENTRY.format(id="x", before="int f()", after="int h()") + "hints = ['A.*']\n", FILES,
        "unknown keys hints")
refused("an id used twice", ENTRY.format(id="x", before="int f()", after="int h()") +
        ENTRY.format(id="x", before="int g()", after="int h()"), FILES, "used twice")
refused("a missing file", ENTRY.format(id="x", before="a", after="b").replace("a.cpp", "none.cpp"), FILES,
        "cannot read none.cpp")
refused("a CI mutant without hints", ENTRY.format(id="x", before="int f()", after="int h()") + "ci = true\n", FILES,
        "a CI mutant needs hint tests")

with tempfile.TemporaryDirectory() as d:
    src, build = Path(d) / "src", Path(d) / "build"
    src.mkdir()
    build.mkdir()
    original = FILES["a.cpp"]
    (src / "a.cpp").write_text(original)
    m = {"id": "x", "file": "a.cpp", "before": "int g() { return 1; }", "after": "int g() { return 0; }"}
    try:
        with mutate.Planted(src, build, m):
            check("the mutant is planted, once", (src / "a.cpp").read_text() == original.replace("1; }\nint g() { return 1",
                                                                                                 "1; }\nint g() { return 0"))
            check("the journal holds the original", json.loads((build / mutate.JOURNAL).read_text())["text"] == original)
            raise RuntimeError("a failed build")
    except RuntimeError:
        pass
    check("an exception restores the file", (src / "a.cpp").read_text() == original)
    check("and removes the journal", not (build / mutate.JOURNAL).exists())

    # A run killed while the mutant was planted: the next run restores it first.
    planted = mutate.Planted(src, build, m).__enter__()
    check("planted again", (src / "a.cpp").read_text() != original)
    del planted
    mutate.restore_from_journal(build)
    check("the journal restores the file", (src / "a.cpp").read_text() == original)
    check("and is gone", not (build / mutate.JOURNAL).exists())

    # Killed, then the developer reverted the mutant and edited on: their work stays.
    mutate.Planted(src, build, m).__enter__()
    (src / "a.cpp").write_text(original + "int h();\n")
    mutate.restore_from_journal(build)
    check("a file edited since is left alone", (src / "a.cpp").read_text() == original + "int h();\n")
    check("and the journal is dropped", not (build / mutate.JOURNAL).exists())

# The gtest runner: a fake gtest program whose behaviour the test chooses.
FAKE = r"""#!/usr/bin/env python3
import os, sys, time
names = [a for a in sys.argv if a.startswith("--gtest_filter=")][0].split("=", 1)[1].split(":")
mode = os.environ["FAKE_MODE"]
print("[==========] Running %d tests from 1 test suite." % len(names))
for n in names:
    print("[ RUN      ] " + n, flush=True)
    if mode == "exit0" and n == "T.A":
        sys.exit(0)
    if mode == "fail" and n == "T.B":
        print("[  FAILED  ] T.B (0 ms)")
        print("[  FAILED  ] T.B")
        sys.exit(1)
    if mode == "crash" and n == "T.B":
        os.abort()
    if mode == "hang" and n == "T.B":
        time.sleep(60)
    print("[       OK ] " + n + " (0 ms)", flush=True)
"""
with tempfile.TemporaryDirectory() as d:
    prog = Path(d) / "fake_gtest"
    prog.write_text(FAKE)
    prog.chmod(0o755)
    suite = mutate.Suite.__new__(mutate.Suite)
    suite.build, suite.timeouts, suite.others = Path(d), {}, []

    def gtest(mode, timeout=30):
        key = (str(prog), (), (f"FAKE_MODE={mode}",), d)
        suite.groups = {key: ["T.A", "T.B"]}
        return suite.run_gtest(key, ["T.A", "T.B"], timeout)

    check("all passing: nothing failed", gtest("pass") == [])
    check("a failure names the test", gtest("fail") == ["T.B"])
    check("a crash names the test", gtest("crash") == ["T.B (crashed: signal 6)"])
    check("a hang names the test", gtest("hang", timeout=1) == ["T.B (hung)"])
    check("a test ending the process with 0 does not hide the next", gtest("exit0") == [])
    try:
        suite.runs(["Nothing.*"])
        failures.append("a hint naming no test is accepted")
    except mutate.SetupError as e:
        check("a hint naming no test is refused", "Nothing.*" in str(e))

if failures:
    print("test_mutate: FAILED:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("test_mutate: all checks passed")
