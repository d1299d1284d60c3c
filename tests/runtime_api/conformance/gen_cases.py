#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generates the differential conformance cases of the Runtime API from the
toolkit's headers.

For every function of cuda_runtime_api.h that runtime_compat implements (the
library's own definitions, read from runtime_compat/src), one valid call and
then, one argument at a time, every value that argument's type can take here:
each pointer argument null; memory arguments pointing at each kind of memory
(runtime-made, driver-made, pageable, freed, an interior address); streams
(0, cudaStreamLegacy, cudaStreamPerThread, blocking, non-blocking, made with
cuStreamCreate); events (null, recorded, without timing, never recorded, made
with cuEventCreate); every value of an enum argument as driver_types.h lists
it, and two that are none; every flag the function's documentation names,
and an undocumented bit; device ordinals in and out of range; sizes 0, 1 and
huge. Launch configurations get one case per launch attribute id. The harness
(harness.cuh) runs each case in each scenario.

Only the valid call is written by hand (VALID below: which fixture object or
value makes the call legal); the variants come from the types.

  gen_cases.py INCLUDE_DIR RUNTIME_SRC OUTPUT.cu    write the cases
  gen_cases.py INCLUDE_DIR RUNTIME_SRC --count      print how many
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tools", "dev"))
import cudart_api  # noqa: E402

# Functions the harness itself relies on between cases or that are not calls
# a program makes with arguments (the hidden registration entry points).
SKIP = {"cudaProfilerStart", "cudaProfilerStop"}

MEMORY = [("null", "nullptr"), ("dev", "f.dev"), ("interior", "static_cast<char*>(f.dev) + 256"),
          ("dev_async", "f.dev_async"), ("managed", "f.managed"), ("pinned", "f.pinned"), ("mapped", "f.mapped"),
          ("registered", "f.registered"), ("pageable", "f.pageable"), ("freed", "f.freed"),
          ("drv_dev", "reinterpret_cast<void*>(f.drv_dev)"), ("drv_host", "f.drv_host")]
STREAMS = [("0", "static_cast<cudaStream_t>(nullptr)"), ("legacy", "cudaStreamLegacy"),
           ("per_thread", "cudaStreamPerThread"), ("stream", "f.stream"), ("nonblocking", "f.stream_nb"),
           ("drv_stream", "f.drv_stream"), ("capturing", "f.capturing()"),
           ("blocking_capturing", "f.capturing_blocking()")]
EVENTS = [("null", "static_cast<cudaEvent_t>(nullptr)"), ("event", "f.event"), ("notiming", "f.event_notiming"),
          ("unrecorded", "f.event_unrecorded"), ("drv_event", "f.drv_event")]
FUNCS = [("null", "nullptr"), ("kernel", "reinterpret_cast<const void*>(&conf::conf_noop)"),
         ("host_function", "reinterpret_cast<const void*>(&conf::host_function)"),
         ("device_memory", "f.dev")]
SYMBOLS = [("null", "nullptr"), ("symbol", "reinterpret_cast<const void*>(&conf::g_symbol)"),
           ("host_variable", "reinterpret_cast<const void*>(&conf::g_host_variable)")]
DEVICES = [("0", "0"), ("1", "1"), ("minus1", "-1"), ("64", "64")]
SIZES = [("0", "0"), ("1", "1"), ("huge", "(size_t{1} << 60)")]
INVALID_FLAG = ("bit30", "(1u << 30)")

# The valid call of each function: argument name -> C++ expression (f is the
# fixture). Arguments not named here take their type's default.
VALID = {
    "cudaFree": {"devPtr": "f.dev"},
    "cudaFreeAsync": {"devPtr": "f.dev_async"},
    "cudaFreeHost": {"ptr": "f.pinned"},
    "cudaHostUnregister": {"ptr": "f.registered"},
    "cudaHostRegister": {"ptr": "f.pageable", "size": "conf::kBytes", "flags": "cudaHostRegisterDefault"},
    "cudaHostGetDevicePointer": {"pHost": "f.mapped", "flags": "0"},
    "cudaHostGetFlags": {"pHost": "f.mapped"},
    "cudaHostAlloc": {"flags": "cudaHostAllocDefault"},
    "cudaMallocManaged": {"flags": "cudaMemAttachGlobal"},
    "cudaMallocPitch": {"width": "256", "height": "4"},
    "cudaMemset": {"devPtr": "f.dev"},
    "cudaMemsetAsync": {"devPtr": "f.dev"},
    "cudaMemset2D": {"devPtr": "f.dev", "pitch": "512", "width": "256", "height": "4"},
    "cudaMemset2DAsync": {"devPtr": "f.dev", "pitch": "512", "width": "256", "height": "4"},
    "cudaMemcpy": {"dst": "f.dev", "src": "f.pageable", "kind": "cudaMemcpyHostToDevice"},
    "cudaMemcpyAsync": {"dst": "f.dev", "src": "f.pinned", "kind": "cudaMemcpyHostToDevice"},
    "cudaMemcpy2D": {"dst": "f.dev", "dpitch": "512", "src": "f.pageable", "spitch": "512", "width": "256",
                     "height": "4", "kind": "cudaMemcpyHostToDevice"},
    "cudaMemcpy2DAsync": {"dst": "f.dev", "dpitch": "512", "src": "f.pinned", "spitch": "512", "width": "256",
                          "height": "4", "kind": "cudaMemcpyHostToDevice"},
    "cudaMemcpyPeer": {"dst": "f.dev", "src": "f.dev_async", "dstDevice": "0", "srcDevice": "0"},
    "cudaMemcpyPeerAsync": {"dst": "f.dev", "src": "f.dev_async", "dstDevice": "0", "srcDevice": "0"},
    "cudaMemcpyToSymbol": {"src": "f.pageable", "count": "64", "offset": "0", "kind": "cudaMemcpyHostToDevice"},
    "cudaMemcpyToSymbolAsync": {"src": "f.pinned", "count": "64", "offset": "0", "kind": "cudaMemcpyHostToDevice"},
    "cudaMemcpyFromSymbol": {"dst": "f.pageable", "count": "64", "offset": "0", "kind": "cudaMemcpyDeviceToHost"},
    "cudaMemcpyFromSymbolAsync": {"dst": "f.pinned", "count": "64", "offset": "0", "kind": "cudaMemcpyDeviceToHost"},
    "cudaMemAdvise": {"devPtr": "f.managed", "count": "4096", "advice": "cudaMemAdviseSetReadMostly"},
    "cudaMemPrefetchAsync": {"devPtr": "f.managed", "count": "4096", "flags": "0"},
    "cudaStreamAttachMemAsync": {"devPtr": "f.managed", "length": "0", "flags": "cudaMemAttachSingle"},
    "cudaPointerGetAttributes": {"ptr": "f.dev"},
    "cudaStreamGetAttribute": {"attr": "cudaLaunchAttributePriority"},
    "cudaStreamSetAttribute": {"attr": "cudaLaunchAttributePriority"},
    "cudaDeviceSetLimit": {"limit": "cudaLimitStackSize", "value": "2048"},
    "cudaDeviceGetLimit": {"limit": "cudaLimitStackSize"},
    "cudaDeviceGetAttribute": {"attr": "cudaDevAttrMultiProcessorCount"},
    "cudaDeviceGetP2PAttribute": {"attr": "cudaDevP2PAttrAccessSupported", "dstDevice": "0"},
    "cudaDeviceCanAccessPeer": {"peerDevice": "0"},
    "cudaDeviceEnablePeerAccess": {"peerDevice": "1", "flags": "0"},
    "cudaDeviceDisablePeerAccess": {"peerDevice": "1"},
    "cudaFuncSetAttribute": {"attr": "cudaFuncAttributeMaxDynamicSharedMemorySize", "value": "0"},
    "cudaFuncGetParamInfo": {"paramIndex": "0"},
    "cudaOccupancyAvailableDynamicSMemPerBlock": {"numBlocks": "1", "blockSize": "128"},
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor": {"blockSize": "128", "dynamicSMemSize": "0"},
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags": {"blockSize": "128", "dynamicSMemSize": "0",
                                                               "flags": "cudaOccupancyDefault"},
    "cudaEventElapsedTime": {"start": "f.event", "end": "f.event_end"},
    "cudaEventCreateWithFlags": {"flags": "cudaEventDefault"},
    "cudaEventRecordWithFlags": {"flags": "cudaEventRecordDefault"},
    "cudaStreamWaitEvent": {"flags": "cudaEventWaitDefault"},
    "cudaStreamCreateWithFlags": {"flags": "cudaStreamDefault"},
    "cudaStreamCreateWithPriority": {"flags": "cudaStreamDefault", "priority": "0"},
    "cudaStreamAddCallback": {"flags": "0"},
    "cudaSetDeviceFlags": {"flags": "cudaDeviceScheduleAuto"},
    "cudaInitDevice": {"deviceFlags": "0", "flags": "0"},
    "cudaDeviceSetCacheConfig": {"cacheConfig": "cudaFuncCachePreferNone"},
    "cudaFuncSetCacheConfig": {"cacheConfig": "cudaFuncCachePreferNone"},
    "cudaDeviceSetSharedMemConfig": {"config": "cudaSharedMemBankSizeDefault"},
    "cudaFuncSetSharedMemConfig": {"config": "cudaSharedMemBankSizeDefault"},
    "cudaGetErrorName": {"error": "cudaSuccess"},
    "cudaGetErrorString": {"error": "cudaSuccess"},
    "cudaCreateChannelDesc": {"x": "32", "y": "0", "z": "0", "w": "0", "f": "cudaChannelFormatKindFloat"},
    "cudaDeviceGetPCIBusId": {"len": "64"},
    "cudaDeviceGetByPCIBusId": {"pciBusId": "f.busid"},
    "cudaStreamBeginCapture": {"stream": "f.capture_stream"},
    "cudaStreamEndCapture": {"stream": "f.capturing()"},
    "cudaStreamIsCapturing": {"stream": "f.capturing()"},
    "cudaStreamGetCaptureInfo": {"stream": "f.capturing()"},
    "cudaGraphGetNodes": {"nodes": "f.node_array()", "numNodes": "f.node_capacity(4)"},
    "cudaGraphLaunch": {"stream": "f.stream"},
    "cudaGetDriverEntryPoint": {"symbol": '"cuMemAlloc"'},
    "cudaGetDriverEntryPointByVersion": {"symbol": '"cuMemAlloc"', "cudaVersion": "12000"},
    "cudaOccupancyMaxActiveClusters": {"launchConfig": "f.cluster_config(2)"},
    "cudaGraphUpload": {"stream": "f.stream"},
}

