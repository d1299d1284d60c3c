#include <drvshim/stream.hpp>

#include <utility>

#include "context_scope.hpp"
#include "core.hpp"
#include "log_internal.hpp"

namespace drvshim {
namespace {

CUstream native_stream(std::uintptr_t h) noexcept { return reinterpret_cast<CUstream>(h); }

}  // namespace

StreamPriorityRange stream_priority_range(const ContextRef& context) {
  const auto& core = *context.device().core();
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

void StreamRef::synchronize() const {
  const auto& core = *context_.device().core();
  detail::ContextScope scope(core, context_.address(), "StreamRef::synchronize");
  DRVSHIM_TRY(core, cuStreamSynchronize, name(), native_stream(handle_));
}

bool StreamRef::ready() const {
  const auto& core = *context_.device().core();
  detail::ContextScope scope(core, context_.address(), "StreamRef::ready");
  const CUresult r = DRVSHIM_CU(core, cuStreamQuery, native_stream(handle_));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  detail::raise(core, static_cast<int>(r), "cuStreamQuery", name());
}

Stream::Stream(ContextRef context, std::uintptr_t handle, StreamFlags flags, int priority) noexcept
    : context_(std::move(context)), handle_(handle), flags_(flags), priority_(priority) {}

Stream Stream::create(const ContextRef& context, StreamFlags flags, int priority) {
  const StreamPriorityRange range = stream_priority_range(context);
  if (priority < range.greatest || priority > range.least) {
    throw InvalidArgumentError("Stream::create",
                               fmt::format("priority {} is outside the device's range [{} (highest), {} (lowest)]",
                                           priority, range.greatest, range.least),
                               "lower numbers are higher priority; use stream_priority_range(context)");
  }
  const auto& core = *context.device().core();
  detail::ContextScope scope(core, context.address(), "Stream::create");
  CUstream stream = nullptr;
  DRVSHIM_TRY(core, cuStreamCreateWithPriority,
              fmt::format("device {}, flags {}, priority {}", context.device().ordinal(), static_cast<unsigned>(flags),
                          priority),
              &stream, static_cast<unsigned>(flags), priority);
  return Stream(context, reinterpret_cast<std::uintptr_t>(stream), flags, priority);
}

Stream::Stream(Stream&& other) noexcept
    : context_(other.context_), handle_(std::exchange(other.handle_, 0)), flags_(other.flags_),
      priority_(other.priority_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    (void)destroy(std::nothrow);
    context_ = other.context_;
    handle_ = std::exchange(other.handle_, 0);
    flags_ = other.flags_;
    priority_ = other.priority_;
  }
  return *this;
}

Stream::~Stream() { (void)destroy(std::nothrow); }

StreamRef Stream::ref() const {
  if (handle_ == 0) {
    throw InvalidArgumentError("Stream::ref", "this Stream is empty (moved from or destroyed)",
                               "create one with Stream::create()");
  }
  return StreamRef(context_, handle_);
}

void Stream::destroy() {
  const auto handle = handle_;
  const Status s = destroy(std::nothrow);
  if (!s.ok()) detail::raise(*context_.device().core(), s.code(), s.api(), fmt::format("stream 0x{:x}", handle));
}

Status Stream::destroy(std::nothrow_t) noexcept {
  if (handle_ == 0) return {};
  const auto handle = std::exchange(handle_, 0);
  const auto& core = *context_.device().core();
  if (!core.cleanup_allowed()) return {};
  // cuStreamDestroy needs no current context and does not wait for queued work.
  const CUresult r = DRVSHIM_CU(core, cuStreamDestroy, native_stream(handle));
  core.note_result(r);
  if (r != CUDA_SUCCESS) {
    detail::logf(log::Level::warn, "cuStreamDestroy(0x{:x}) failed with {} ({})", handle,
                 result_name(static_cast<int>(r)), static_cast<int>(r));
  }
  return Status("cuStreamDestroy", static_cast<int>(r));
}

}  // namespace drvshim
