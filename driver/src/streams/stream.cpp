// SPDX-License-Identifier: Apache-2.0
#include <drvshim/event.hpp>
#include <drvshim/stream.hpp>

#include <atomic>
#include <cstring>
#include <memory>
#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "seam/access.hpp"
#include "seam/core.hpp"
#include "support/view_checks.hpp"

namespace drvshim {
namespace {

CUstream native_stream(std::uintptr_t h) noexcept { return reinterpret_cast<CUstream>(h); }

}  // namespace

StreamPriorityRange stream_priority_range(const ContextRef& context) {
  const auto& core = *detail::Access::core(context.device());
  detail::ContextScope scope(core, context.address(), "stream_priority_range");
  StreamPriorityRange range;
  DRVSHIM_TRY(core, cuCtxGetStreamPriorityRange, fmt::format("device {}", context.device().ordinal()), &range.least,
              &range.greatest);
  return range;
}

StreamRef StreamRef::legacy_default(const ContextRef& context) noexcept {
  return StreamRef(context, reinterpret_cast<std::uintptr_t>(CU_STREAM_LEGACY));
}

StreamRef StreamRef::per_thread_default(const ContextRef& context) noexcept {
  return StreamRef(context, reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD));
}

std::string StreamRef::name() const {
  if (handle_ == reinterpret_cast<std::uintptr_t>(CU_STREAM_LEGACY)) return "legacy default stream";
  if (handle_ == reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD)) return "per-thread default stream";
  return fmt::format("stream 0x{:x}", handle_);
}

namespace {

// Reports (once) an exception a host callback of this stream threw.
void report_callback_error(const detail::DriverCore& core, const StreamRef& stream, const char* api,
                           const std::string& name) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(core.callback_mutex);
    const auto it = core.callback_errors.find(detail::Access::key(stream));
    if (it == core.callback_errors.end()) return;
    message = std::move(it->second);
    core.callback_errors.erase(it);
  }
  throw HostCallbackError(api, name, message);
}

struct HostCallback {
  std::function<void()> fn;
  std::shared_ptr<const detail::DriverCore> core;   // the callback may outlive every other drvshim object
  std::pair<std::uintptr_t, std::uint64_t> stream;  // Access::key(StreamRef)
  std::string stream_name;
};

// Hands the closure over to be destroyed outside the host function: its
// captures may own drvshim objects (a buffer kept alive until the callback
// ran) whose release calls the driver, which CUDA forbids here.
void retire_closure(HostCallback& cb) noexcept {
  try {
    std::lock_guard<std::mutex> lock(cb.core->spent_mutex);
    cb.core->spent_callbacks.push_back(std::move(cb.fn));
    cb.core->any_spent.store(true, std::memory_order_relaxed);
  } catch (...) {
    // No memory to keep it: it is destroyed here, and a driver call its
    // captures make is refused (their resources are leaked, with an error logged).
  }
}

// Runs on a driver thread. Nothing may escape: an exception here would
// terminate the process, so it is kept for the stream's next synchronize.
void run_host_callback(void* data) noexcept {
  std::unique_ptr<HostCallback> cb(static_cast<HostCallback*>(data));
  detail::HostFunctionScope inside;
  std::string error;
  try {
    cb->fn();
    retire_closure(*cb);
    return;
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "an exception not derived from std::exception";
  }
  retire_closure(*cb);
  detail::logf(log::Level::error, "a host callback on {} threw: {}", cb->stream_name, error);
  try {
    std::lock_guard<std::mutex> lock(cb->core->callback_mutex);
    auto& slot = cb->core->callback_errors[cb->stream];
    if (slot.empty()) slot = std::move(error);  // the first one is reported; later ones are in the log
  } catch (...) {
  }
}

// A host function a capture recorded: a graph runs it at each of its
// launches, so it stays; the graph's user object destroys it with the graph.
void run_captured_host_callback(void* data) noexcept {
  auto* cb = static_cast<HostCallback*>(data);
  detail::HostFunctionScope inside;
  std::string error;
  try {
    cb->fn();
    return;
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "an exception not derived from std::exception";
  }
  detail::logf(log::Level::error, "a host callback captured on {} threw: {}", cb->stream_name, error);
  try {
    std::lock_guard<std::mutex> lock(cb->core->callback_mutex);
    auto& slot = cb->core->callback_errors[cb->stream];
    if (slot.empty()) slot = std::move(error);
  } catch (...) {
  }
}

