// SPDX-License-Identifier: Apache-2.0
#include <drvshim/async_device_buffer.hpp>
#include <drvshim/error.hpp>

#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "memory/memory_errors.hpp"
#include "seam/access.hpp"
#include "seam/core.hpp"
#include "seam/core_of.hpp"
#include "support/view_checks.hpp"

namespace drvshim {

AsyncDeviceBuffer::AsyncDeviceBuffer(StreamRef stream, DevicePtr address, std::size_t bytes) noexcept
    : handle_({std::move(stream), address, bytes, detail::new_owner_id()}) {}

AsyncDeviceBuffer AsyncDeviceBuffer::allocate(const StreamRef& stream, std::size_t bytes) {
  detail::require_bytes("AsyncDeviceBuffer::allocate", bytes);
  detail::check_stream_view(stream, "AsyncDeviceBuffer::allocate");
  const ContextRef& context = stream.context();
  const auto& core = detail::core_of(context);
  core.require_function(detail::Api::k_cuMemAllocAsync, "AsyncDeviceBuffer::allocate");
  core.require_function(detail::Api::k_cuMemFreeAsync, "AsyncDeviceBuffer::allocate");
  const AttributeValue pools = context.device().attribute(DeviceAttribute::memory_pools_supported);
  if (!pools.is_true()) {
    throw UnsupportedError("cuMemAllocAsync",
                           fmt::format("device {} has no memory pools: its memory_pools_supported attribute is {}",
                                       context.device().ordinal(), pools.to_string()),
                           detail::context_text(context), "use DeviceBuffer::allocate (cuMemAlloc)");
  }
  detail::ContextScope scope(core, context.address(), "AsyncDeviceBuffer::allocate");
  CUdeviceptr ptr = 0;
  const auto objects = [&] {
    return fmt::format("{}, {}, {}", detail::bytes_text(bytes), stream.name(), detail::context_text(context));
  };
  const CUresult r = DRVSHIM_CU(core, cuMemAllocAsync, &ptr, bytes, reinterpret_cast<CUstream>(stream.native()));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) detail::raise_out_of_memory(context, "cuMemAllocAsync", objects(), bytes, true);
  if (r != CUDA_SUCCESS) detail::raise(core, static_cast<int>(r), "cuMemAllocAsync", objects());
  return AsyncDeviceBuffer(stream, ptr, bytes);
}

AsyncDeviceBuffer::AsyncDeviceBuffer(AsyncDeviceBuffer&&) noexcept = default;
AsyncDeviceBuffer& AsyncDeviceBuffer::operator=(AsyncDeviceBuffer&&) noexcept = default;
AsyncDeviceBuffer::~AsyncDeviceBuffer() = default;

void AsyncDeviceBuffer::check_view_of(std::size_t element_size) const {
  detail::check_whole_view("AsyncDeviceBuffer::as", "this AsyncDeviceBuffer is empty (moved from or freed)",
                           handle_.held(), size(), element_size);
}

DevicePtr AsyncDeviceBuffer::detach() noexcept {
  const auto v = handle_.forget();
  detail::retire_owner_id(v.id);
  return v.address;
}

void AsyncDeviceBuffer::free() { handle_.release(); }

void AsyncDeviceBuffer::free(const StreamRef& on) {
  if (handle_.held()) detail::AsyncDeviceBufferTraits::release_on(handle_.get(), on);
}

Status AsyncDeviceBuffer::free(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void AsyncDeviceBufferTraits::release_or_throw(value_type& v) { release_on(v, v.stream); }

void AsyncDeviceBufferTraits::release_on(value_type& v, const StreamRef& on) {
  // Refused before the driver is called (a dead stream view, a forked child,
  // a host function, a context that cannot be made current): the buffer
  // stays held, and a later free or the destructor still returns it. Past
  // that it is not held, also when the driver fails: the pool's state of
  // that memory is then unknown.
  check_stream_view(on, "AsyncDeviceBuffer::free");
  const auto& core = core_of(v.stream.context());
  core.ensure_usable("AsyncDeviceBuffer::free");
  if (!core.cleanup_allowed_in(v.stream.context().address())) {
    // A poisoned context or a driver shutting down: left to the driver, as
    // every owner's free does (the no-throw twin below does the same).
    v.address = 0;
    retire_owner_id(v.id);
    return;
  }
  ContextScope scope(core, on.context().address(), "AsyncDeviceBuffer::free");
  const auto address = std::exchange(v.address, 0);
  retire_owner_id(v.id);
  DRVSHIM_TRY(core, cuMemFreeAsync, fmt::format("0x{:x}, {}", address, on.name()), address,
              reinterpret_cast<CUstream>(on.native()));
}

Status AsyncDeviceBufferTraits::release(value_type& v) noexcept {
  const auto address = std::exchange(v.address, 0);
  retire_owner_id(v.id);
  const auto& core = core_of(v.stream.context());
  if (!core.cleanup_allowed_in(v.stream.context().address())) return {};
  try {
    ContextScope scope(core, v.stream.context().address(), "AsyncDeviceBuffer::free");
    // Its stream may be gone: the legacy default stream then orders the free.
    const std::uintptr_t on = stream_alive(detail::Access::owner_id(v.stream))
                                  ? v.stream.native()
                                  : StreamRef::legacy_default(v.stream.context()).native();
    const CUresult r = DRVSHIM_CU(core, cuMemFreeAsync, address, reinterpret_cast<CUstream>(on));
    core.note_result(r);
    if (r != CUDA_SUCCESS) {
      logf(log::Level::warn, "cuMemFreeAsync(0x{:x}) failed with {} ({})", address, result_name(static_cast<int>(r)),
           static_cast<int>(r));
    }
    return Status("cuMemFreeAsync", static_cast<int>(r));
  } catch (const Error& e) {
    logf(log::Level::warn, "AsyncDeviceBuffer::free(0x{:x}): {}", address, e.what());
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  }
}

}  // namespace detail
}  // namespace drvshim
