#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs every conformance case of one build in every scenario and writes one
file per scenario: a line per case, in case order.

A program runs the cases of one function in one scenario. When it crashes
or hangs, the case it had begun is recorded as "crashed (signal N)" or
"hung" and the program is started again after it; in the fresh scenario each
case is a program of its own, and in the sticky one the program runs a batch
of cases and returns (run again from the next).

Two scenarios are the fresh one in a process that cannot initialise: nodev
with no usable device (CUDA_VISIBLE_DEVICES empty; on the fake driver its
"none" profile) and nodriver with no driver (the library no_driver.so, named
by --no-driver-preload, preloaded: it refuses every dlopen of libcuda.so.*
and of DRVSHIM_LIBCUDA's file, for cudart and libdrvshim_cudart alike).

  run.py PROGRAM OUT_DIR [--scenarios main,thread,...] [--jobs N] [--timeout S]
         [--functions F,G] [--fresh-cases N] [--no-driver-preload SO]

The environment is passed on (LD_LIBRARY_PATH for the drop-in, DRVSHIM_LIBCUDA
for the fake driver).
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys

SCENARIOS = ["main", "thread", "sticky", "hostfn", "drvctx", "fresh", "capture", "nodev", "nodriver"]
# The scenarios that are the program's fresh one in another environment.
FRESH = ("fresh", "nodev", "nodriver")


def environment(scenario, no_driver_preload):
    """The environment a scenario's programs run in."""
    env = dict(os.environ)
    if scenario == "nodev":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["DRVSHIM_FAKE_PROFILE"] = "none"
    elif scenario == "nodriver":
        env["LD_PRELOAD"] = " ".join(p for p in (no_driver_preload, env.get("LD_PRELOAD", "")) if p)
    return env


def run_group(program, scenario, function, count, timeout, fresh_cases, env):
    """[(index, line)] for the cases of `function` in `scenario`."""
    results = {}
    if scenario in FRESH:
        indexes = range(min(count, fresh_cases))
        for i in indexes:
            results[i] = one(program, "fresh", function, i, timeout, env).get(i, f"{function} ? | no output")
        return [(i, results[i]) for i in indexes]
    start = 0
    while start < count:
        got = one(program, scenario, function, start, timeout, env)
        if not got:
            results[start] = "harness: no output"
            start += 1
            continue
        results.update(got)
        start = max(got) + 1
    return sorted(results.items())


def one(program, scenario, function, start, timeout, env):
    """Runs the program from case `start`; {index: line} for the cases it finished
    and, for the one it began and did not finish, why."""
    try:
        proc = subprocess.run([program, scenario, function, str(start)], capture_output=True, text=True,
                              timeout=timeout, errors="replace", env=env)
        out, status = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        status = None
    got, begun, name = {}, None, "?"
    for line in out.splitlines():
        if line.startswith("begin "):
            parts = line.split()
            begun, name = int(parts[1]), parts[2] if len(parts) > 2 else "?"
        elif line.startswith(function + " ") and begun is not None:
            got[begun] = line
            begun = None
    if begun is not None:
        if status is None:
            got[begun] = f"{function} {name} | hung (over {timeout} s)"
        elif status < 0:
            got[begun] = f"{function} {name} | crashed (signal {-status})"
        else:
            got[begun] = f"{function} {name} | exited {status} inside the case"
    return got


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("program")
    ap.add_argument("out_dir")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--functions", default="")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--fresh-cases", type=int, default=2)
    ap.add_argument("--no-driver-preload", default="")
    args = ap.parse_args(argv[1:])
    program = os.path.abspath(args.program)
    listing = subprocess.run([program, "--list"], capture_output=True, text=True, check=True).stdout.split()
    functions = [f for f in listing if not args.functions or f in args.functions.split(",")]
    names = {}  # function -> case count
    for f in functions:
        names[f] = 0
    # The count of each function's cases: the program prints them in --list order.
    counts = subprocess.run([program, "--count-each"], capture_output=True, text=True, check=True).stdout.split()
    counts = dict(zip(counts[0::2], (int(c) for c in counts[1::2])))
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            sys.exit(f"run.py: unknown scenario {s}; accepted: {', '.join(SCENARIOS)}")
    preload = os.path.abspath(args.no_driver_preload) if args.no_driver_preload else ""
    if "nodriver" in scenarios and not os.path.isfile(preload):
        sys.exit("run.py: the nodriver scenario needs --no-driver-preload naming the built no_driver.so "
                 f"(got \"{args.no_driver_preload}\"); or leave nodriver out of --scenarios")
    os.makedirs(args.out_dir, exist_ok=True)
    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for s in scenarios:
            for f in functions:
                jobs[(s, f)] = pool.submit(run_group, program, s, f, counts[f], args.timeout, args.fresh_cases,
                                           environment(s, preload))
        for s in scenarios:
            with open(os.path.join(args.out_dir, s + ".txt"), "w", encoding="utf-8") as out:
                for f in functions:
                    for _, line in jobs[(s, f)].result():
                        out.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