// The user object's destructor: runs on a driver thread once the graph and
// every executable graph made from it are gone.
void destroy_captured_host_callback(void* data) noexcept {
  std::unique_ptr<HostCallback> cb(static_cast<HostCallback*>(data));
  retire_closure(*cb);
}

// The graph a capture on `stream` is building, or null when the stream is
// not capturing (or its capture was invalidated: the launch then fails).
CUgraph capturing_graph(const detail::DriverCore& core, CUstream stream, const std::string& name) {
  if (!core.has(detail::Api::k_cuStreamGetCaptureInfo) || stream == nullptr || stream == CU_STREAM_LEGACY) {
    return nullptr;
  }
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  DRVSHIM_TRY(core, cuStreamGetCaptureInfo, name, stream, &status, nullptr, &graph, nullptr, nullptr, nullptr);
  return status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? graph : nullptr;
}

}  // namespace

void StreamRef::synchronize() const {
  detail::check_stream_view(*this, "StreamRef::synchronize");
  const auto& core = *detail::Access::core(context_.device());
  {
    detail::ContextScope scope(core, context_.address(), "StreamRef::synchronize");
    DRVSHIM_TRY(core, cuStreamSynchronize, name(), native_stream(handle_));
  }
  core.bury_spent_callbacks();
  report_callback_error(core, *this, "cuStreamSynchronize", name());
}

StreamStatus StreamRef::query() const {
  detail::check_stream_view(*this, "StreamRef::query");
  const auto& core = *detail::Access::core(context_.device());
  detail::ContextScope scope(core, context_.address(), "StreamRef::query");
  const CUresult r = DRVSHIM_CU(core, cuStreamQuery, native_stream(handle_));
  if (r == CUDA_SUCCESS) return StreamStatus::ready;
  if (r == CUDA_ERROR_NOT_READY) return StreamStatus::not_ready;
  detail::raise(core, static_cast<int>(r), "cuStreamQuery", name());
}

void StreamRef::wait(const EventRef& event) const {
  detail::check_stream_view(*this, "StreamRef::wait");
  const auto event_handle = detail::live_event_handle(event, "StreamRef::wait");
  const auto& core = *detail::Access::core(context_.device());
  detail::ContextScope scope(core, context_.address(), "StreamRef::wait");
  DRVSHIM_TRY(core, cuStreamWaitEvent, fmt::format("{} waits for {}", name(), event.name()), native_stream(handle_),
              reinterpret_cast<CUevent>(event_handle), 0u);
}

