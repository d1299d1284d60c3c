// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file stream.hpp
/// Streams: ordered queues of work in a context. An owner (Stream) and a
/// non-owning view (StreamRef); the legacy and per-thread default streams are
/// explicit, named values.
#include <drvshim/context.hpp>
#include <drvshim/export.hpp>
#include <drvshim/flags.hpp>
#include <drvshim/owning_handle.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace drvshim {

class EventRef;
namespace detail {
struct StreamTraits;
struct Access;  // the library's own door to private members (internal, not part of the API)
}  // namespace detail

/// What cuStreamQuery says about a stream.
enum class StreamStatus {
  ready,      ///< all queued work is done
  not_ready,  ///< work is still queued or running
};

/// How a created stream relates to the legacy default stream.
enum class StreamFlags : unsigned {
  blocking = 0x0,      ///< synchronises with the legacy default stream (CU_STREAM_DEFAULT)
  non_blocking = 0x1,  ///< does not (CU_STREAM_NON_BLOCKING)
};
template <>
struct FlagTraits<StreamFlags> {
  static constexpr FlagName names[] = {{0x1, "non_blocking"}};
  static constexpr unsigned zero_mask = ~0u;
  static constexpr const char* zero_name = "blocking";
};

/// The valid priority range of a context's device: lower numbers are higher
/// priority, so greatest <= least (cuCtxGetStreamPriorityRange).
struct StreamPriorityRange {
  int least = 0;
  int greatest = 0;
};

/// Stream attributes (cuStreamSetAttribute), numbered as cuda.h's
/// CUstreamAttrID (the CUDA Runtime's cudaStreamAttrID uses the same numbers).
enum class StreamAttribute : int {
  access_policy_window = 1,
  synchronization_policy = 3,
  priority = 8,
  mem_sync_domain_map = 9,
  mem_sync_domain = 10,
};

/// A stream attribute's value, laid out as cuda.h's CUstreamAttrValue (a
/// 64-byte union; the CUDA Runtime's cudaStreamAttrValue has the same layout):
/// fill the member the attribute names.
struct alignas(8) StreamAttributeValue {
  unsigned char bytes[64] = {};
};

/// How managed memory is attached to a stream (CU_MEM_ATTACH_*).
enum class MemoryAttach : unsigned {
  global = 0x1,  ///< accessible from any stream on any device
  host = 0x2,    ///< not accessible from devices until attached otherwise
  single = 0x4,  ///< accessible only from the stream it is attached to
};

/// cuCtxGetStreamPriorityRange for the context (made current for the call).
DRVSHIM_API StreamPriorityRange stream_priority_range(const ContextRef& context);

/// A non-owning view of a stream: cheap to copy, valid while its owner lives.
/// Every operation on a view whose Stream was destroyed throws
/// InvalidArgumentError before the driver is called (in every build: the
/// destroyed stream's handle may already name a new one).
class DRVSHIM_API StreamRef {
 public:
  /// The legacy default stream (CU_STREAM_LEGACY) of `context`: synchronises
  /// with every blocking stream of the context.
  static StreamRef legacy_default(const ContextRef& context) noexcept;
  /// The per-thread default stream (CU_STREAM_PER_THREAD) of `context`.
  static StreamRef per_thread_default(const ContextRef& context) noexcept;
  /// A view of a stream drvshim did not create (cuStreamCreate, the CUDA
  /// Runtime, another library) in `context`, the context it belongs to
  /// (context_of_stream() asks the driver). The view owns nothing and cannot
  /// tell when the stream is destroyed: the handle must stay valid while the
  /// view is used. The default-stream values (0, 0x1, 0x2) give the default streams.
  static StreamRef wrap(const ContextRef& context, std::uintptr_t handle) noexcept;

  /// The CUstream, as an opaque address (0x1 legacy, 0x2 per-thread default).
  std::uintptr_t native() const noexcept { return handle_; }
  const ContextRef& context() const noexcept { return context_; }
  /// "legacy default stream", "per-thread default stream" or "stream 0x...".
  std::string name() const;
  /// The stream's flags and priority as the driver reports them
  /// (cuStreamGetFlags, cuStreamGetPriority): also for streams drvshim did not
  /// create. DriverTooOldError without them (CUDA 5.5).
  StreamFlags flags() const;
  int priority() const;
  /// The stream's unique id in the process (cuStreamGetId, CUDA 12.0+; the
  /// default streams have ids of their own per context). Throws
  /// DriverTooOldError without the call, CudaError as the driver answers.
  std::uint64_t id() const;

  /// Waits until all work queued on the stream is done (cuStreamSynchronize).
  /// An error caused by earlier work is a CudaError marked asynchronous
  /// ("asynchronous error, detected at cuStreamSynchronize ..."); an exception
  /// thrown by a host callback of this stream is reported here as a
  /// HostCallbackError (once).
  void synchronize() const;
  /// cuStreamQuery: ready or not ready; a failure of earlier work throws like synchronize().
  StreamStatus query() const;
  /// query() == StreamStatus::ready.
  bool ready() const { return query() == StreamStatus::ready; }
  /// Makes later work on this stream wait until `event` completes (cuStreamWaitEvent).
  void wait(const EventRef& event) const;
  /// Queues `callback` to run on a driver thread once earlier work on the
  /// stream completes (cuLaunchHostFunc). drvshim owns the closure (moved to
  /// the heap, freed after it runs). The callback must not call CUDA; an
  /// exception it throws is caught, logged, and reported by the next
  /// synchronize() of this stream; it never terminates the process.
  /// On a capturing stream the capture records it and the graph runs it at
  /// each launch: the closure then lives as long as the graph and every
  /// executable graph made from it (a user object of the graph,
  /// cuUserObjectCreate, CUDA 11.3+; DriverTooOldError without it), and is
  /// destroyed outside the driver's thread after they are gone.
  void launch_host_func(std::function<void()> callback) const;
  /// cuStreamSetAttribute / cuStreamGetAttribute (CUDA 11.0+; DriverTooOldError without them).
  void set_attribute(StreamAttribute attribute, const StreamAttributeValue& value) const;
  StreamAttributeValue attribute(StreamAttribute attribute) const;
  /// cuStreamAttachMemAsync: attaches managed memory at `address` (`bytes`, 0
  /// for the whole allocation) to this stream, ordered after its queued work.
  void attach_memory(std::uint64_t address, std::size_t bytes, MemoryAttach attach) const;

