#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generates drvshim-trace's view of the driver ABI from the CUDA toolkit.

Run by CMake at build time (never by hand; nothing generated is checked in):

    gen_driver_api.py --cc CC --include DIR --stub libcuda.so --nm NM --out DIR

Inputs:
  * cuda.h and cudaProfiler.h, preprocessed twice by the C compiler: as an
    application sees them (the current ABI names, cuMemAlloc -> cuMemAlloc_v2)
    and with __CUDA_API_VERSION_INTERNAL (the per-thread-stream _ptds/_ptsz
    variants and the legacy ABIs such as cuMemAlloc(unsigned int)). Together
    they give the prototype of every versioned entry point.
  * cudaTypedefs.h: one PFN typedef per ABI (PFN_<base>_v<version>[_ptds|_ptsz]),
    which says the (base name, version, flags) under which cuGetProcAddress
    hands out each variant.
  * the toolkit's stub libcuda.so: the names the driver exports. Every one of
    them is wrapped; a name without a prototype fails the build.

Outputs (in --out):
  driver_api_table.inc     DRVSHIM_TRACE_FN(id, symbol, base, version, flags, interesting, nparams, "names", "hex")
  driver_api_wrappers.inc  one exported wrapper per symbol (compiled into the interposer)
  driver_api_report.txt    counts, and the declared names the stub does not export