# Cases beyond one argument at a time: (function, name, setup, {argument: expression}).
EXTRA = [
    # The legacy stream while a blocking stream captures: its work would depend on the capture.
    ("cudaStreamIsCapturing", "legacy_while_blocking_captures", "f.capturing_blocking();",
     {"stream": "cudaStreamLegacy"}),
    ("cudaStreamGetCaptureInfo", "legacy_while_blocking_captures", "f.capturing_blocking();",
     {"stream": "cudaStreamLegacy"}),
    ("cudaStreamEndCapture", "invalidated", "f.capturing(); cudaMalloc(&f.spare, 256);", {"stream": "f.capture_stream"}),
    ("cudaStreamEndCapture", "other_thread", "f.capturing_on_other_thread();", {"stream": "f.capture_stream"}),
    ("cudaStreamBeginCapture", "twice", "f.capturing();", {"stream": "f.capture_stream"}),
    ("cudaGraphGetNodes", "capacity0", "", {"numNodes": "f.node_capacity(0)"}),
    ("cudaGraphLaunch", "capturing_stream", "f.capturing();", {"stream": "f.capture_stream"}),
    # A name the driver does not know, and versions around the driver's.
    ("cudaGetDriverEntryPoint", "unknown_symbol", "", {"symbol": '"cuNoSuchFunction"'}),
    ("cudaGetDriverEntryPointByVersion", "unknown_symbol", "", {"symbol": '"cuNoSuchFunction"'}),
    ("cudaGetDriverEntryPointByVersion", "version_too_old", "", {"symbol": '"cuMemAllocAsync"', "cudaVersion": "11000"}),
    ("cudaGetDriverEntryPointByVersion", "version_above_driver", "", {"cudaVersion": "99000"}),
    ("cudaGetDriverEntryPointByVersion", "version_0", "", {"cudaVersion": "0"}),
    ("cudaGetDriverEntryPointByVersion", "ptsz_symbol", "", {"symbol": '"cuMemcpyAsync"', "flags": "2"}),
    # Cluster sizes: none, portable, above the portable size, with a cooperative launch.
    ("cudaOccupancyMaxActiveClusters", "no_cluster", "", {"launchConfig": "f.cluster_config(0)"}),
    ("cudaOccupancyMaxActiveClusters", "cluster8", "", {"launchConfig": "f.cluster_config(8)"}),
    ("cudaOccupancyMaxActiveClusters", "cluster16", "", {"launchConfig": "f.cluster_config(16)"}),
    ("cudaOccupancyMaxActiveClusters", "cluster3", "", {"launchConfig": "f.cluster_config(3)"}),
]

