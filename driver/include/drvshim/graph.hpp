// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file graph.hpp
/// Stream capture and graphs: work submitted to a capturing stream is
/// recorded into a graph instead of running; the graph, instantiated, runs it
/// again at each launch.
#include <drvshim/context.hpp>
#include <drvshim/export.hpp>
#include <drvshim/owning_handle.hpp>
#include <drvshim/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace drvshim {

class Driver;

/// Which calls a capture forbids while it runs (CUstreamCaptureMode): calls
/// that may synchronise implicitly, such as an allocation or a free, fail with
/// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
enum class CaptureMode : int {
  global = 0,         ///< forbidden on every thread whose own mode is global, and on the capturing thread
  thread_local_ = 1,  ///< forbidden on the capturing thread only
  relaxed = 2,        ///< not forbidden
};

/// Whether a stream is capturing (CUstreamCaptureStatus).
enum class CaptureStatus : int {
  none = 0,         ///< not capturing
  active = 1,       ///< capturing
  invalidated = 2,  ///< capturing, but a refused operation ended what it can give: end_capture throws
};

DRVSHIM_API const char* to_string(CaptureMode mode) noexcept;
DRVSHIM_API const char* to_string(CaptureStatus status) noexcept;

/// What cuStreamGetCaptureInfo says about a stream.
struct CaptureInfo {
  CaptureStatus status = CaptureStatus::none;
  std::uint64_t id = 0;          ///< unique per capture in the process; 0 when not capturing
  std::uintptr_t graph = 0;      ///< the graph being built (CUgraph; the capture owns it); 0 when not capturing
  std::size_t dependencies = 0;  ///< the nodes the next captured operation will depend on
  /// The driver's array of those nodes (`dependencies` CUgraphNode values)
  /// and of their edges (CUgraphEdgeData, or null when every edge is the
  /// default one): owned by the capture, valid until the next operation on
  /// the stream or the end of the capture. For layers that hand them on.
  const void* native_dependencies = nullptr;
  const void* native_edges = nullptr;
};

class GraphExec;

namespace detail {
struct GraphTraits {
  struct value_type {
    ContextRef context;
    std::uintptr_t handle;
  };
  static bool held(const value_type& v) noexcept { return v.handle != 0; }
  static void clear(value_type& v) noexcept { v.handle = 0; }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};
struct GraphExecTraits {
  struct value_type {
    ContextRef context;
    std::uintptr_t handle;
  };
  static bool held(const value_type& v) noexcept { return v.handle != 0; }
  static void clear(value_type& v) noexcept { v.handle = 0; }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};
}  // namespace detail

/// A graph (move-only owner; cuGraphDestroy), from end_capture or adopted.
/// Its context is the one its work was captured in.
class DRVSHIM_API Graph {
 public:
  /// Takes ownership of a graph made elsewhere (cuGraphCreate, another
  /// library's capture) whose work belongs to `context`. Throws
  /// InvalidArgumentError for a null handle.
  [[nodiscard]] static Graph adopt(const ContextRef& context, std::uintptr_t handle);

  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  explicit operator bool() const noexcept { return handle_.held(); }
  std::uintptr_t native() const noexcept { return handle_.get().handle; }
  const ContextRef& context() const noexcept { return handle_.get().context; }
  /// The number of nodes (cuGraphGetNodes). Throws InvalidArgumentError when
  /// empty, CudaError as the driver answers.
  std::size_t node_count() const;
  /// The nodes (CUgraphNode values, in the driver's order; cuGraphGetNodes).
  /// Throws as node_count().
  std::vector<std::uintptr_t> nodes() const;
  /// cuGraphInstantiateWithFlags (CUDA 11.4+; flags as CUgraphInstantiate_flags,
  /// 0 for none). The executable graph is independent of this one: the graph
  /// may be destroyed or changed afterwards. Throws DriverTooOldError without
  /// the call, CudaError as the driver answers, InvalidArgumentError when empty.
  [[nodiscard]] GraphExec instantiate(unsigned long long flags = 0) const;