With --fake-exports FILE it writes instead the fake driver's exported entry
points (tools/fakecuda): one function per exported name an application sees
in cuda.h (default stream), DRVSHIM_FAKE_EXPORT(id, symbol, base, version,
(parameters), (arguments)), which the fake forwards to its own implementation
of exactly that (base, version).
"""
import argparse
import os
import re
import subprocess
import sys

HOOKED = {"cuGetProcAddress", "cuGetProcAddress_v2"}

# Calls the summary mode records one by one (everything else is folded into
# per-thread counts): what changes context, module, memory or object state,
# and the lookups that hand out entry points. cuDevicePrimaryCtxGetState only
# reads: PyTorch asks it before every kernel launch, so it is counted.
INTERESTING = re.compile(
    r"^cu(Init|DriverGetVersion|DevicePrimaryCtx(Retain|Release|Reset|SetFlags)\w*|"
    r"Ctx(Create|Destroy|PushCurrent|PopCurrent|SetCurrent|SetFlags|Attach|Detach|FromGreenCtx)|"
    r"GreenCtx(Create|Destroy)|Module(Load\w*|Unload)|Library(Load\w*|Unload)|"
    r"Mem(Alloc|AllocPitch|AllocHost|AllocManaged|AllocAsync|AllocFromPoolAsync|Free|FreeHost|FreeAsync|"
    r"HostAlloc|HostRegister|HostUnregister|Create|Release|PoolCreate|PoolDestroy)|"
    r"Stream(Create|CreateWithPriority|Destroy)|Event(Create|Destroy)|"
    r"Graph(Create|Destroy|ExecDestroy|Instantiate\w*)|GetProcAddress|GetExportTable|Profiler(Start|Stop)|"
    r"IpcOpenMemHandle|IpcCloseMemHandle)$")

SUFFIX = re.compile(r"_(ptds|ptsz)$")
VERSIONED = re.compile(r"_v(\d+)$")


def preprocess(cc, include, defines):
    src = "#include <cuda.h>\n#include <cudaProfiler.h>\n"
    cmd = [cc, "-E", "-P", "-x", "c", "-I", include] + defines + ["-"]
    return subprocess.run(cmd, input=src, capture_output=True, text=True, check=True).stdout


def split_top(text, sep=","):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts]


DECL = re.compile(r"\bCUresult\s+(cu\w+)\s*\(((?:[^()]|\([^()]*\))*)\)\s*;")


def declarations(text):
    text = re.sub(r"\s+", " ", text)
    out = {}
    for name, params in DECL.findall(text):
        out.setdefault(name, params.strip())
    return out


ALIAS = re.compile(r"typedef ([^;{}()]+?)\s*\b(\w+)\s*;")


def aliases(text):
    table = {}
    for m in ALIAS.finditer(re.sub(r"\s+", " ", text)):
        target, name = m.group(1).strip(), m.group(2)
        # "typedef struct CUctx_st *CUcontext;" puts the star on the name side.
        if target.endswith("*"):
            pass
        table.setdefault(name, target)
    return table


TOKEN = re.compile(r"\w+|\*|\[|\]")


def param_parts(param):
    """(type text, name) of one declared parameter; arrays become pointers."""
    param = param.strip()
    m = re.match(r"^(.*?)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)$", param)
    if m:  # a function-pointer parameter written out in place
        return f"{m.group(1).strip()} (*)({m.group(3)})", m.group(2)
    m = re.match(r"^(.*?)(\w+)\s*(\[[^\]]*\])?$", param)
    if not m or not m.group(1).strip():
        return param, ""
    ty = m.group(1).strip()
    if m.group(3):
        ty += " *"
    return ty, m.group(2)


def normalize(ty, table, depth=0):
    toks = []
    for t in TOKEN.findall(ty):
        if t in ("struct", "enum", "union"):
            continue
        if t in table and depth < 12:
            toks.extend(normalize(table[t], table, depth + 1))
        else:
            toks.append(t)
    return toks


# Parameters declared as non-const pointers that are arrays the caller fills in (inputs):
# rendered as the address passed, never as a value the driver wrote.
INPUT_ARRAYS = {"options", "optionValues", "kernelParams", "extra", "jitOptions", "jitOptionsValues",
                "libraryOptions", "libraryOptionValues"}


def hex_hint(ty, name, table):
    toks = normalize(ty, table)
    if "*" in toks:
        return True
    if "CUdeviceptr" in ty or "CUdeviceptr_v" in ty:
        return True
    return name.lower().endswith("flags")


PFN = re.compile(r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(\w+?)_v(\d+)(_ptds|_ptsz)?\s*\)\s*\((.*?)\)\s*;")


def pfns(path):
    text = open(path, encoding="utf-8").read()
    out = []
    for base, ver, suffix, params in PFN.findall(re.sub(r"\s+", " ", text)):
        out.append((base, int(ver), suffix.lstrip("_"), params))
    return out


def types_of(params, table):
    if params.strip() in ("", "void"):
        return []
    return [tuple(normalize(param_parts(p)[0], table)) for p in split_top(params)]


def exported_names(nm, stub):
    out = subprocess.run([nm, "-D", "--defined-only", stub], capture_output=True, text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TtWi" and parts[2].startswith("cu"):
            names.add(parts[2].split("@")[0])
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", required=True)
    ap.add_argument("--include", required=True)
    ap.add_argument("--stub", required=True)
    ap.add_argument("--nm", required=True)
    ap.add_argument("--out")
    ap.add_argument("--fake-exports")
    args = ap.parse_args()
    if (args.out is None) == (args.fake_exports is None):
        sys.exit("gen_driver_api.py: give one of --out DIR and --fake-exports FILE")

    app = preprocess(args.cc, args.include, [])
    internal = preprocess(args.cc, args.include, ["-D__CUDA_API_VERSION_INTERNAL"])
    decls = declarations(internal)
    decls.update(declarations(app))  # the application's view wins where both declare a name
    table = aliases(internal)
    table.update(aliases(app))
    typedefs = pfns(os.path.join(args.include, "cudaTypedefs.h")) + pfns(
        os.path.join(args.include, "cudaProfilerTypedefs.h"))
    exports = exported_names(args.nm, args.stub)

    missing = sorted(n for n in exports if n not in decls)
    if missing:
        sys.exit("gen_driver_api.py: the stub exports names without a prototype in cuda.h: " + ", ".join(missing))

    by_base = {}
    for base, ver, suffix, params in typedefs:
        by_base.setdefault(base, []).append((ver, suffix, types_of(params, table)))

    entries = []
    unmatched = []
    ambiguous = []
    groups = {}
    for sym in sorted(exports):
        params = decls[sym]
        suffix_m = SUFFIX.search(sym)
        suffix = suffix_m.group(1) if suffix_m else ""
        stem = sym[: suffix_m.start()] if suffix_m else sym
        vm = VERSIONED.search(stem)
        base = stem[: vm.start()] if vm else stem
        variant = int(vm.group(1)) if vm else 1
        mytypes = types_of(params, table)
        candidates = [v for (v, s, t) in by_base.get(base, []) if s == suffix and t == mytypes]
        if not candidates and vm:  # a base name that itself ends in _vN (cuStreamGetCtx_v2)
            alt = [v for (v, s, t) in by_base.get(stem, []) if s == suffix and t == mytypes]
            if alt:
                base, variant, candidates = stem, 1, alt
        flags = 2 if suffix else 1  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM / LEGACY_STREAM
        plist = [] if params in ("", "void") else split_top(params)
        parts = [param_parts(p) for p in plist]
        names = [n or f"arg{i}" for i, (_, n) in enumerate(parts)]
        hexes = ["a" if n in INPUT_ARRAYS else ("1" if hex_hint(t, n, table) else "0") for (t, n) in parts]
        e = dict(sym=sym, base=base, version=0, flags=flags, variant=variant, candidates=sorted(candidates),
                 interesting=bool(INTERESTING.match(base)), parts=parts, names=names, hexes=hexes)
        entries.append(e)
        groups.setdefault((base, suffix), []).append(e)
    # Variants of one base sharing a signature (cuCtxDestroy and cuCtxDestroy_v2) are told
    # apart by order: the k-th variant name is the k-th ABI version, oldest first.
    for group in groups.values():
        prev = -1
        for e in sorted(group, key=lambda x: x["variant"]):
            c = e["candidates"]
            if not c:
                unmatched.append(e["sym"])
                continue
            later = [v for v in c if v > prev]
            e["version"] = later[0] if later else c[-1]
            prev = e["version"]
            if len(c) > 1:
                ambiguous.append(f'{e["sym"]}: {e["base"]} at {c} -> {e["version"]}')

    if args.fake_exports:
        write_fake_exports(args.fake_exports, entries, set(declarations(app)))
        return
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "driver_api_table.inc.tmp"), "w") as f:
        f.write("// Generated by tools/trace/gen/gen_driver_api.py from the CUDA toolkit; do not edit.\n")
        f.write("// DRVSHIM_TRACE_FN(id, symbol, base, cuGetProcAddress version, flags, interesting, nparams, param names,\n")
        f.write("//                 per parameter 1 when its value reads best in hex, a for an input array passed as a non-const pointer)\n")
        for i, e in enumerate(entries):
            f.write(f'DRVSHIM_TRACE_FN({i}, {e["sym"]}, {e["base"]}, {e["version"]}, {e["flags"]}, '
                    f'{1 if e["interesting"] else 0}, {len(e["names"])}, "{",".join(e["names"])}", '
                    f'"{"".join(e["hexes"])}")\n')
    with open(os.path.join(args.out, "driver_api_wrappers.inc.tmp"), "w") as f:
        f.write("// Generated by tools/trace/gen/gen_driver_api.py from the CUDA toolkit; do not edit.\n")
        f.write("// Each wrapper is exported under the driver's own name (asm label) and forwards to\n")
        f.write("// traced<id>() (or a hook for cuGetProcAddress), which records the call.\n")
        for i, e in enumerate(entries):
            decl_params = ", ".join(
                (re.sub(r"\(\s*\*\s*\)", f"(*a{k})", t) if "(*)" in t else f"{t} a{k}")
                for k, (t, _) in enumerate(e["parts"])) or "void"
            call_args = "".join(f", a{k}" for k in range(len(e["parts"])))
            fn = "hooked" if e["sym"] in HOOKED else "traced"
            f.write(f'extern "C" DRVSHIM_TRACE_EXPORT CUresult drvshim_trace_w{i}({decl_params}) __asm__("{e["sym"]}");\n')
            f.write(f'CUresult drvshim_trace_w{i}({decl_params}) {{\n'
                    f'  return {fn}<{i}>(__builtin_return_address(0){call_args});\n}}\n')
        f.write("// The wrappers by id: what a cuGetProcAddress lookup hands out.\n")
        f.write("void* const drvshim_trace_wrapper_table[] = {\n")
        for i in range(len(entries)):
            f.write(f"    reinterpret_cast<void*>(&drvshim_trace_w{i}),\n")
        f.write("};\n")
    with open(os.path.join(args.out, "driver_api_report.txt.tmp"), "w") as f:
        declared_only = sorted(n for n in decls if n not in exports)
        f.write(f"wrapped (exported by the stub): {len(entries)}\n")
        f.write(f"interesting (recorded in summary mode): {sum(e['interesting'] for e in entries)}\n")
        f.write(f"without a cuGetProcAddress key (forwarded by dlsym only): {len(unmatched)}\n")
        for n in unmatched:
            f.write(f"  {n}\n")
        f.write(f"same signature under several versions (the k-th variant name is the k-th version): {len(ambiguous)}\n")
        for n in ambiguous:
            f.write(f"  {n}\n")
        f.write(f"declared but not exported (not wrapped): {len(declared_only)}\n")
        for n in declared_only:
            f.write(f"  {n}\n")
    for name in ("driver_api_table.inc", "driver_api_wrappers.inc", "driver_api_report.txt"):
        replace_if_changed(os.path.join(args.out, name))


def replace_if_changed(dst):
    # Rewrite only on change, so an unchanged toolkit rebuilds nothing.
    tmp = dst + ".tmp"
    if os.path.exists(dst) and open(dst).read() == open(tmp).read():
        os.remove(tmp)
    else:
        os.replace(tmp, dst)


# The fake defines these itself: its lookup is what every other entry point resolves through.
FAKE_OWN = {"cuDriverGetVersion", "cuGetProcAddress", "cuGetProcAddress_v2"}


def write_fake_exports(path, entries, app_names):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write("// Generated by tools/trace/gen/gen_driver_api.py --fake-exports from the CUDA toolkit; do not edit.\n")
        f.write("// The fake driver's exported entry points: every name the driver exports for the\n")
        f.write("// default-stream ABI, each forwarding to the fake's implementation of its (base, version).\n")
        # The names an application compiled against cuda.h calls (its own view of the header):
        # legacy ABIs such as cuMemAlloc(unsigned int) need types cuda.h declares only internally.
        # Per-thread-stream variants (_ptds/_ptsz) and names with no cuGetProcAddress key are left out.
        count = 0
        for e in entries:
            if e["sym"] in FAKE_OWN or e["flags"] != 1 or not e["candidates"] or e["sym"] not in app_names:
                continue
            decl_params = ", ".join(
                (re.sub(r"\(\s*\*\s*\)", f"(*a{k})", t) if "(*)" in t else f"{t} a{k}")
                for k, (t, _) in enumerate(e["parts"])) or "void"
            call_args = ", ".join(f"a{k}" for k in range(len(e["parts"])))
            f.write(f'DRVSHIM_FAKE_EXPORT({count}, {e["sym"]}, "{e["base"]}", {e["version"]}, ({decl_params}), '
                    f'({call_args}))\n')
            count += 1
    replace_if_changed(path)


if __name__ == "__main__":
    main()