void StreamRef::launch_host_func(std::function<void()> callback) const {
  if (!callback) throw InvalidArgumentError("StreamRef::launch_host_func", "the callback is empty");
  detail::check_stream_view(*this, "StreamRef::launch_host_func");
  const auto& core = *detail::Access::core(context_.device());
  core.bury_spent_callbacks();
  detail::ContextScope scope(core, context_.address(), "StreamRef::launch_host_func");
  const CUgraph graph = capturing_graph(core, native_stream(handle_), name());
  auto cb = std::make_unique<HostCallback>(
      HostCallback{std::move(callback), detail::Access::core(context_.device()), detail::Access::key(*this), name()});
  if (graph != nullptr) {
    // A capture records the call, and the graph runs it at every launch: the
    // callback lives as long as the graph, whose user object owns it.
    core.require_function(detail::Api::k_cuUserObjectCreate, "StreamRef::launch_host_func on a capturing stream");
    core.require_function(detail::Api::k_cuGraphRetainUserObject, "StreamRef::launch_host_func on a capturing stream");
    HostCallback* raw = cb.get();
    CUuserObject owner = nullptr;
    DRVSHIM_TRY(core, cuUserObjectCreate, name(), &owner, raw, &destroy_captured_host_callback, 1u,
                static_cast<unsigned>(CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    (void)cb.release();  // the user object owns it now
    const CUresult moved =
        DRVSHIM_CU(core, cuGraphRetainUserObject, graph, owner, 1u, static_cast<unsigned>(CU_GRAPH_USER_OBJECT_MOVE));
    if (moved != CUDA_SUCCESS) {
      (void)DRVSHIM_CU(core, cuUserObjectRelease, owner, 1u);  // destroys the callback
      detail::raise(core, static_cast<int>(moved), "cuGraphRetainUserObject", name());
    }
    // From here the graph owns the callback, also when the launch is refused.
    DRVSHIM_TRY(core, cuLaunchHostFunc, name(), native_stream(handle_), &run_captured_host_callback, raw);
    return;
  }
  DRVSHIM_TRY(core, cuLaunchHostFunc, name(), native_stream(handle_), &run_host_callback, cb.get());
  (void)cb.release();  // the driver owns the call now; run_host_callback frees it
  detail::after_submit(core, native_stream(handle_), "cuLaunchHostFunc", [this] { return name(); });
}

static_assert(sizeof(StreamAttributeValue) == sizeof(CUstreamAttrValue));
static_assert(static_cast<int>(StreamAttribute::priority) == CU_LAUNCH_ATTRIBUTE_PRIORITY);
static_assert(static_cast<int>(StreamAttribute::access_policy_window) == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW);

void StreamRef::set_attribute(StreamAttribute attribute, const StreamAttributeValue& value) const {
  const auto& core = *detail::Access::core(context_.device());
  detail::check_stream_view(*this, "StreamRef::set_attribute");
  core.require_function(detail::Api::k_cuStreamSetAttribute, "StreamRef::set_attribute");
  detail::ContextScope scope(core, context_.address(), "StreamRef::set_attribute");
  CUstreamAttrValue v;
  std::memcpy(&v, value.bytes, sizeof v);
  DRVSHIM_TRY(core, cuStreamSetAttribute, fmt::format("{}, attribute {}", name(), static_cast<int>(attribute)),
              native_stream(handle_), static_cast<CUstreamAttrID>(attribute), &v);
}

StreamAttributeValue StreamRef::attribute(StreamAttribute attribute) const {
  const auto& core = *detail::Access::core(context_.device());
  detail::check_stream_view(*this, "StreamRef::attribute");
  core.require_function(detail::Api::k_cuStreamGetAttribute, "StreamRef::attribute");
  detail::ContextScope scope(core, context_.address(), "StreamRef::attribute");
  CUstreamAttrValue v{};
  DRVSHIM_TRY(core, cuStreamGetAttribute, fmt::format("{}, attribute {}", name(), static_cast<int>(attribute)),
              native_stream(handle_), static_cast<CUstreamAttrID>(attribute), &v);
  StreamAttributeValue out;
  std::memcpy(out.bytes, &v, sizeof v);
  return out;
}

void StreamRef::attach_memory(std::uint64_t address, std::size_t bytes, MemoryAttach attach) const {
  const auto& core = *detail::Access::core(context_.device());
  detail::check_stream_view(*this, "StreamRef::attach_memory");
  core.require_function(detail::Api::k_cuStreamAttachMemAsync, "StreamRef::attach_memory");
  detail::ContextScope scope(core, context_.address(), "StreamRef::attach_memory");
  DRVSHIM_TRY(core, cuStreamAttachMemAsync,
              fmt::format("{}, managed memory 0x{:x} ({} bytes), flags {}", name(), address, bytes,
                          static_cast<unsigned>(attach)),
              native_stream(handle_), static_cast<CUdeviceptr>(address), bytes, static_cast<unsigned>(attach));
}

Stream::Stream(ContextRef context, std::uintptr_t handle, StreamFlags flags, int priority) noexcept
    : handle_({std::move(context), handle, detail::new_stream_id(), flags, priority}) {}

Stream Stream::create(const ContextRef& context, StreamFlags flags, int priority) {
  const StreamPriorityRange range = stream_priority_range(context);
  if (priority < range.greatest || priority > range.least) {
    throw InvalidArgumentError("Stream::create",
                               fmt::format("priority {} is outside the device's range [{} (highest), {} (lowest)]",
                                           priority, range.greatest, range.least),
                               "lower numbers are higher priority; use stream_priority_range(context)");
  }
  const auto& core = *detail::Access::core(context.device());
  detail::ContextScope scope(core, context.address(), "Stream::create");
  CUstream stream = nullptr;
  DRVSHIM_TRY(core, cuStreamCreateWithPriority,
              fmt::format("device {}, flags {}, priority {}", context.device().ordinal(), static_cast<unsigned>(flags),
                          priority),
              &stream, static_cast<unsigned>(flags), priority);
  return Stream(context, reinterpret_cast<std::uintptr_t>(stream), flags, priority);
}

Stream Stream::adopt(const ContextRef& context, std::uintptr_t handle, StreamFlags flags, int priority) {
  if (handle <= 0x2) {
    throw InvalidArgumentError("Stream::adopt", fmt::format("stream 0x{:x} is a default stream", handle),
                               "adopt a stream from cuStreamCreate; the default streams are never destroyed");
  }
  return Stream(context, handle, flags, priority);
}

StreamFlags StreamRef::flags() const {
  const auto& core = *detail::Access::core(context_.device());
  core.require_function(detail::Api::k_cuStreamGetFlags, "StreamRef::flags");
  detail::ContextScope scope(core, context_.address(), "StreamRef::flags");
  unsigned flags = 0;
  DRVSHIM_TRY(core, cuStreamGetFlags, name(), reinterpret_cast<CUstream>(handle_), &flags);
  return static_cast<StreamFlags>(flags);
}

int StreamRef::priority() const {
  const auto& core = *detail::Access::core(context_.device());
  core.require_function(detail::Api::k_cuStreamGetPriority, "StreamRef::priority");
  detail::ContextScope scope(core, context_.address(), "StreamRef::priority");
  int priority = 0;
  DRVSHIM_TRY(core, cuStreamGetPriority, name(), reinterpret_cast<CUstream>(handle_), &priority);
  return priority;
}

std::uint64_t StreamRef::id() const {
  const auto& core = *detail::Access::core(context_.device());
  core.require_function(detail::Api::k_cuStreamGetId, "StreamRef::id");
  detail::ContextScope scope(core, context_.address(), "StreamRef::id");
  unsigned long long id = 0;
  DRVSHIM_TRY(core, cuStreamGetId, name(), reinterpret_cast<CUstream>(handle_), &id);
  return id;
}

StreamRef StreamRef::wrap(const ContextRef& context, std::uintptr_t handle) noexcept {
  if (handle == 0 || handle == 0x1) return legacy_default(context);
  if (handle == 0x2) return per_thread_default(context);
  return StreamRef(context, handle, 0);
}

Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;
Stream::~Stream() = default;

StreamRef Stream::ref() const& {
  const auto& v = handle_.get();
  if (v.handle == 0) {
    throw InvalidArgumentError("Stream::ref", "this Stream is empty (moved from or destroyed)",
                               "create one with Stream::create()");
  }
  return StreamRef(v.context, v.handle, v.id);
}

std::uintptr_t Stream::detach() noexcept {
  const auto v = handle_.forget();
  detail::retire_stream_id(v.id);
  return v.handle;
}

void Stream::destroy() { handle_.release(); }

Status Stream::destroy(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void StreamTraits::release_or_throw(value_type& v) {
  const auto handle = v.handle;
  detail::Access::core(v.context.device())->ensure_usable("Stream::destroy");  // the no-throw twin skips silently
  const Status s = release(v);
  if (!s.ok()) {
    raise(*detail::Access::core(v.context.device()), s.code(), s.api(), fmt::format("stream 0x{:x}", handle), {},
          v.context.address());
  }
}

Status StreamTraits::release(value_type& v) noexcept {
  const auto handle = std::exchange(v.handle, 0);
  retire_stream_id(v.id);
  const auto& core = *detail::Access::core(v.context.device());
  if (!core.cleanup_allowed_in(v.context.address())) return {};
  // cuStreamDestroy needs no current context and does not wait for queued work.
  {
    std::lock_guard<std::mutex> lock(core.callback_mutex);
    core.callback_errors.erase(detail::Access::key(StreamRef(v.context, handle, v.id)));
    // Views made with StreamRef::wrap key their state by the handle: a later
    // stream at this handle must not inherit it.
    core.callback_errors.erase(detail::Access::key(StreamRef(v.context, handle, 0)));
  }
  const CUresult r = DRVSHIM_CU(core, cuStreamDestroy, native_stream(handle));
  core.note_result(r);
  core.bury_spent_callbacks();
  if (r != CUDA_SUCCESS) {
    logf(log::Level::warn, "cuStreamDestroy(0x{:x}) failed with {} ({})", handle, result_name(static_cast<int>(r)),
         static_cast<int>(r));
  }
  return Status("cuStreamDestroy", static_cast<int>(r));
}

}  // namespace detail

}  // namespace drvshim