# Arguments a successful call releases: the fixture forgets them so that it
# does not release them a second time.
CONSUMES = {"cudaFree": "devPtr", "cudaFreeAsync": "devPtr", "cudaFreeHost": "ptr", "cudaHostUnregister": "ptr",
            "cudaStreamDestroy": "stream", "cudaEventDestroy": "event", "cudaGraphDestroy": "graph",
            "cudaGraphExecDestroy": "graphExec"}

# Output arguments that a successful call hands to the program to release.
RELEASES = {("cudaStreamEndCapture", "pGraph"): "f.keep_graph(o_pGraph);",
            ("cudaGraphInstantiate", "pGraphExec"): "f.keep_exec(o_pGraphExec);",
            ("cudaGraphInstantiateWithFlags", "pGraphExec"): "f.keep_exec(o_pGraphExec);"}

# Output arguments whose values differ between runs of the same program.
VARYING = {("cudaMemGetInfo", "free"), ("cudaEventElapsedTime", "ms"), ("cudaStreamGetCaptureInfo", "id_out"),
           ("cudaStreamGetId", "streamId")}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def parse_enums(include_dir):
    """{enum name: [(member, value)]} from driver_types.h."""
    text = strip_comments(open(os.path.join(include_dir, "driver_types.h"), encoding="utf-8").read())
    enums = {}
    for m in re.finditer(r"enum\s+(?:__device_builtin__\s+)?(\w+)\s*\{(.*?)\}", text, re.S):
        members, value = [], -1
        for item in m.group(2).split(","):
            item = item.strip()
            if not item:
                continue
            name, _, expr = item.partition("=")
            name = name.strip()
            if expr.strip():
                try:
                    value = int(eval(expr.strip().rstrip("uUlL"), {}, {}))  # noqa: S307 (header constants)
                except Exception:  # noqa: BLE001 (a value made of other names: use the member)
                    value = None
            else:
                value = value + 1 if value is not None else None
            members.append((name, value))
        enums[m.group(1)] = members
    return enums