  /// The same stream: same context, handle and owning Stream (a later stream
  /// that reuses a destroyed one's handle is another stream).
  friend bool operator==(const StreamRef&, const StreamRef&) = default;

 private:
  friend struct detail::Access;
  friend class Stream;
  friend struct detail::StreamTraits;
  // `id` is unique per created stream (0 for the default streams), so state
  // kept per stream never leaks to a later stream that reuses the handle.
  StreamRef(ContextRef context, std::uintptr_t handle, std::uint64_t id = 0) noexcept
      : context_(std::move(context)), handle_(handle), id_(id) {}
  ContextRef context_;
  std::uintptr_t handle_;
  std::uint64_t id_;
};

namespace detail {
/// Stream's ownership traits (owning_handle.hpp).
struct StreamTraits {
  struct value_type {
    ContextRef context;
    std::uintptr_t handle;
    std::uint64_t id;
    StreamFlags flags;
    int priority;
  };
  static bool held(const value_type& v) noexcept { return v.handle != 0; }
  static void clear(value_type& v) noexcept { v.handle = 0; }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};
}  // namespace detail

/// A stream created by drvshim (move-only owner). Destroying it does not wait
/// for queued work: the driver releases the stream once that work completes.
class DRVSHIM_API Stream {
 public:
  /// cuStreamCreateWithPriority. Throws InvalidArgumentError when `priority` is
  /// outside stream_priority_range(context) (the message gives the range).
  [[nodiscard]] static Stream create(const ContextRef& context, StreamFlags flags = StreamFlags::non_blocking,
                                     int priority = 0);
  /// Takes ownership of a stream drvshim did not create (cuStreamCreate,
  /// another library) in `context`, its context: destroy() and the destructor
  /// call cuStreamDestroy. `flags` and `priority` are what flags() and
  /// priority() report (the driver is not asked). Throws InvalidArgumentError
  /// for the default streams (0, 0x1, 0x2), which nobody destroys.
  [[nodiscard]] static Stream adopt(const ContextRef& context, std::uintptr_t handle,
                                    StreamFlags flags = StreamFlags::blocking, int priority = 0);

  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  explicit operator bool() const noexcept { return handle_.held(); }
  /// A view. Throws InvalidArgumentError on an empty owner. Not of a
  /// temporary owner, whose view would outlive it.
  StreamRef ref() const&;
  StreamRef ref() const&& = delete;
  /// The owner is usable where a view is (a function taking a StreamRef, a
  /// LaunchConfig), as ref(); not a temporary owner, whose view would outlive it.
  operator StreamRef() const& { return ref(); }
  operator StreamRef() const&& = delete;
  /// The flags and priority the stream was made (or adopted) with, kept by
  /// the owner (the driver is not asked, unlike StreamRef::flags()); an empty
  /// owner keeps its last values.
  StreamFlags flags() const noexcept { return handle_.get().flags; }
  int priority() const noexcept { return handle_.get().priority; }

  // The view's operations, on the owner (each as ref().operation(): an empty
  // owner throws InvalidArgumentError).
  std::uintptr_t native() const { return ref().native(); }
  ContextRef context() const { return ref().context(); }
  std::string name() const { return ref().name(); }
  std::uint64_t id() const { return ref().id(); }
  void synchronize() const { ref().synchronize(); }
  StreamStatus query() const { return ref().query(); }
  bool ready() const { return ref().ready(); }
  void wait(const EventRef& event) const { ref().wait(event); }
  void launch_host_func(std::function<void()> callback) const { ref().launch_host_func(std::move(callback)); }
  void set_attribute(StreamAttribute attribute, const StreamAttributeValue& value) const {
    ref().set_attribute(attribute, value);
  }
  StreamAttributeValue attribute(StreamAttribute attribute) const { return ref().attribute(attribute); }
  void attach_memory(std::uint64_t address, std::size_t bytes, MemoryAttach attach) const {
    ref().attach_memory(address, bytes, attach);
  }

  /// Gives the stream up without destroying it and returns its handle: the
  /// owner becomes empty, its views are invalid (StreamRef::wrap the handle
  /// for new ones), and the stream is the caller's to destroy (Stream::adopt,
  /// or the driver).
  [[nodiscard]] std::uintptr_t detach() noexcept;
  /// cuStreamDestroy_v2; the owner becomes empty.
  void destroy();
  /// The no-throw twin.
  [[nodiscard]] Status destroy(std::nothrow_t) noexcept;

 private:
  Stream(ContextRef context, std::uintptr_t handle, StreamFlags flags, int priority) noexcept;
  detail::OwningHandle<detail::StreamTraits> handle_;
};

}  // namespace drvshim
