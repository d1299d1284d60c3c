// SPDX-License-Identifier: Apache-2.0
// Stream capture and graphs: beginning, ending and asking about a capture,
// the thread's capture mode, and instantiating, launching, uploading, listing
// and destroying graphs; every call that takes a stream in its legacy and
// per-thread-default-stream (_ptsz) form.
//
// cudaGraph_t is CUgraph and cudaGraphExec_t is CUgraphExec: the program owns
// the handles it gets, and may pass handles made with the driver API or by
// another library. The runtime keeps no record of them; each call borrows the
// handle for its own duration.
#include <algorithm>
#include <cstring>
#include <utility>

#include <drvshim/graph.hpp>

#include "runtime.hpp"

using namespace drvshim;
using namespace drvshim::rt::impl;

namespace {

constexpr DefaultStream kLegacy = DefaultStream::legacy;
constexpr DefaultStream kPerThread = DefaultStream::per_thread;

// An owner of a handle the program keeps: gives it back (undestroyed) when
// the call ends, also when the call throws.
template <class Owner>
class Borrowed {
 public:
  explicit Borrowed(Owner owner) noexcept : owner_(std::move(owner)) {}
  ~Borrowed() { (void)owner_.detach(); }
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  const Owner& operator*() const noexcept { return owner_; }
  const Owner* operator->() const noexcept { return &owner_; }

