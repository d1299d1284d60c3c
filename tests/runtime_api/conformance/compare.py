#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares the conformance results of two builds (run.py's output folders):
the reference (the real cudart) and the one under test. Prints, per function,
how many cases ran and how many differ, then each difference with both lines.
Exits 1 when a case differs and is not in the explained list.

  compare.py REFERENCE_DIR TESTED_DIR [--explained FILE] [--table]

FILE lists explained differences, one "scenario function case" per line
(fnmatch patterns, * for any; # comments): tests/runtime_api/conformance/
explained.txt, where each says why. A case where the reference crashed or
hung is counted apart (any answer is better) and is no difference.
--table prints the per-function table as Markdown.
"""
import argparse
import collections
import fnmatch
import os
import re
import sys


def load(folder):
    """{scenario: {(function, case): rest of the line}} in file order."""
    out = {}
    for file in sorted(os.listdir(folder)):
        if not file.endswith(".txt"):
            continue
        scenario = file[:-4]
        cases = collections.OrderedDict()
        counts = collections.Counter()
        for line in open(os.path.join(folder, file), encoding="utf-8", errors="replace"):
            line = line.rstrip("\n")
            head, _, rest = line.partition(" | ")
            function, _, name = head.partition(" ")
            if name == "?":  # a crash or hang: named by its position
                name = f"#{counts[function]}"
            counts[function] += 1
            cases[(function, name)] = rest
        out[scenario] = cases
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reference")
    ap.add_argument("tested")
    ap.add_argument("--explained", default="")
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args(argv[1:])
    ref, got = load(args.reference), load(args.tested)
    explained = []
    if args.explained:
        for line in open(args.explained, encoding="utf-8"):
            line = line.split("#", 1)[0].strip()
            if line:
                explained.append(tuple(line.split(None, 2)))

    def is_explained(scenario, function, name):
        return any(fnmatch.fnmatchcase(scenario, s) and fnmatch.fnmatchcase(function, f) and
                   fnmatch.fnmatchcase(name, c) for s, f, c in explained)

    per_function = collections.defaultdict(lambda: [0, 0, 0])  # cases, differing, explained
    reference_crashed = 0
    diffs = []
    for scenario in sorted(set(ref) | set(got)):
        r, g = ref.get(scenario, {}), got.get(scenario, {})
        for key in list(r) + [k for k in g if k not in r]:
            function, name = key
            stats = per_function[function]
            stats[0] += 1
            a, b = r.get(key, "(missing)"), g.get(key, "(missing)")
            if a != b:
                if re.match(r"(crashed|hung|exited)", a):
                    reference_crashed += 1
                elif is_explained(scenario, function, name):
                    stats[2] += 1
                else:
                    stats[1] += 1
                    diffs.append((scenario, function, name, a, b))
    total = sum(s[0] for s in per_function.values())
    bad = sum(s[1] for s in per_function.values())
    if args.table:
        print("| Function | Cases | Identical | Explained | Differ |")
        print("|---|---:|---:|---:|---:|")
        for function in sorted(per_function):
            n, d, e = per_function[function]
            print(f"| `{function}` | {n} | {n - d - e} | {e} | {d} |")
        return 0
    for scenario, function, name, a, b in diffs:
        print(f"{scenario} {function} {name}\n    cudart:  {a}\n    drvshim: {b}")
    print(f"\n{total} cases, {bad} differ, {sum(s[2] for s in per_function.values())} explained, "
          f"{reference_crashed} where cudart crashed or hung, "
          f"{sum(1 for s in per_function.values() if s[1] == 0)} of {len(per_function)} functions identical")
    worst = sorted(per_function.items(), key=lambda kv: -kv[1][1])[:15]
    print("most differences: " + ", ".join(f"{f} {s[1]}/{s[0]}" for f, s in worst if s[1]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
