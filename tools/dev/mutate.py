#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Mutation testing: plants one small bug at a time in the critical paths and
runs the unit tests against it. A mutant no test catches is a bug users could
ship past the suite; each one gets a test, or a written reason why it cannot
change behaviour (an equivalent mutant).

The mutants are listed in tools/dev/mutants.toml: file, the exact text before
and after, and what a user would see. Each is applied alone, the tree rebuilt
incrementally, and the tests of the ctest label "unit" run, except those also
labelled "tree" (checks that read the source, not the program). The gtest
programs run in one process each (a test that ends its process early, as
ctest would not notice, makes the rest run in a new one), the other tests
through ctest; the mutant's hint tests first, stopping at the first failure.
A mutant is caught when a test fails, crashes or hangs, and survives when
every test passes.

Usage:
  mutate.py [--work DIR] [--only ID,...] [--report FILE] [--jobs N]
      Mutates a copy of the tree (default build-mutate/ in the checkout:
      src/ the copy, build/ its build; the first run builds everything,
      later runs rebuild what changed). The unmutated tree's tests run first
      and must all pass. Prints one line per mutant and the score.
  mutate.py --in-place --build-dir BUILD --ci
      What CI runs: the mutants marked `ci = true`, applied to this checkout
      and built in BUILD (an already built tree); their hint tests must pass
      unmutated and catch each mutant. The checkout is restored and BUILD
      rebuilt afterwards, also when interrupted (SIGINT, SIGTERM, SIGHUP); a
      mutant left behind by a killed run is restored by the next run.
  mutate.py --in-place --build-dir BUILD --restore
      Only restores a file a killed run left mutated (tools/test.sh runs it
      before building).
  mutate.py --check
      Checks the list only: every entry complete, every `before` text found
      exactly once in its file, some mutants marked for CI (no build; ctest
      `mutants_current`).
  mutate.py --list
      Prints the mutants' ids and files.

Exit status: 0 when every mutant run was caught or is marked equivalent
(--ci: every CI mutant caught), 1 otherwise, 2 on bad usage or a broken
setup (a failing unmutated test, a mutant that does not build, a hint that
names no test), 130 when interrupted.
"""
import argparse
import fnmatch
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = ROOT / "tools" / "dev" / "mutants.toml"
KEYS_REQUIRED = {"id": str, "file": str, "before": str, "after": str, "harm": str}
KEYS_OPTIONAL = {"hint": list, "ci": bool, "known": bool, "equivalent": str}
JOURNAL = "mutate-journal.json"
# ctest's regular expressions stop compiling somewhere above 50 KB: names go
# to ctest in batches well below that.
CTEST_BATCH = 40


class SetupError(Exception):
    """The run cannot give a meaningful answer (bad list, failing baseline)."""


def load(path=MUTANTS, root=ROOT):
    """The mutant list, checked: complete entries of the right types, unique
    ids, each `before` found exactly once in its file, some marked for CI."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SetupError(f"cannot read the mutant list {path}: {e}")
    mutants = data.get("mutant", [])
    problems, seen = [], set()
    for i, m in enumerate(mutants):
        where = f"entry {i + 1} ({m.get('id', 'no id')})"
        missing = KEYS_REQUIRED.keys() - m.keys()
        unknown = m.keys() - KEYS_REQUIRED.keys() - KEYS_OPTIONAL.keys()
        if missing:
            problems.append(f"{where}: missing {', '.join(sorted(missing))}")
            continue
        if unknown:
            problems.append(f"{where}: unknown keys {', '.join(sorted(unknown))}; accepted: "
                            + ", ".join(sorted(KEYS_REQUIRED.keys() | KEYS_OPTIONAL.keys())))
        wrong = [k for k, t in {**KEYS_REQUIRED, **KEYS_OPTIONAL}.items() if k in m and not isinstance(m[k], t)]
        if "hint" in m and isinstance(m["hint"], list) and not all(isinstance(h, str) and h for h in m["hint"]):
            wrong.append("hint")
        if wrong:
            problems.append(f"{where}: wrong type for {', '.join(wrong)} (hint: a list of gtest or ctest name "
                            "patterns; ci, known: true or false; the others: strings)")
            continue
        if m["id"] in seen:
            problems.append(f"{where}: the id is used twice")
        seen.add(m["id"])
        if m["before"] == m["after"]:
            problems.append(f"{where}: before and after are the same text")
        if m.get("ci") and not m.get("hint"):
            problems.append(f"{where}: a CI mutant needs hint tests (CI runs only those)")
        if m.get("ci") and m.get("equivalent"):
            problems.append(f"{where}: a CI mutant must be caught, so it cannot be marked equivalent")
        try:
            text = (root / m["file"]).read_text()
        except OSError as e:
            problems.append(f"{where}: cannot read {m['file']}: {e.strerror}")
            continue
        n = text.count(m["before"])
        if n != 1:
            problems.append(f"{where}: the text before is found {n} times in {m['file']} (must be exactly once)")
    if mutants and not any(m.get("ci") for m in mutants):
        problems.append("no mutant is marked ci = true (CI runs those)")
    if problems:
        raise SetupError("the mutant list does not apply to this tree:\n  " + "\n  ".join(problems))
    return mutants