 private:
  Owner owner_;
};

bool capture_mode_known(cudaStreamCaptureMode mode) noexcept {
  int m = 0;
  static_assert(sizeof mode == sizeof m);
  std::memcpy(&m, &mode, sizeof m);  // a number the enum may not name
  return m >= cudaStreamCaptureModeGlobal && m <= cudaStreamCaptureModeRelaxed;
}

cudaError_t unknown_mode(const char* api, cudaStreamCaptureMode mode) {
  return fail(cudaErrorInvalidValue, fmt::format("{}: capture mode {}: cudaStreamCaptureModeGlobal (0), "
                                                 "cudaStreamCaptureModeThreadLocal (1) or "
                                                 "cudaStreamCaptureModeRelaxed (2)",
                                                 api, static_cast<int>(mode)));
}

// The legacy default stream: 0 in a legacy entry point, or cudaStreamLegacy.
bool legacy_stream(cudaStream_t stream, DefaultStream zero) noexcept {
  const auto h = reinterpret_cast<std::uintptr_t>(stream);
  return (h == 0 && zero == kLegacy) || h == 0x1;
}

cudaError_t begin_capture(const char* api, cudaStream_t stream, cudaStreamCaptureMode mode, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (!capture_mode_known(mode)) return unknown_mode(api, mode);
  if (legacy_stream(stream, zero)) {
    // The driver's answer for the legacy stream, which the driver layer
    // refuses before asking: its work synchronises with every blocking stream.
    return fail(cudaErrorStreamCaptureUnsupported,
                fmt::format("{}: the legacy default stream cannot be captured; capture a stream from "
                            "cudaStreamCreate or cudaStreamPerThread",
                            api));
  }
  return guarded(api, [&] {
    drvshim::begin_capture(stream_of(stream, zero, api), static_cast<CaptureMode>(mode));
    return cudaSuccess;
  });
}

cudaError_t end_capture(const char* api, cudaStream_t stream, cudaGraph_t* graph, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (graph == nullptr) return null_argument(api, "pGraph");
  return guarded(api, [&] {
    try {
      Graph g = drvshim::end_capture(stream_of(stream, zero, api));
      *graph = reinterpret_cast<cudaGraph_t>(g.detach());
    } catch (const drvshim::Error& e) {
      // The driver writes null whenever it gives no graph (an invalidated or
      // unjoined capture, a stream that does not capture): so does the runtime.
      if (e.kind() == ErrorKind::cuda) *graph = nullptr;
      throw;
    }
    return cudaSuccess;
  });
}

cudaError_t is_capturing(const char* api, cudaStream_t stream, cudaStreamCaptureStatus* status, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (status == nullptr) return null_argument(api, "pCaptureStatus");
  return guarded(api, [&] {
    *status = static_cast<cudaStreamCaptureStatus>(capture_status(stream_of(stream, zero, api)));
    return cudaSuccess;
  });
}

// Whether any of the driver's edges is not the default one (all bytes 0).
bool custom_edges(const void* edges, std::size_t count) noexcept {
  if (edges == nullptr) return false;
  const auto* bytes = static_cast<const unsigned char*>(edges);
  return std::any_of(bytes, bytes + count * sizeof(cudaGraphEdgeData), [](unsigned char b) { return b != 0; });
}

cudaError_t get_capture_info(const char* api, cudaStream_t stream, cudaStreamCaptureStatus* status,
                             unsigned long long* id, cudaGraph_t* graph, const cudaGraphNode_t** dependencies,
                             const cudaGraphEdgeData** edges, std::size_t* count, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (status == nullptr) return null_argument(api, "captureStatus_out");
  if (edges != nullptr && dependencies == nullptr) {
    return fail(cudaErrorInvalidValue,
                fmt::format("{}: edgeData_out without dependencies_out: the edges describe the dependencies", api));
  }
  return guarded(api, [&] {
    const CaptureInfo info = capture_info(stream_of(stream, zero, api));
    if (dependencies != nullptr && edges == nullptr && custom_edges(info.native_edges, info.dependencies)) {
      return fail(cudaErrorLossyQuery,
                  fmt::format("{}: the capture's dependencies have edge data; pass edgeData_out to receive it", api));
    }
    *status = static_cast<cudaStreamCaptureStatus>(info.status);
    if (id != nullptr) *id = info.id;
    if (graph != nullptr) *graph = reinterpret_cast<cudaGraph_t>(info.graph);
    if (dependencies != nullptr) *dependencies = static_cast<const cudaGraphNode_t*>(info.native_dependencies);
    if (edges != nullptr) *edges = static_cast<const cudaGraphEdgeData*>(info.native_edges);
    if (count != nullptr) *count = info.dependencies;
    return cudaSuccess;
  });
}

cudaError_t instantiate(const char* api, cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (exec == nullptr) return null_argument(api, "pGraphExec");
  if (graph == nullptr) return null_argument(api, "graph");
  return guarded(api, [&] {
    // Instantiated in the thread's context, as the driver does for a graph
    // built node by node (a captured graph's work names its own context).
    const Borrowed<Graph> g(Graph::adopt(context(api), reinterpret_cast<std::uintptr_t>(graph)));
    GraphExec x = g->instantiate(flags);
    *exec = reinterpret_cast<cudaGraphExec_t>(x.detach());
    return cudaSuccess;
  });
}

enum class Submit { launch, upload };

cudaError_t submit(const char* api, cudaGraphExec_t exec, cudaStream_t stream, Submit what, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (exec == nullptr) return null_argument(api, "graphExec");
  return guarded(api, [&] {
    const StreamRef s = stream_of(stream, zero, api);
    // The stream's context: the driver itself refuses an executable graph of another.
    const Borrowed<GraphExec> x(GraphExec::adopt(s.context(), reinterpret_cast<std::uintptr_t>(exec)));
    if (what == Submit::launch) {
      x->launch(s);
    } else {
      x->upload(s);
    }
    return cudaSuccess;
  });
}

// cudaGraphDestroy and cudaGraphExecDestroy: the program's handle, adopted to be destroyed.
template <class Owner, class Handle>
cudaError_t destroy(const char* api, Handle handle, const char* argument) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (handle == nullptr) return null_argument(api, argument);
  // As the other destroys: after a fault, the device's sticky error.
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  return guarded(api, [&] {
    Owner::adopt(context(api), reinterpret_cast<std::uintptr_t>(handle)).destroy();
    return cudaSuccess;
  });
}

}  // namespace

