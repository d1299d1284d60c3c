// SPDX-License-Identifier: Apache-2.0
// Stream capture and graphs: begin and end a capture, ask about it, the
// thread's capture mode, and the owners of graphs and executable graphs.
#include <drvshim/driver.hpp>
#include <drvshim/graph.hpp>

#include <string>
#include <utility>
#include <vector>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "memory/memory_errors.hpp"
#include "seam/access.hpp"
#include "seam/core.hpp"
#include "seam/core_of.hpp"
#include "streams/capture_check.hpp"
#include "support/view_checks.hpp"

namespace drvshim {
namespace {

CUstream native_stream(const StreamRef& s) noexcept { return reinterpret_cast<CUstream>(s.native()); }
CUgraph native_graph(std::uintptr_t h) noexcept { return reinterpret_cast<CUgraph>(h); }
CUgraphExec native_exec(std::uintptr_t h) noexcept { return reinterpret_cast<CUgraphExec>(h); }
using detail::core_of;

CaptureStatus status_of(CUstreamCaptureStatus s) noexcept {
  switch (s) {
    case CU_STREAM_CAPTURE_STATUS_ACTIVE: return CaptureStatus::active;
    case CU_STREAM_CAPTURE_STATUS_INVALIDATED: return CaptureStatus::invalidated;
    default: return CaptureStatus::none;
  }
}

void check_mode(const char* api, CaptureMode mode) {
  const int m = static_cast<int>(mode);
  if (m < 0 || m > 2) {
    throw InvalidArgumentError(api, fmt::format("capture mode {}", m),
                               "the modes are CaptureMode::global, thread_local_ and relaxed");
  }
}

// Work on the same stream of a context other than the graph's cannot be
// launched there: say which two contexts, before the driver's bare answer.
void check_same_context(const char* api, const ContextRef& graph, const StreamRef& stream) {
  detail::check_stream_view(stream, api);
  if (stream.context().address() != graph.address()) {
    throw InvalidArgumentError(api,
                               fmt::format("the graph belongs to {}, {} to {}", detail::context_text(graph),
                                           stream.name(), detail::context_text(stream.context())),
                               "launch a graph on a stream of the context it was captured in");
  }
}

}  // namespace

const char* to_string(CaptureMode mode) noexcept {
  switch (mode) {
    case CaptureMode::global: return "global";
    case CaptureMode::thread_local_: return "thread_local";
    case CaptureMode::relaxed: return "relaxed";
  }
  return "unknown";
}

const char* to_string(CaptureStatus status) noexcept {
  switch (status) {
    case CaptureStatus::none: return "none";
    case CaptureStatus::active: return "active";
    case CaptureStatus::invalidated: return "invalidated";
  }
  return "unknown";
}

void begin_capture(const StreamRef& stream, CaptureMode mode) {
  check_mode("begin_capture", mode);
  detail::check_stream_view(stream, "begin_capture");
  if (stream.native() == 0 || stream.native() == 0x1) {
    throw InvalidArgumentError(
        "begin_capture", fmt::format("{} is the legacy default stream", stream.name()),
        "capture a stream you created (Stream::create) or the per-thread default stream: the legacy default "
        "stream cannot be captured, and its work waits for every blocking stream that captures");
  }
  const auto& core = core_of(stream.context());
  core.require_function(detail::Api::k_cuStreamBeginCapture, "begin_capture");
  detail::ContextScope scope(core, stream.context().address(), "begin_capture");
  DRVSHIM_TRY(core, cuStreamBeginCapture, fmt::format("{}, mode {}", stream.name(), to_string(mode)),
              native_stream(stream), static_cast<CUstreamCaptureMode>(mode));
  core.captures.fetch_add(1, std::memory_order_relaxed);
}

Graph end_capture(const StreamRef& stream) {
  detail::check_stream_view(stream, "end_capture");
  const auto& core = core_of(stream.context());
  core.require_function(detail::Api::k_cuStreamEndCapture, "end_capture");
  detail::ContextScope scope(core, stream.context().address(), "end_capture");
  CUgraph graph = nullptr;
  const CUresult r = DRVSHIM_CU(core, cuStreamEndCapture, native_stream(stream), &graph);
  // The capture is over when it gave a graph or ended broken (invalidated,
  // unjoined); a refusal (not capturing, another thread's, unmatched) leaves
  // it running.
  const bool ended =
      r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED || r == CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  if (ended && core.captures.load(std::memory_order_relaxed) > 0) {
    core.captures.fetch_sub(1, std::memory_order_relaxed);
  }
  if (r != CUDA_SUCCESS) {
    // An invalidated capture may still hand back a graph: it is not the caller's to use.
    if (graph != nullptr) (void)DRVSHIM_CU(core, cuGraphDestroy, graph);
    detail::raise(core, static_cast<int>(r), "cuStreamEndCapture", stream.name());
  }
  return Graph(stream.context(), reinterpret_cast<std::uintptr_t>(graph));
}

CaptureStatus capture_status(const StreamRef& stream) {
  detail::check_stream_view(stream, "capture_status");
  const auto& core = core_of(stream.context());
  core.require_function(detail::Api::k_cuStreamIsCapturing, "capture_status");
  detail::ContextScope scope(core, stream.context().address(), "capture_status");
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  DRVSHIM_TRY(core, cuStreamIsCapturing, stream.name(), native_stream(stream), &s);
  return status_of(s);
}

CaptureInfo capture_info(const StreamRef& stream) {
  detail::check_stream_view(stream, "capture_info");
  const auto& core = core_of(stream.context());
  core.require_function(detail::Api::k_cuStreamGetCaptureInfo, "capture_info");
  detail::ContextScope scope(core, stream.context().address(), "capture_info");
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  std::size_t count = 0;
  DRVSHIM_TRY(core, cuStreamGetCaptureInfo, stream.name(), native_stream(stream), &s, &id, &graph, &deps, &edges,
              &count);
  CaptureInfo info;
  info.status = status_of(s);
  if (info.status != CaptureStatus::none) {
    info.id = id;
    info.graph = reinterpret_cast<std::uintptr_t>(graph);
    info.dependencies = count;
    info.native_dependencies = count != 0 ? static_cast<const void*>(deps) : nullptr;
    info.native_edges = count != 0 ? static_cast<const void*>(edges) : nullptr;
  }
  return info;
}

CaptureMode exchange_capture_mode(const Driver& driver, CaptureMode mode) {
  check_mode("exchange_capture_mode", mode);
  const auto& core = *detail::Access::core(driver);
  core.require_init("exchange_capture_mode");
  core.require_function(detail::Api::k_cuThreadExchangeStreamCaptureMode, "exchange_capture_mode");
  auto m = static_cast<CUstreamCaptureMode>(mode);
  DRVSHIM_TRY(core, cuThreadExchangeStreamCaptureMode, fmt::format("mode {}", to_string(mode)), &m);
  return static_cast<CaptureMode>(m);
}

ScopedCaptureMode::ScopedCaptureMode(const Driver& driver, CaptureMode mode)
    : driver_(&driver), previous_(exchange_capture_mode(driver, mode)) {}

ScopedCaptureMode::~ScopedCaptureMode() {
  try {
    (void)exchange_capture_mode(*driver_, previous_);
  } catch (const Error& e) {
    detail::logf(log::Level::error, "ScopedCaptureMode: restoring the capture mode {} failed: {}", to_string(previous_),
                 e.what());
  }
}

// ---- Graph ----------------------------------------------------------------------------------

Graph::Graph(ContextRef context, std::uintptr_t handle) noexcept : handle_({std::move(context), handle}) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

Graph Graph::adopt(const ContextRef& context, std::uintptr_t handle) {
  if (handle == 0) throw InvalidArgumentError("Graph::adopt", "a null graph handle");
  return Graph(context, handle);
}

std::size_t Graph::node_count() const {
  if (!handle_.held()) throw InvalidArgumentError("Graph::node_count", "this Graph is empty (moved from or destroyed)");
  const auto& core = core_of(context());
  core.require_function(detail::Api::k_cuGraphGetNodes, "Graph::node_count");
  std::size_t count = 0;
  DRVSHIM_TRY(core, cuGraphGetNodes, fmt::format("graph 0x{:x}", native()), native_graph(native()), nullptr, &count);
  return count;
}

std::vector<std::uintptr_t> Graph::nodes() const {
  if (!handle_.held()) throw InvalidArgumentError("Graph::nodes", "this Graph is empty (moved from or destroyed)");
  const auto& core = core_of(context());
  core.require_function(detail::Api::k_cuGraphGetNodes, "Graph::nodes");
  const std::string what = fmt::format("graph 0x{:x}", native());
  // Another thread may add nodes between the two questions: ask until the
  // count holds still.
  std::vector<CUgraphNode> nodes;
  for (;;) {
    std::size_t count = 0;
    DRVSHIM_TRY(core, cuGraphGetNodes, what, native_graph(native()), nullptr, &count);
    nodes.assign(count + 1, nullptr);
    std::size_t got = nodes.size();
    DRVSHIM_TRY(core, cuGraphGetNodes, what, native_graph(native()), nodes.data(), &got);
    if (got <= count) {
      nodes.resize(got);
      break;
    }
  }
  std::vector<std::uintptr_t> out;
  out.reserve(nodes.size());
  for (CUgraphNode n : nodes) out.push_back(reinterpret_cast<std::uintptr_t>(n));
  return out;
}
GraphExec Graph::instantiate(unsigned long long flags) const {
  if (!handle_.held())
    throw InvalidArgumentError("Graph::instantiate", "this Graph is empty (moved from or destroyed)");
  const auto& core = core_of(context());
  core.require_function(detail::Api::k_cuGraphInstantiateWithFlags, "Graph::instantiate");
  detail::ContextScope scope(core, context().address(), "Graph::instantiate");
  CUgraphExec exec = nullptr;
  DRVSHIM_TRY(core, cuGraphInstantiateWithFlags, fmt::format("graph 0x{:x}, flags 0x{:x}", native(), flags), &exec,
              native_graph(native()), flags);
  return GraphExec(context(), reinterpret_cast<std::uintptr_t>(exec));
}

std::uintptr_t Graph::detach() noexcept { return handle_.forget().handle; }
void Graph::destroy() { handle_.release(); }
Status Graph::destroy(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

// ---- GraphExec ------------------------------------------------------------------------------

GraphExec::GraphExec(ContextRef context, std::uintptr_t handle) noexcept : handle_({std::move(context), handle}) {}
GraphExec::GraphExec(GraphExec&&) noexcept = default;
GraphExec GraphExec::adopt(const ContextRef& context, std::uintptr_t handle) {
  if (handle == 0) throw InvalidArgumentError("GraphExec::adopt", "a null executable graph handle");
  return GraphExec(context, handle);
}
GraphExec& GraphExec::operator=(GraphExec&&) noexcept = default;
GraphExec::~GraphExec() = default;

void GraphExec::launch(const StreamRef& stream) const {
  if (!handle_.held())
    throw InvalidArgumentError("GraphExec::launch", "this GraphExec is empty (moved from or destroyed)");
  check_same_context("GraphExec::launch", context(), stream);
  const auto& core = core_of(context());
  core.require_function(detail::Api::k_cuGraphLaunch, "GraphExec::launch");
  detail::ContextScope scope(core, context().address(), "GraphExec::launch");
  DRVSHIM_TRY(core, cuGraphLaunch, fmt::format("executable graph 0x{:x} on {}", native(), stream.name()),
              native_exec(native()), native_stream(stream));
  detail::after_submit(core, native_stream(stream), "cuGraphLaunch", [&] { return stream.name(); });
}

void GraphExec::upload(const StreamRef& stream) const {
  if (!handle_.held())
    throw InvalidArgumentError("GraphExec::upload", "this GraphExec is empty (moved from or destroyed)");
  check_same_context("GraphExec::upload", context(), stream);
  const auto& core = core_of(context());
  core.require_function(detail::Api::k_cuGraphUpload, "GraphExec::upload");
  detail::ContextScope scope(core, context().address(), "GraphExec::upload");
  DRVSHIM_TRY(core, cuGraphUpload, fmt::format("executable graph 0x{:x} on {}", native(), stream.name()),
              native_exec(native()), native_stream(stream));
}

std::uintptr_t GraphExec::detach() noexcept { return handle_.forget().handle; }
void GraphExec::destroy() { handle_.release(); }
Status GraphExec::destroy(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void refuse_if_capturing(const StreamRef& stream, const char* api, const char* why) {
  const auto& core = core_of(stream.context());
  // The legacy stream never captures (asking it during another stream's
  // capture is an error of its own, which its work meets anyway).
  if (!core.has(Api::k_cuStreamIsCapturing) || stream.native() == 0 || stream.native() == 0x1) return;
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  DRVSHIM_TRY(core, cuStreamIsCapturing, stream.name(), native_stream(stream), &capturing);
  if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
    throw InvalidArgumentError(api, fmt::format("{} is capturing", stream.name()), why);
  }
}

namespace {

// Both owners release the same way: no current context needed, a failure
// logged by the no-throw path and raised by the throwing one, naming `what`.
template <Api id, class Destroy>
Status release_handle(const ContextRef& context, std::uintptr_t& slot, Destroy destroy) noexcept {
  const auto handle = std::exchange(slot, 0);
  const auto& core = core_of(context);
  if (!core.cleanup_allowed_in(context.address()) || !core.has(id)) return {};
  const CUresult r = destroy(core, handle);
  core.note_result(r);
  if (r != CUDA_SUCCESS) {
    logf(log::Level::warn, "{}(0x{:x}) failed with {} ({})", api_name(id), handle, result_name(static_cast<int>(r)),
         static_cast<int>(r));
  }
  return Status(api_name(id), static_cast<int>(r));
}

template <class Traits>
void release_or_raise(typename Traits::value_type& v, const char* api, const char* what) {
  const auto handle = v.handle;
  core_of(v.context).ensure_usable(api);
  const Status s = Traits::release(v);
  if (!s.ok()) {
    raise(core_of(v.context), s.code(), s.api(), fmt::format("{} 0x{:x}", what, handle), {}, v.context.address());
  }
}

}  // namespace

Status GraphTraits::release(value_type& v) noexcept {
  return release_handle<Api::k_cuGraphDestroy>(v.context, v.handle, [](const DriverCore& core, std::uintptr_t h) {
    return DRVSHIM_CU(core, cuGraphDestroy, native_graph(h));
  });
}

void GraphTraits::release_or_throw(value_type& v) { release_or_raise<GraphTraits>(v, "Graph::destroy", "graph"); }

Status GraphExecTraits::release(value_type& v) noexcept {
  return release_handle<Api::k_cuGraphExecDestroy>(v.context, v.handle, [](const DriverCore& core, std::uintptr_t h) {
    return DRVSHIM_CU(core, cuGraphExecDestroy, native_exec(h));
  });
}

void GraphExecTraits::release_or_throw(value_type& v) {
  release_or_raise<GraphExecTraits>(v, "GraphExec::destroy", "executable graph");
}

}  // namespace detail

}  // namespace drvshim