def parse_flags(include_dir):
    text = open(os.path.join(include_dir, "driver_types.h"), encoding="utf-8").read()
    return {m.group(1) for m in re.finditer(r"#define\s+(cuda\w+)\s+(0x[0-9a-fA-F]+|\d+)\b", text)}


def doc_comments(include_dir):
    """{function: its documentation comment} from cuda_runtime_api.h."""
    text = open(os.path.join(include_dir, "cuda_runtime_api.h"), encoding="utf-8").read()
    docs = {}
    for m in re.finditer(r"/\*\*(.*?)\*/\s*extern[^;]*?CUDARTAPI\s+(\w+)\s*\(", text, re.S):
        docs.setdefault(m.group(2), m.group(1))
    return docs


def split_params(params):
    if params.strip() in ("", "void"):
        return []
    out = []
    for p in params.split(","):
        p = " ".join(p.split())
        m = re.match(r"(.*?)(\w+)$", p)
        ptype = m.group(1).replace(" *", "*").replace("* ", "*").strip()
        ptype = re.sub(r"\s*\*", "*", ptype)
        out.append((ptype, m.group(2)))
    return out


class Param:
    def __init__(self, valid, variants, out=None):
        self.valid = valid
        self.variants = variants  # [(label, expr)]
        self.out = out  # (declaration type, printer) for output arguments