// ---- capture --------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (const cudaError_t failed = initialise("cudaStreamBeginCapture")) return failed;
  return begin_capture("cudaStreamBeginCapture", stream, mode, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (const cudaError_t failed = initialise("cudaStreamBeginCapture_ptsz")) return failed;
  return begin_capture("cudaStreamBeginCapture", stream, mode, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (const cudaError_t failed = initialise("cudaStreamEndCapture")) return failed;
  return end_capture("cudaStreamEndCapture", stream, graph, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  if (const cudaError_t failed = initialise("cudaStreamEndCapture_ptsz")) return failed;
  return end_capture("cudaStreamEndCapture", stream, graph, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (const cudaError_t failed = initialise("cudaStreamIsCapturing")) return failed;
  return is_capturing("cudaStreamIsCapturing", stream, status, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (const cudaError_t failed = initialise("cudaStreamIsCapturing_ptsz")) return failed;
  return is_capturing("cudaStreamIsCapturing", stream, status, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                                    unsigned long long* id, cudaGraph_t* graph,
                                                    const cudaGraphNode_t** dependencies,
                                                    const cudaGraphEdgeData** edges, size_t* count) {
  if (const cudaError_t failed = initialise("cudaStreamGetCaptureInfo")) return failed;
  return get_capture_info("cudaStreamGetCaptureInfo", stream, status, id, graph, dependencies, edges, count, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                                         unsigned long long* id, cudaGraph_t* graph,
                                                         const cudaGraphNode_t** dependencies,
                                                         const cudaGraphEdgeData** edges, size_t* count) {
  if (const cudaError_t failed = initialise("cudaStreamGetCaptureInfo_ptsz")) return failed;
  return get_capture_info("cudaStreamGetCaptureInfo", stream, status, id, graph, dependencies, edges, count,
                          kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  constexpr const char* api = "cudaThreadExchangeStreamCaptureMode";
  if (const cudaError_t failed = initialise(api)) return failed;
  if (const cudaError_t e = enter(api, Prologue::driver); e != cudaSuccess) return e;
  if (mode == nullptr) return null_argument(api, "mode");
  if (!capture_mode_known(*mode)) return unknown_mode(api, *mode);
  return guarded(api, [&] {
    *mode = static_cast<cudaStreamCaptureMode>(exchange_capture_mode(driver(api), static_cast<CaptureMode>(*mode)));
    return cudaSuccess;
  });
}

// ---- graphs ---------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (const cudaError_t failed = initialise("cudaGraphInstantiate")) return failed;
  return instantiate("cudaGraphInstantiate", exec, graph, flags);
}
DRVSHIM_CUDART cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                         unsigned long long flags) {
  if (const cudaError_t failed = initialise("cudaGraphInstantiateWithFlags")) return failed;
  return instantiate("cudaGraphInstantiateWithFlags", exec, graph, flags);
}
DRVSHIM_CUDART cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaGraphLaunch")) return failed;
  return submit("cudaGraphLaunch", exec, stream, Submit::launch, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaGraphLaunch_ptsz")) return failed;
  return submit("cudaGraphLaunch", exec, stream, Submit::launch, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaGraphUpload")) return failed;
  return submit("cudaGraphUpload", exec, stream, Submit::upload, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaGraphUpload_ptsz")) return failed;
  return submit("cudaGraphUpload", exec, stream, Submit::upload, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  constexpr const char* api = "cudaGraphGetNodes";
  if (const cudaError_t failed = initialise(api)) return failed;
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (graph == nullptr) return null_argument(api, "graph");
  if (count == nullptr) return null_argument(api, "numNodes");
  return guarded(api, [&] {
    const Borrowed<Graph> g(Graph::adopt(context(api), reinterpret_cast<std::uintptr_t>(graph)));
    const std::vector<std::uintptr_t> all = g->nodes();
    if (nodes == nullptr) {
      *count = all.size();
      return cudaSuccess;
    }
    // As the driver: as many as fit, null in the slots past the last node,
    // and the number written.
    const std::size_t written = std::min(*count, all.size());
    for (std::size_t i = 0; i < *count; ++i) {
      nodes[i] = i < written ? reinterpret_cast<cudaGraphNode_t>(all[i]) : nullptr;
    }
    *count = written;
    return cudaSuccess;
  });
}
DRVSHIM_CUDART cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (const cudaError_t failed = initialise("cudaGraphDestroy")) return failed;
  return destroy<Graph>("cudaGraphDestroy", graph, "graph");
}
DRVSHIM_CUDART cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (const cudaError_t failed = initialise("cudaGraphExecDestroy")) return failed;
  return destroy<GraphExec>("cudaGraphExecDestroy", exec, "graphExec");
}