  /// Gives the graph up without destroying it; the owner becomes empty.
  [[nodiscard]] std::uintptr_t detach() noexcept;
  void destroy();
  [[nodiscard]] Status destroy(std::nothrow_t) noexcept;

 private:
  Graph(ContextRef context, std::uintptr_t handle) noexcept;
  friend DRVSHIM_API Graph end_capture(const StreamRef& stream);
  detail::OwningHandle<detail::GraphTraits> handle_;
};

/// An executable graph (move-only owner; cuGraphExecDestroy).
class DRVSHIM_API GraphExec {
 public:
  /// Takes ownership of an executable graph made elsewhere whose work belongs
  /// to `context`. Throws InvalidArgumentError for a null handle.
  [[nodiscard]] static GraphExec adopt(const ContextRef& context, std::uintptr_t handle);

  GraphExec(GraphExec&&) noexcept;
  GraphExec& operator=(GraphExec&&) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec();

  explicit operator bool() const noexcept { return handle_.held(); }
  std::uintptr_t native() const noexcept { return handle_.get().handle; }
  const ContextRef& context() const noexcept { return handle_.get().context; }
  /// cuGraphLaunch: queues the graph's work on `stream`, a stream of the
  /// graph's context (another context's is refused with InvalidArgumentError
  /// naming both). A launch may begin before an earlier launch of the same
  /// graph has ended only on the same stream, which orders them.
  void launch(const StreamRef& stream) const;
  /// cuGraphUpload (CUDA 11.1+): prepares the launch on `stream` ahead of it.
  void upload(const StreamRef& stream) const;

  [[nodiscard]] std::uintptr_t detach() noexcept;
  void destroy();
  [[nodiscard]] Status destroy(std::nothrow_t) noexcept;

 private:
  friend class Graph;
  GraphExec(ContextRef context, std::uintptr_t handle) noexcept;
  detail::OwningHandle<detail::GraphExecTraits> handle_;
};

/// cuStreamBeginCapture: from now on, work submitted to `stream` (and to
/// streams that wait for events recorded in it) is recorded, not run. The
/// legacy default stream cannot be captured: InvalidArgumentError. Throws
/// DriverTooOldError without the call, CudaError as the driver answers
/// (CUDA_ERROR_ILLEGAL_STATE: already capturing).
DRVSHIM_API void begin_capture(const StreamRef& stream, CaptureMode mode = CaptureMode::global);
/// cuStreamEndCapture: the graph of what was captured. Throws CudaError
/// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when a refused operation broke the
/// capture (the capture is over either way), CUDA_ERROR_ILLEGAL_STATE when the
/// stream is not capturing, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD from
/// another thread than the one that began a global or thread-local capture.
[[nodiscard]] DRVSHIM_API Graph end_capture(const StreamRef& stream);
/// cuStreamIsCapturing. CudaError CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the
/// legacy default stream while a blocking stream of its context captures (its
/// work would depend on the capture; the question does not end it).
DRVSHIM_API CaptureStatus capture_status(const StreamRef& stream);
/// cuStreamGetCaptureInfo (CUDA 12.3+). Throws DriverTooOldError without it,
/// CudaError as capture_status does.
DRVSHIM_API CaptureInfo capture_info(const StreamRef& stream);
/// cuThreadExchangeStreamCaptureMode: sets the calling thread's capture mode
/// and returns the previous one (the rule a capture applies to this thread's
/// calls is the stricter of the two). A thread starts in global mode.
DRVSHIM_API CaptureMode exchange_capture_mode(const Driver& driver, CaptureMode mode);

/// Sets the calling thread's capture mode for a scope and restores the
/// previous one at its end (as PyTorch does around an allocation made while
/// another stream captures).
class DRVSHIM_API ScopedCaptureMode {
 public:
  ScopedCaptureMode(const Driver& driver, CaptureMode mode);
  ~ScopedCaptureMode();
  ScopedCaptureMode(const ScopedCaptureMode&) = delete;
  ScopedCaptureMode& operator=(const ScopedCaptureMode&) = delete;

 private:
  const Driver* driver_;
  CaptureMode previous_;
};

}  // namespace drvshim
