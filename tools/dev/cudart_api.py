# SPDX-License-Identifier: Apache-2.0
"""The CUDA Runtime API as the toolkit's cuda_runtime_api.h declares it, and
what runtime_compat defines of it. Shared by gen_cudart_stubs.py and
gen_runtime_coverage.py."""
import os
import re


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_functions(include_dir):
    """{name: (return type, parameter text)} of every function
    cuda_runtime_api.h declares, including the _ptsz/_ptds forms it maps
    calls to under --default-stream per-thread."""
    text = open(os.path.join(include_dir, "cuda_runtime_api.h"), encoding="utf-8").read()
    # The per-thread forms: `#define cudaX __CUDART_API_PTSZ(cudaX)`.
    variants = {}
    for name, kind in re.findall(r"#define\s+(\w+)\s+__CUDART_API_(PTSZ|PTDS)\(\1\)", text):
        variants[name] = name + ("_ptsz" if kind == "PTSZ" else "_ptds")
    body = _strip_comments(text)
    functions = {}
    pattern = re.compile(
        r"extern\s+(?:__host__\s+|__device__\s+|__cudart_builtin__\s+|__CUDA_DEPRECATED\s+|"
        r"CUDART_DEPRECATED\s+)*(?P<ret>[\w\s\*]+?)\s*CUDARTAPI\s+(?P<name>\w+)\s*\((?P<params>[^;{]*?)\)\s*;",
        re.S)
    for m in pattern.finditer(body):
        name = m.group("name")
        ret = " ".join(m.group("ret").split())
        params = " ".join(m.group("params").split())
        params = re.sub(r"\s*__dv\([^)]*\)", "", params)
        params = re.sub(r"\s*=\s*[^,]+", "", params)  # plain default arguments
        functions.setdefault(name, (ret, params))
    for name, variant in variants.items():
        if name in functions:
            functions.setdefault(variant, functions[name])
    return functions


def defined_functions(source_dir):
    """Names runtime_compat defines with DRVSHIM_CUDART in its sources (generated/, the stubs, is not read)."""
    names = set()
    for file in sorted(os.listdir(source_dir)):
        if not file.endswith(".cpp"):
            continue
        text = open(os.path.join(source_dir, file), encoding="utf-8").read()
        names.update(re.findall(r"DRVSHIM_CUDART\s+[\w\s\*]+?\b(\w+)\s*\(", text))
    return names


def header_groups(include_dir):
    """[(group title, [function names in declaration order])] following the
    header's documentation groups (Device Management, Stream Management, ...;
    a group may be continued later with \\addtogroup)."""
    text = open(os.path.join(include_dir, "cuda_runtime_api.h"), encoding="utf-8").read()
    marks = [(m.start(), m.group(2), (m.group(3) or "").strip())
             for m in re.finditer(r"\\(defgroup|addtogroup)\s+(CUDART_\w+)([^\n]*)", text)]
    titles = {gid: title for _, gid, title in marks if title}
    # The internal section at the end re-declares functions: only the first declaration counts.
    cut = text.find("#if defined(__CUDA_API_VERSION_INTERNAL)")
    order = []
    names = {}
    seen = set()
    for i, (start, gid, _) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else (cut if cut > 0 else len(text))
        for m in re.finditer(r"CUDARTAPI\s+(\w+)\s*\(", text[start:end]):
            if m.group(1) in seen:
                continue
            seen.add(m.group(1))
            if gid not in names:
                order.append(gid)
                names[gid] = []
            names[gid].append(m.group(1))
    return [(titles.get(gid, gid), names[gid]) for gid in order]
