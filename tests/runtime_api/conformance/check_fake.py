#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The conformance suite on the fake driver (CI): runs every case in every
scenario the fake can run and compares each with the real cudart's answer
recorded on the GPU machine (EXPECTED_DIR/<scenario>.txt.gz: the return
code, the last-error sequence (peek, get, get again) and the driver state
after the call, as compare() projects a line of run.py's output). Output
values are not compared here (the fake's device is not the GPU machine's);
the GPU machine compares everything (tools/gpu/run-conformance.sh).

Fails when a case crashes, hangs or gives no output; and when more cases
differ from the recorded answers than BASELINE allows (a ratchet: the
differences found so far, each to be fixed or explained, may only go down;
lower the number when they do). Differences that are the fake's, not
runtime_compat's, are listed in FAKE_DIFFERENCES as "scenario function
case-pattern  # why" (fnmatch patterns; * for any) and not counted; nor are
the differences of runtime_compat's own that explained.txt lists with their
reasons (the GPU machine's comparison reads that file too).

The nodev and nodriver scenarios (no device, no driver) run here too; NO_DRIVER
is the preloaded library that stands in for a machine without the driver.

  check_fake.py PROGRAM RESULTS_DIR EXPECTED_DIR FAKE_DIFFERENCES BASELINE NO_DRIVER
"""
import fnmatch
import gzip
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = ["main", "thread", "sticky", "hostfn", "drvctx", "fresh", "capture", "nodev", "nodriver"]


def comparable(rest):
    """The parts compared here: ret=, whether a capture survived the case (the
    capture scenario), the last-error sequence, the driver state."""
    parts = rest.split(" | ")
    ret = re.match(r"(ret=\S+)", parts[0].strip()) if parts else None
    head = [ret.group(1) if ret else parts[0].strip()]
    capture = re.search(r"(capture=\S+)", parts[0]) if parts else None
    if capture:
        head.append(capture.group(1))
    return " ".join(head + [p.strip() for p in parts[1:]])


def load(path):
    out = {}
    if os.path.exists(path + ".gz"):
        lines = gzip.open(path + ".gz", "rt", encoding="utf-8", errors="replace")
    elif os.path.exists(path):
        lines = open(path, encoding="utf-8", errors="replace")
    else:
        return out
    for line in lines:
        head, _, rest = line.rstrip("\n").partition(" | ")
        out[head] = rest
    return out


def main(argv):
    if len(argv) != 7:
        sys.stderr.write(__doc__)
        return 2
    program, results, expected, differences, baseline_file, no_driver = argv[1:]
    baseline = int(open(baseline_file, encoding="utf-8").read().split("#", 1)[0].split()[0])
    rules = []
    for line in open(differences, encoding="utf-8"):
        text = line.split("#", 1)[0].strip()
        if text:
            scenario, function, pattern = text.split(None, 2)
            rules.append((scenario, function, pattern))
    # runtime_compat's own differences from cudart, each with its reason (compare.py reads them too).
    explained_rules = []
    for line in open(os.path.join(HERE, "explained.txt"), encoding="utf-8"):
        text = line.split("#", 1)[0].strip()
        if text:
            explained_rules.append(tuple(text.split(None, 2)))
    subprocess.run([sys.executable, os.path.join(HERE, "run.py"), program, results, "--scenarios",
                    ",".join(SCENARIOS), "--jobs", "2", "--timeout", "120", "--no-driver-preload", no_driver],
                   check=True)
    failures, differing, total, explained, used = [], [], 0, 0, set()
    for scenario in SCENARIOS:
        got = load(os.path.join(results, scenario + ".txt"))
        want = load(os.path.join(expected, scenario + ".txt"))
        if not got:
            failures.append(f"{scenario}: no results")
        for head, rest in got.items():
            total += 1
            if re.search(r"crashed|hung|exited|no output", rest) or head.endswith(" ?"):
                failures.append(f"{scenario} {head}: {rest}")
                continue
            if head not in want:
                continue  # a case the recorded run did not have: the GPU machine's to judge
            if want[head].startswith(("crashed", "hung", "exited")) or comparable(rest) == want[head]:
                continue  # where cudart crashes, any answer is better
            function, _, name = head.partition(" ")
            rule = next((r for r in rules if r[0] in (scenario, "*") and fnmatch.fnmatchcase(function, r[1]) and
                         fnmatch.fnmatchcase(name, r[2])), None)
            if rule is not None:
                explained += 1
                used.add(rule)
                continue
            if any(fnmatch.fnmatchcase(scenario, r[0]) and fnmatch.fnmatchcase(function, r[1]) and
                   fnmatch.fnmatchcase(name, r[2]) for r in explained_rules):
                explained += 1
                continue
            differing.append(f"{scenario} {head}\n    cudart:  {want[head]}\n    drvshim: {comparable(rest)}")
    for f in differing:
        print(f)
    for f in failures:
        print(f)
    unused = [r for r in rules if r not in used]
    for r in unused:
        print(f"fake-differences.txt: \"{' '.join(r)}\" matches no difference any more; remove it")
    print(f"conformance on the fake: {total} cases, {len(failures)} crashed or hung, {len(differing)} differ from "
          f"cudart's recorded answers (at most {baseline} allowed), {explained} are the fake's or explained")
    if len(differing) > baseline:
        print(f"more differences than the baseline allows: a change made runtime_compat less like cudart")
    elif len(differing) < baseline:
        print(f"fewer differences than the baseline: lower it to {len(differing)} in {baseline_file}")
    return 1 if failures or unused or len(differing) > baseline else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