# ---- child processes ---------------------------------------------------------

_children = set()
_children_lock = threading.Lock()


def spawn(cmd, timeout, **kw):
    """Runs cmd in its own process group; on a timeout or an interrupt the
    whole group is killed (a build's compilers, ctest's tests), so nothing it
    started outlives it. Returns (returncode or None on timeout, stdout)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                         start_new_session=True, **kw)
    with _children_lock:
        _children.add(p)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, _ = p.communicate()
        return None, out
    except BaseException:
        # An interrupt: the group goes first, so no compiler of it can write
        # a mutant's object after the planted file is restored.
        kill_group(p)
        p.wait()
        raise
    finally:
        with _children_lock:
            _children.discard(p)


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_children():
    """Kills every running child's group and waits for the leaders."""
    with _children_lock:
        live = list(_children)
    for p in live:
        kill_group(p)
    for p in live:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


# ---- the tree ---------------------------------------------------------------


def sync_copy(src_root, dst):
    """Copies the tracked and untracked, not ignored files of the checkout to
    dst, rewriting only files whose contents changed (so the copy's build
    stays incremental), and removes files the checkout no longer has."""
    out = subprocess.run(["git", "-C", str(src_root), "ls-files", "-z", "-c", "-o", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    names = {n for n in out.decode().split("\0") if n and (src_root / n).is_file()}
    dst.mkdir(parents=True, exist_ok=True)
    for n in names:
        s, d = src_root / n, dst / n
        data = s.read_bytes()
        if d.is_file() and d.read_bytes() == data:
            continue
        d.parent.mkdir(parents=True, exist_ok=True)
        d.write_bytes(data)
        shutil.copymode(s, d)
    for d in dst.rglob("*"):
        if d.is_file() and str(d.relative_to(dst)) not in names:
            d.unlink()


def configure(src, build):
    if (build / "CMakeCache.txt").exists():
        return
    gen = ["-GNinja"] if shutil.which("ninja") else []
    rc, out = spawn(["cmake", "-S", str(src), "-B", str(build), *gen, "-DCMAKE_BUILD_TYPE=RelWithDebInfo"], None)
    if rc != 0:
        raise SetupError(f"cannot configure {build}:\n{out[-2000:]}")


def build_tree(build, jobs):
    """Builds; returns None, or the build's first error lines."""
    rc, out = spawn(["cmake", "--build", str(build), "-j", str(jobs)], None)
    if rc == 0:
        return None
    lines = [l for l in out.splitlines() if re.search(r"error:|undefined reference|\*\*\*|FAILED:", l)]
    return "\n".join(lines[:8]) or out[-2000:]


def write_atomically(path, text):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.mutate-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


class Planted:
    """One mutant written into a file. The original comes back on exit, also
    after an exception or an interrupt, once every child process is gone (a
    compiler still running would otherwise write the mutant's object after
    the restore); it is written with a new modification time, so the next
    build recompiles it. A journal next to the build (the original, and a
    digest of the mutated text) lets the next run restore it after a kill."""

    def __init__(self, src, build, mutant):
        self.path = src / mutant["file"]
        self.journal = build / JOURNAL
        self.mutant = mutant

    def __enter__(self):
        self.original = self.path.read_text()
        mutated = self.original.replace(self.mutant["before"], self.mutant["after"], 1)
        write_atomically(self.journal, json.dumps({"file": str(self.path), "text": self.original,
                                                   "mutated": digest(mutated)}))
        try:
            write_atomically(self.path, mutated)
        except BaseException:
            self.restore()
            raise
        return self

    def restore(self):
        kill_children()
        write_atomically(self.path, self.original)
        os.utime(self.path)
        self.journal.unlink(missing_ok=True)

    def __exit__(self, *exc):
        self.restore()
        return False


def restore_from_journal(build):
    """Restores a file a killed run left mutated; a file edited since (its
    text no longer the mutant's) is left alone, with a warning."""
    j = build / JOURNAL
    if not j.exists():
        return
    entry = json.loads(j.read_text())
    path = Path(entry["file"])
    current = path.read_text() if path.exists() else None
    if current is not None and digest(current) == entry["mutated"]:
        write_atomically(path, entry["text"])
        os.utime(path)
        print(f"mutate: restored {path}, left mutated by a run that was killed", flush=True)
    elif current != entry["text"]:
        print(f"mutate: warning: {path} was left mutated by a killed run and has been edited since; "
              "it is left as it is (compare it with git diff)", file=sys.stderr, flush=True)
    j.unlink()


# ---- the tests --------------------------------------------------------------


class Suite:
    """The tests of the label, as the runs that execute them: one per gtest
    program (its tests by name) and ctest runs for the rest."""

    def __init__(self, build, label="unit", exclude="tree"):
        rc, out = spawn(["ctest", "--show-only=json-v1", "-L", label, "-LE", exclude], 300, cwd=build)
        if rc != 0:
            raise SetupError(f"ctest cannot list the tests of {build}:\n{out[-2000:]}")
        self.build = build
        self.groups = {}  # (program, args, env, cwd) -> [gtest names]
        self.timeouts = {}  # group key or ctest name -> seconds from the TIMEOUT property
        self.others = []  # ctest names
        plain = {"ENVIRONMENT", "WORKING_DIRECTORY", "LABELS", "TIMEOUT", "SKIP_REGULAR_EXPRESSION"}
        for t in json.loads(out[out.index("{"):])["tests"]:
            cmd = t.get("command") or []
            props = {p["name"]: p["value"] for p in t.get("properties", [])}
            filt = [a for a in cmd if a.startswith("--gtest_filter=")]
            if not filt or set(props) - plain or props.get("DISABLED"):
                self.others.append(t["name"])
                self.timeouts[t["name"]] = props.get("TIMEOUT")
                continue
            key = (cmd[0], tuple(a for a in cmd[1:] if not a.startswith("--gtest_filter=")),
                   tuple(props.get("ENVIRONMENT", [])), props.get("WORKING_DIRECTORY", str(build)))
            self.groups.setdefault(key, []).append(filt[0].split("=", 1)[1])
            if props.get("TIMEOUT"):
                self.timeouts[key] = max(self.timeouts.get(key) or 0, props["TIMEOUT"])

    def names(self):
        return [n for v in self.groups.values() for n in v] + self.others

    def runs(self, hints):
        """The runs, hint tests first: lists of (kind, key, names). Raises
        SetupError for a hint that names no test."""
        unused = [h for h in hints if not any(fnmatch.fnmatchcase(n, h) for n in self.names())]
        if unused:
            raise SetupError(f"hint patterns that name no test of the label: {', '.join(unused)}")
        first, rest = [], []

        def split(kind, key, names):
            hit = [n for n in names if any(fnmatch.fnmatchcase(n, h) for h in hints)]
            miss = [n for n in names if n not in set(hit)]
            if kind == "ctest":
                first.extend(("ctest", None, hit[i:i + CTEST_BATCH]) for i in range(0, len(hit), CTEST_BATCH))
                rest.extend(("ctest", None, miss[i:i + CTEST_BATCH]) for i in range(0, len(miss), CTEST_BATCH))
                return
            if hit:
                first.append((kind, key, hit))
            if miss:
                rest.append((kind, key, miss))

        for key, names in self.groups.items():
            split("gtest", key, names)
        split("ctest", None, self.others)
        return first, rest

    def run(self, kind, key, names, timeout):
        """Returns the names of the failed tests ([] when all passed)."""
        if kind == "ctest":
            return self.run_ctest(names, timeout)
        return self.run_gtest(key, names, timeout)

    def run_ctest(self, names, timeout):
        longest = max([timeout] + [self.timeouts.get(n) or 0 for n in names])
        regex = "^(" + "|".join(re.escape(n) for n in names) + ")$"
        rc, out = spawn(["ctest", "-R", regex, "-j", "1", "--stop-on-failure", "--no-tests=error", "--timeout",
                         str(timeout)], longest * len(names) + 60, cwd=self.build)
        if rc is None:
            return ["(ctest run timed out)"]
        ran = re.search(r"tests passed, \d+ tests failed out of (\d+)", out)
        if rc == 0:
            if not ran or int(ran.group(1)) != len(names):
                raise SetupError(f"ctest ran {ran.group(1) if ran else 'no'} of {len(names)} tests named:\n"
                                 + out[-1500:])
            return []
        block = out.split("The following tests FAILED:", 1)
        failed = re.findall(r"^\s*\d+ - (\S+) \(", block[1], re.M) if len(block) == 2 else []
        return failed or ["(ctest failed: " + (out.strip().splitlines() or ["no output"])[-1] + ")"]

    def run_gtest(self, key, names, timeout):
        program, args, env, cwd = key
        environ = dict(os.environ)
        environ.update(e.split("=", 1) for e in env)
        limit = max(timeout, self.timeouts.get(key) or 0) * 2
        remaining = list(names)
        while remaining:
            cmd = [program, *args, "--gtest_filter=" + ":".join(remaining), "--gtest_fail_fast"]
            rc, out = spawn(cmd, limit, cwd=cwd, env=environ)
            started = re.findall(r"^\[ RUN      \] (\S+)", out, re.M)
            if rc is None:
                return [f"{started[-1] if started else Path(program).name} (hung)"]
            failed = re.findall(r"^\[  FAILED  \] (\S+?)(?:,| \(|$)", out, re.M)
            if failed:
                return sorted(set(failed))
            if rc != 0:
                why = f"exit status {rc}" if rc > 0 else f"signal {-rc}"
                return [f"{started[-1] if started else Path(program).name} (crashed: {why})"]
            finished = set(re.findall(r"^\[       OK \] (\S+)", out, re.M)) | set(
                re.findall(r"^\[  SKIPPED \] (\S+)", out, re.M))
            done = set(started) | finished
            if not started and not re.search(r"^\[==========\] \d+ tests? from", out, re.M):
                raise SetupError(f"{Path(program).name} ran none of its {len(remaining)} tests:\n{out[-1500:]}")
            # A test that ended the process with status 0 passed, as under
            # ctest (one process per test); the rest run in a new process.
            remaining = [n for n in remaining if n not in done]
            if remaining and not started:
                raise SetupError(f"{Path(program).name} did not run {', '.join(remaining[:5])}")
        return []

    def first_failure(self, hints, jobs, timeout, hints_only=False):
        """Runs the hint tests, then the rest, a few runs at a time, stopping
        at the first failure (the other runs are killed). Returns the failed
        tests ([] when none)."""
        first, rest = self.runs(hints)
        for batch in (first, [] if hints_only else rest):
            if not batch:
                continue
            pool = ThreadPoolExecutor(max_workers=jobs)
            try:
                pending = {pool.submit(self.run, *r, timeout) for r in batch}
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        failed = f.result()
                        if failed:
                            for p in pending:
                                p.cancel()
                            kill_children()
                            return failed
            except BaseException:
                kill_children()  # an interrupt: the pool's runs end now, not after their tests
                raise
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
        return []


# ---- the run ----------------------------------------------------------------


def stop_on_signals():
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, handler)
    # Started in the background by a shell, this process ignores SIGINT and
    # SIGQUIT, and its tests would inherit that (a test of how a program ends
    # on Ctrl-C would fail): handled here, they are the default again in
    # every program the tests start.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def write_report(path, rows, mutants, head):
    by_id = {m["id"]: m for m in mutants}
    lines = ["| mutant | file | result | caught by / reason |", "|---|---|---|---|"]
    for mid, status, detail in rows:
        m = by_id[mid]
        lines.append(f"| `{mid}` | `{m['file']}` | {status} | {detail.replace('|', '/')} |")
    Path(path).write_text(head + "\n\n" + "\n".join(lines) + "\n")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], usage=__doc__.split("Usage:")[1].split("Exit")[0])
    ap.add_argument("--work", type=Path, default=ROOT / "build-mutate")
    ap.add_argument("--in-place", action="store_true")
    ap.add_argument("--build-dir", type=Path)
    ap.add_argument("--ci", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--report", type=Path)
    ap.add_argument("--jobs", type=positive, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=positive, default=300, help="seconds one test may run")
    ap.add_argument("--mutants", type=Path, default=MUTANTS)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--restore", action="store_true")
    a = ap.parse_args(argv)
    if a.in_place != bool(a.build_dir):
        ap.error("--in-place and --build-dir go together: the checkout is mutated and built in BUILD")
    if a.ci and not a.in_place:
        ap.error("--ci mutates this checkout: give --in-place --build-dir BUILD")

    stop_on_signals()
    try:
        if a.in_place:
            restore_from_journal(a.build_dir.resolve())
        if a.restore:
            if not a.in_place:
                ap.error("--restore restores this checkout: give --in-place --build-dir BUILD")
            return 0
        mutants = load(a.mutants)
        if a.check:
            print(f"mutate: {len(mutants)} mutants, every one applies to this tree "
                  f"({sum(1 for m in mutants if m.get('ci'))} marked for CI)")
            return 0
        if a.list:
            for m in mutants:
                print(f"{m['id']:60} {m['file']}{'  (ci)' if m.get('ci') else ''}")
            return 0
        chosen = mutants
        if a.only:
            wanted = [w.strip() for w in a.only.split(",") if w.strip()]
            unknown = [w for w in wanted if w not in {m["id"] for m in mutants}]
            if unknown or not wanted:
                raise SetupError(f"unknown mutant ids: {', '.join(unknown) or '(none given)'} "
                                 "(mutate.py --list names them)")
            chosen = [m for m in mutants if m["id"] in wanted]
        if a.ci:
            chosen = [m for m in chosen if m.get("ci")]
            if not chosen:
                raise SetupError("none of the chosen mutants is marked ci = true")
        return run(a, chosen, mutants)
    except SetupError as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2


def run(a, chosen, mutants):
    if a.in_place:
        src, build = ROOT, a.build_dir.resolve()
    else:
        work = a.work.resolve()
        src, build = work / "src", work / "build"
        build.mkdir(parents=True, exist_ok=True)
        restore_from_journal(build)
        print(f"mutate: copying the tree to {src}", flush=True)
        sync_copy(ROOT, src)
        configure(src, build)
    print(f"mutate: building {build}", flush=True)
    err = build_tree(build, a.jobs)
    if err:
        raise SetupError(f"the unmutated tree does not build:\n{err}")
    suite = Suite(build)
    print(f"mutate: {len(suite.names())} tests of the label unit (without label tree)", flush=True)
    for m in chosen:
        suite.runs(m.get("hint", []))  # every hint names a test
    if not a.no_baseline:
        t0 = time.monotonic()
        hints = sorted({h for m in chosen for h in m.get("hint", [])})
        failed = suite.first_failure(hints, a.jobs, a.timeout, hints_only=a.ci)
        if failed:
            raise SetupError("the unmutated tree fails tests, so no mutant's result would mean anything: "
                             + ", ".join(failed))
        print(f"mutate: the unmutated tree passes{' its hint tests' if a.ci else ''} "
              f"({time.monotonic() - t0:.0f} s)", flush=True)

    rows, caught, survived, equivalent, wrongly_equivalent = [], 0, [], 0, []
    rebuilt = True
    try:
        for i, m in enumerate(chosen, 1):
            t0 = time.monotonic()
            with Planted(src, build, m):
                rebuilt = False
                err = build_tree(build, a.jobs)
                if err:
                    raise SetupError(f"mutant {m['id']} does not build; fix its entry:\n{err}")
                failed = suite.first_failure(m.get("hint", []), a.jobs, a.timeout, hints_only=a.ci)
            took = time.monotonic() - t0
            if failed:
                caught += 1
                status, detail = "caught", ", ".join(failed[:3]) + (" ..." if len(failed) > 3 else "")
                if m.get("equivalent"):
                    wrongly_equivalent.append(m["id"])
            elif m.get("equivalent"):
                equivalent += 1
                status, detail = "equivalent", m["equivalent"]
            else:
                survived.append(m["id"])
                status, detail = "SURVIVED", m["harm"]
            rows.append((m["id"], status, detail))
            print(f"[{i}/{len(chosen)}] {status:10} {m['id']} ({took:.0f} s): {detail}", flush=True)
    finally:
        if a.in_place and not rebuilt:
            print("mutate: rebuilding the restored tree", flush=True)
            err = build_tree(build, a.jobs)
            if err:
                print(f"mutate: the restored tree does not build; {build} may hold a mutant's objects:\n{err}",
                      file=sys.stderr)
                return 2
    scored = len(rows) - equivalent
    score = 100.0 * caught / scored if scored else 100.0
    head = (f"{caught} of {scored} mutants caught ({score:.1f} %), {equivalent} equivalent, "
            f"{len(survived)} survived")
    print(f"mutate: {head}" + (f"; survivors: {', '.join(survived)}" if survived else ""))
    if wrongly_equivalent:
        print(f"mutate: marked equivalent but caught (remove the mark): {', '.join(wrongly_equivalent)}")
    if a.report:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        write_report(a.report, rows, mutants, f"mutate.py at {rev}, {time.strftime('%Y-%m-%d')}: {head}")
    return 1 if survived or wrongly_equivalent else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt as e:
        kill_children()
        print(f"mutate: interrupted ({e}); the planted mutant, if any, was restored", file=sys.stderr)
        sys.exit(130)
