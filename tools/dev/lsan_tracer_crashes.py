#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Names the tests of a ctest run that failed only because LeakSanitizer's own
tracer crashed at exit ("Tracer caught signal 11" then "LeakSanitizer has
encountered a fatal error"): an intermittent sanitizer bug, not a leak
(google/sanitizers issue 1353, open). tools/test.sh runs those tests, and only
those, once more.

Usage: lsan_tracer_crashes.py BUILD_DIR
Prints a ctest -R regular expression of those tests and exits 0 when every
failed test of the last run failed that way; exits 1 (printing why on stderr)
when any failure is something else, or when the log cannot be read.
"""
import re
import sys
from pathlib import Path

TRACER = ("Tracer caught signal", "LeakSanitizer has encountered a fatal error")


def blocks(log_text):
    """Each test's part of LastTest.log, by test name."""
    out = {}
    name, lines = None, []
    for line in log_text.splitlines():
        m = re.match(r"^\d+/\d+ Testing: (.*)$", line)
        if m:
            if name is not None:
                out[name] = "\n".join(lines)
            name, lines = m.group(1), []
        elif name is not None:
            lines.append(line)
    if name is not None:
        out[name] = "\n".join(lines)
    return out


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    temp = Path(argv[1]) / "Testing" / "Temporary"
    try:
        failed = [l.split(":", 1)[1] for l in (temp / "LastTestsFailed.log").read_text().split("\n") if ":" in l]
        parts = blocks((temp / "LastTest.log").read_text(errors="replace"))
    except OSError as e:
        print(f"lsan_tracer_crashes: cannot read the ctest logs under {temp}: {e}", file=sys.stderr)
        return 1
    if not failed:
        print("lsan_tracer_crashes: no failed test is listed", file=sys.stderr)
        return 1
    others = [t for t in failed if not all(s in parts.get(t, "") for s in TRACER)]
    if others:
        print("lsan_tracer_crashes: failures other than LeakSanitizer's tracer crash: " + ", ".join(others),
              file=sys.stderr)
        return 1
    print("^(" + "|".join(re.escape(t) for t in failed) + ")$")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
