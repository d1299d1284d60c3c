#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The conformance suite on the fake driver (CI): runs every case in every
scenario the fake can run and compares each with the real cudart's answer
recorded on the GPU machine (EXPECTED_DIR, run.py's output for the cudart
build): the return code, the last-error sequence (peek, get, get again) and
the driver state after the call must be the same. Output values are not
compared here (the fake's device is not the GPU machine's); the GPU machine
compares them (tools/gpu/run-conformance.sh).

Fails when a case crashes, hangs or gives no output, or differs from the
recorded answer without an entry in FAKE_DIFFERENCES: lines
"scenario function case-pattern  # why" (fnmatch patterns; * for any).

  check_fake.py PROGRAM RESULTS_DIR EXPECTED_DIR FAKE_DIFFERENCES
"""
import fnmatch
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = ["main", "thread", "hostfn", "drvctx", "fresh"]


def comparable(rest):
    """The parts compared here: ret=, the last-error sequence, the driver state."""
    parts = rest.split(" | ")
    ret = re.match(r"(ret=\S+)", parts[0].strip()) if parts else None
    return " ".join([ret.group(1) if ret else parts[0].strip()] + [p.strip() for p in parts[1:]])


def load(path):
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path, encoding="utf-8", errors="replace"):
        head, _, rest = line.rstrip("\n").partition(" | ")
        out[head] = rest
    return out


def main(argv):
    if len(argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    program, results, expected, differences = argv[1:]
    rules = []
    for line in open(differences, encoding="utf-8"):
        text = line.split("#", 1)[0].strip()
        if text:
            scenario, function, pattern = text.split(None, 2)
            rules.append((scenario, function, pattern))
    subprocess.run([sys.executable, os.path.join(HERE, "run.py"), program, results, "--scenarios",
                    ",".join(SCENARIOS), "--jobs", "2", "--timeout", "120"], check=True)
    failures, total, explained, used = [], 0, 0, set()
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
            if comparable(rest) == comparable(want[head]):
                continue
            function, _, name = head.partition(" ")
            rule = next((r for r in rules if r[0] in (scenario, "*") and r[1] in (function, "*") and
                         fnmatch.fnmatchcase(name, r[2])), None)
            if rule is not None:
                explained += 1
                used.add(rule)
                continue
            failures.append(f"{scenario} {head}\n    cudart:  {comparable(want[head])}\n"
                            f"    drvshim: {comparable(rest)}")
    for f in failures:
        print(f)
    unused = [r for r in rules if r not in used]
    for r in unused:
        print(f"fake-differences.txt: \"{' '.join(r)}\" matches no difference any more; remove it")
    print(f"conformance on the fake: {total} cases, {len(failures)} failing, {explained} explained differences")
    return 1 if failures or unused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