def enum_variants(enums, ename, limit=None):
    members = enums.get(ename, [])
    seen, out = set(), []
    for name, value in members:
        if value in seen:
            continue
        seen.add(value)
        out.append((name, name))
    out.append(("minus1", f"static_cast<{ename}>(-1)"))
    out.append(("huge", f"static_cast<{ename}>(0x7fffffff)"))
    return out


def flag_variants(flags, doc):
    named = []
    for name in re.findall(r"::(cuda\w+)", doc or ""):
        if name in flags and name not in named and not name.endswith("Mask"):
            named.append(name)
    out = [(n, n) for n in named]
    out.append(INVALID_FLAG)
    return out


def param_spec(fn, ptype, pname, enums, flags, doc):
    valid = VALID.get(fn, {}).get(pname)
    base = ptype.replace("const ", "").replace("struct ", "").replace("enum ", "").strip()
    base = base.replace("cudaStreamAttrValue", "cudaLaunchAttributeValue")
    mask = (fn, pname) in VARYING
    # Output arguments: a local prefilled with the sentinel, or null.
    out_printers = {"int*": "out_value", "unsigned int*": "out_value", "size_t*": "out_value",
                    "float*": "out_value", "cudaStream_t*": "out_set", "cudaEvent_t*": "out_set",
                    "cudaKernel_t*": "out_set", "cudaDeviceProp*": "out_props", "unsigned long long*": "out_value",
                    "cudaGraph_t*": "out_set", "cudaGraphExec_t*": "out_set",
                    "cudaFuncAttributes*": "out_func_attrs", "cudaPointerAttributes*": "out_pointer_attrs",
                    "char**": "out_string"}
    is_const = ptype.startswith("const ")
    if fn == "cudaThreadExchangeStreamCaptureMode":
        # In and out: the mode to set, then the one it replaced.
        return Param("f.mode_in(cudaStreamCaptureModeRelaxed)",
                     [("null", "nullptr")] + [(label, f"f.mode_in({e})")
                                              for label, e in enum_variants(enums, "cudaStreamCaptureMode")
                                              if e != "cudaStreamCaptureModeRelaxed"])
    if base == "void**" and pname != "args":
        return Param("&o_" + pname, [("null", "nullptr")], ("void*", "out_set"))
    if base == "char**" and is_const:
        return Param("&o_" + pname, [("null", "nullptr")], ("const char*", "out_string"))
    if base.endswith("*") and base[:-1] in enums and not is_const:
        return Param("&o_" + pname, [("null", "nullptr")], (ptype[:-1].replace("const ", ""), "out_value"))
    if base in ("cudaGraphNode_t**", "cudaGraphEdgeData**") and is_const:
        return Param("&o_" + pname, [("null", "nullptr")], (ptype[:-1], "out_set"))
    if base == "cudaGraphNode_t*" and not is_const:
        return Param(valid, [("null", "nullptr")])
    if base == "size_t*" and valid is not None:  # in and out
        return Param(valid, [("null", "nullptr")])
    if base == "cudaGraph_t":
        return Param(valid or "f.graph", [("null", "static_cast<cudaGraph_t>(nullptr)")])
    if base == "cudaGraphExec_t":
        return Param(valid or "f.graph_exec", [("null", "static_cast<cudaGraphExec_t>(nullptr)")])
    if base == "unsigned long long" and "flags" in pname.lower():
        ename = "cudaGetDriverEntryPointFlags" if fn.startswith("cudaGetDriverEntryPoint") else \
            "cudaGraphInstantiateFlags"
        members = [(n, n) for n, _ in enums.get(ename, []) if n != valid]
        return Param(valid or "0", members + [("bit30", "(1ull << 30)")])
    if base == "cudaLaunchAttributeValue*" and not is_const:
        return Param("&o_" + pname, [("null", "nullptr")], ("cudaLaunchAttributeValue", "out_bytes"))
    if base in out_printers and not is_const:
        printer = "out_set" if mask else out_printers[base]
        return Param("&o_" + pname, [("null", "nullptr")], (ptype[:-1].replace("const ", ""), printer))
    # Inputs.
    if base == "void*" and pname in ("func", "entryFuncAddr"):
        return Param(valid or FUNCS[1][1], [v for v in FUNCS if v[0] != "kernel"])
    if base == "void*" and pname == "symbol":
        return Param(valid or SYMBOLS[1][1], [v for v in SYMBOLS if v[0] != "symbol"])
    if base == "void*" and pname == "userData":
        return Param("nullptr", [])
    if base == "void*":
        v = valid or "f.dev"
        return Param(v, [m for m in MEMORY if m[1] != v])
    if base == "void**" and pname == "args":
        return Param("f.args", [("null", "nullptr")])
    if base == "cudaStream_t":
        v = valid or "f.stream"
        return Param(v, [s for s in STREAMS if s[1] != v])
    if base == "cudaEvent_t":
        v = valid or "f.event"
        return Param(v, [e for e in EVENTS if e[1] != v])
    if base == "cudaLaunchConfig_t*":
        return Param(valid or "&f.cfg", [("null", "nullptr")])
    if base == "cudaLaunchAttributeValue*":
        return Param("&f.attr_value", [("null", "nullptr")])
    if base == "cudaDeviceProp*":
        return Param("&f.prop", [("null", "nullptr")])
    if base == "cudaHostFn_t":
        return Param("&conf::host_function", [("null", "static_cast<cudaHostFn_t>(nullptr)")])
    if base == "cudaStreamCallback_t":
        return Param("&conf::stream_callback", [("null", "static_cast<cudaStreamCallback_t>(nullptr)")])
    if base == "char*" and is_const:  # a PCI bus id
        return Param(valid or "f.busid", [("null", "nullptr"), ("empty", '""'), ("garbage", '"zz:00.0"')])
    if base == "char*":
        return Param("f.buf", [("null", "nullptr")])
    if base == "dim3":
        if pname == "gridDim":
            return Param("dim3(1)", [("0", "dim3(0)"), ("y65536", "dim3(1, 65536)"), ("z65536", "dim3(1, 1, 65536)")])
        return Param("dim3(32)", [("0", "dim3(0)"), ("1025", "dim3(1025)"), ("z65", "dim3(1, 1, 65)")])
    if base == "cudaMemLocation":
        members = enums.get("cudaMemLocationType", [])
        variants = [(n, f"cudaMemLocation{{{n}, 0}}") for n, _ in members if n != "cudaMemLocationTypeDevice"]
        variants.append(("device1", "cudaMemLocation{cudaMemLocationTypeDevice, 1}"))
        return Param("cudaMemLocation{cudaMemLocationTypeDevice, 0}", variants)
    if base == "cudaError_t":
        return Param(valid or "cudaSuccess", enum_variants(enums, "cudaError")[1:])
    if base == "cudaStreamAttrID":
        return Param(valid, [v for v in enum_variants(enums, "cudaLaunchAttributeID") if v[1] != valid])
    if ptype.startswith("enum "):
        ename = base
        v = valid or enums[ename][0][0]
        return Param(v, [e for e in enum_variants(enums, ename) if e[1] != v])
    if base == "unsigned int" and "flags" in pname.lower():
        v = valid or "0"
        return Param(v, [fl for fl in flag_variants(flags, doc) if fl[1] != v] + ([("0", "0")] if v != "0" else []))
    if base == "int" and pname in ("device", "srcDevice", "dstDevice", "peerDevice"):
        v = valid or "0"
        return Param(v, [d for d in DEVICES if d[1] != v])
    if base == "size_t" and pname in ("count", "size", "length", "width", "height", "dynamicSMemSize",
                                      "sharedMem", "value"):
        v = valid or "256"
        return Param(v, [s for s in SIZES if s[1] != v])
    if base == "size_t":
        v = valid or "0"
        return Param(v, [("1", "1"), ("huge", "(size_t{1} << 60)")] if v == "0" else [("0", "0"), ("1", "1")])
    if base == "int" and pname == "priority":
        return Param(valid or "0", [("minus1", "-1"), ("minus100", "-100"), ("100", "100")])
    if base == "int" and pname in ("blockSize", "numBlocks"):
        return Param(valid or "1", [("0", "0"), ("minus1", "-1"), ("4096", "4096")])
    if base == "int" and pname == "len":
        return Param(valid or "64", [("0", "0"), ("5", "5"), ("12", "12"), ("13", "13")])
    if base == "int" and pname == "value":
        return Param(valid or "7", [("minus1", "-1"), ("1048576", "1048576")])
    if base in ("int", "unsigned int"):
        return Param(valid or "0", [])
    raise SystemExit(f"gen_cases.py: no rule for {fn} argument {ptype} {pname}")


