#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Extracts the programs a Markdown page marks for CI.

A marked program is a fenced C++ block whose fence line follows a marker line:

    <!-- snippet: NAME env: VAR=value VAR2=value links: fakecuda -->

(env and links optional, in either order; NAME is letters, digits, _ and -).
Writes OUTDIR/NAME.cpp for each and prints one manifest line per program on
stdout: NAME, the links (fakecuda or empty) and the environment (VAR=value
words separated by spaces), separated by the ASCII unit separator (0x1f), so
that an empty field stays a field for bash's read.

Fails (exit 1, one line per problem) on a malformed marker, a marker whose
next line is not a C++ fence, an unclosed fence, a name used twice, and a C++
block with a main function but no marker (a complete program CI would not run).

Usage: extract_snippets.py DOC OUTDIR
"""
import os
import re
import sys

MARKER = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\S*)")
NAME = re.compile(r"^[A-Za-z0-9_-]+$")
ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
CPP_LANGUAGES = {"cpp", "c++", "cxx", "cc"}
LINKS = {"fakecuda"}
MAIN = re.compile(r"\bint\s+main\s*\(")


def parse_marker(text, where, problems):
    """NAME, links, env of a marker's text; None when malformed."""
    words = text.split()
    if not words or not NAME.match(words[0]):
        problems.append(f"{where}: the marker must start with a snippet name (letters, digits, _ and -)")
        return None
    name, links, env, mode = words[0], [], [], None
    for word in words[1:]:
        if word in ("env:", "links:"):
            mode = word
        elif mode == "env:" and ENV_WORD.match(word):
            env.append(word)
        elif mode == "links:" and word in LINKS:
            links.append(word)
        else:
            problems.append(f"{where}: snippet {name}: cannot read '{word}' "
                            "(expected env: VAR=value ... links: fakecuda)")
            return None
    return name, links, env


def extract(doc):
    """The marked programs [(name, links, env, source)] and the problems found."""
    lines = open(doc, encoding="utf-8").read().split("\n")
    programs, problems, names = [], [], set()
    pending = None  # (name, links, env, where) of the marker on the line before
    i = 0
    while i < len(lines):
        where = f"{doc}:{i + 1}"
        marker = MARKER.match(lines[i])
        if marker:
            parsed = parse_marker(marker.group(1), where, problems)
            if parsed and (i + 1 == len(lines) or not FENCE.match(lines[i + 1])):
                problems.append(f"{where}: snippet {parsed[0]}: the next line is not a code fence")
                parsed = None
            pending = (*parsed, where) if parsed else None
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        ticks, language = fence.group(1), fence.group(2).lower()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(ticks):
            end += 1
        if end == len(lines):
            problems.append(f"{where}: a code fence that is never closed")
            break
        body = "\n".join(lines[i + 1:end]) + "\n"
        if pending is not None:
            name, links, env, marker_where = pending
            if language not in CPP_LANGUAGES:
                problems.append(f"{marker_where}: snippet {name}: marks a '{language}' block, not C++")
            elif name in names:
                problems.append(f"{marker_where}: snippet {name}: the name is used twice")
            else:
                names.add(name)
                programs.append((name, links, env, body))
        elif language in CPP_LANGUAGES and MAIN.search(body):
            problems.append(f"{where}: a C++ program without a snippet marker (CI would not compile or run it)")
        pending = None
        i = end + 1
    return programs, problems


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().split("\n")[-1], file=sys.stderr)
        return 2
    doc, outdir = argv[1], argv[2]
    programs, problems = extract(doc)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    os.makedirs(outdir, exist_ok=True)
    for name, links, env, body in programs:
        with open(os.path.join(outdir, name + ".cpp"), "w", encoding="utf-8") as f:
            f.write(body)
        print(f"{name}\x1f{' '.join(links)}\x1f{' '.join(env)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