def launch_attribute_cases(enums):
    """cudaLaunchKernelExC with each launch attribute id, its value zero and one."""
    cases = []
    for name, _ in enums.get("cudaLaunchAttributeID", []):
        for label, setup in (("zero", "cudaLaunchAttributeValue v{};"),
                             ("one", "cudaLaunchAttributeValue v{}; v.clusterDim.x = 1; v.clusterDim.y = 1; "
                                     "v.clusterDim.z = 1;")):
            cases.append((f"attr={name}:{label}", f"{setup} f.with_attribute({name}, v);"))
    return cases


def generate(include_dir, runtime_src):
    headers = cudart_api.header_functions(include_dir)
    defined = cudart_api.defined_functions(runtime_src)
    enums = parse_enums(include_dir)
    flags = parse_flags(include_dir)
    docs = doc_comments(include_dir)
    functions = sorted(n for n in defined if n in headers and not n.startswith("__") and
                       not n.endswith(("_ptsz", "_ptds")) and n not in SKIP)
    cases = []  # (function, name, body)
    for fn in functions:
        ret, params_text = headers[fn]
        params = [(t, n) for t, n in split_params(params_text)]
        specs = [(t, n, param_spec(fn, t, n, enums, flags, docs.get(fn, ""))) for t, n in params]
        variants = [("valid", None, None, "")]
        for i, (_, n, s) in enumerate(specs):
            for label, expr in s.variants:
                variants.append((f"{n}={label}", i, expr, ""))
        if fn == "cudaLaunchKernelExC":
            variants += [(name, None, None, setup) for name, setup in launch_attribute_cases(enums)]
        names = [n for _, n, _ in specs]
        for efn, ename, esetup, overrides in EXTRA:
            if efn == fn:
                variants.append((ename, {names.index(k): v for k, v in overrides.items()}, None, esetup))
        if fn in ("cudaGetLastError", "cudaPeekAtLastError"):
            # After a failed call, so there is something to return.
            variants.append(("after_failure", None, None, "cudaSetDevice(-1);"))
        for name, index, expr, setup in variants:
            lines = []
            if setup:
                lines.append(setup)
            args = []
            for i, (t, n, s) in enumerate(specs):
                if s.out is not None:
                    lines.append(f"{s.out[0]} o_{n}; conf::prefill(o_{n});")
                if isinstance(index, dict):
                    args.append(index.get(i, s.valid))
                else:
                    args.append(expr if i == index else s.valid)
            call = f"{fn}({', '.join(args)})"
            if ret == "cudaError_t":
                lines.append(f"const cudaError_t r = {call};")
                lines.append('conf::put("ret=" + conf::err(r));')
            elif ret == "const char*":
                lines.append(f'conf::out_text("ret", {call});')
            elif "cudaChannelFormatDesc" in ret:
                lines.append(f'conf::out_channel("ret", {call});')
            else:
                raise SystemExit(f"gen_cases.py: no rule for the result {ret} of {fn}")
            for t, n, s in specs:
                if s.out is not None:
                    if s.out[1] == "out_bytes":
                        lines.append(f'conf::out_bytes("{n}", &o_{n}, sizeof o_{n});')
                    else:
                        lines.append(f'conf::{s.out[1]}("{n}", o_{n});')
            for t, n, s in specs:
                if (fn, n) in RELEASES and ret == "cudaError_t":
                    lines.append(f"if (r == cudaSuccess) {RELEASES[(fn, n)]}")
            if fn == "cudaThreadExchangeStreamCaptureMode":
                lines.append('conf::out_value("mode", f.mode);')
            if fn == "cudaGraphGetNodes":
                lines.append('conf::out_value("numNodes", f.num_nodes);')
                lines.append('for (int i = 0; i < 4; ++i) conf::out_set(("nodes" + std::to_string(i)).c_str(), f.nodes[i]);')
            if fn == "cudaDeviceGetPCIBusId":
                lines.append('f.buf[sizeof f.buf - 1] = 0; conf::out_text("buf", f.buf);')
            consumed = CONSUMES.get(fn)
            if consumed is not None and ret == "cudaError_t":
                used = args[[n for _, n, _ in specs].index(consumed)]
                if used.startswith("f.") and re.fullmatch(r"f\.\w+", used):
                    lines.append(f"if (r == cudaSuccess) {used} = {{}};")
            cases.append((fn, name, lines))
    return cases


def render(cases):
    out = ["// Generated by tests/runtime_api/conformance/gen_cases.py from the toolkit's headers; do not edit.",
           "// SPDX-License-Identifier: Apache-2.0", '#include "harness.cuh"', "",
           "#pragma GCC diagnostic ignored \"-Wdeprecated-declarations\"", "", "namespace {", ""]
    for i, (_, _, lines) in enumerate(cases):
        out.append(f"void case_{i}(conf::Fixture& f) {{")
        out.append("  (void)f;")
        out += ["  " + line for line in lines]
        out.append("}")
    out.append("")
    out.append("const std::vector<conf::Case> kCases = {")
    for i, (fn, name, _) in enumerate(cases):
        out.append(f'    {{"{fn}", "{name}", &case_{i}}},')
    out.append("};")
    out.append("")
    out.append("}  // namespace")
    out.append("")
    out.append("int main(int argc, char** argv) { return conf::main_of(kCases, argc, argv); }")
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    cases = generate(argv[1], argv[2])
    if argv[3] == "--count":
        print(len(cases))
        return 0
    text = render(cases)
    if not os.path.exists(argv[3]) or open(argv[3], encoding="utf-8").read() != text:
        with open(argv[3], "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
