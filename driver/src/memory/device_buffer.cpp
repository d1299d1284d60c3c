// SPDX-License-Identifier: Apache-2.0
#include <drvshim/device_buffer.hpp>
#include <drvshim/error.hpp>
#include <drvshim/stream.hpp>

#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "memory/memory_errors.hpp"
#include "seam/core.hpp"
#include "seam/core_of.hpp"
#include "support/view_checks.hpp"

namespace drvshim {

DeviceBuffer::DeviceBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept
    : handle_({std::move(context), address, bytes, detail::new_owner_id()}) {}

DeviceBuffer DeviceBuffer::allocate(const ContextRef& context, std::size_t bytes) {
  detail::require_bytes("DeviceBuffer::allocate", bytes);
  const auto& core = detail::core_of(context);
  detail::ContextScope scope(core, context.address(), "DeviceBuffer::allocate");
  CUdeviceptr ptr = 0;
  const CUresult r = DRVSHIM_CU(core, cuMemAlloc, &ptr, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    detail::raise_out_of_memory(context, "cuMemAlloc",
                                fmt::format("{}, {}", detail::bytes_text(bytes), detail::context_text(context)), bytes,
                                true);
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(core, static_cast<int>(r), "cuMemAlloc",
                  fmt::format("{}, {}", detail::bytes_text(bytes), detail::context_text(context)));
  }
  return DeviceBuffer(context, ptr, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept = default;
DeviceBuffer::~DeviceBuffer() = default;

void DeviceBuffer::check_view_of(std::size_t element_size) const {
  detail::check_whole_view("DeviceBuffer::as", "this DeviceBuffer is empty (moved from or freed)", handle_.held(),
                           size(), element_size);
}

DevicePtr DeviceBuffer::detach() noexcept {
  const auto v = handle_.forget();
  detail::retire_owner_id(v.id);
  return v.address;
}

void DeviceBuffer::free() { handle_.release(); }

Status DeviceBuffer::free(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void DeviceBufferTraits::release_or_throw(value_type& v) {
  const auto address = v.address;
  core_of(v.context).ensure_usable("DeviceBuffer::free");  // the no-throw twin skips silently
  const Status s = release(v);
  if (!s.ok()) {
    raise(core_of(v.context), s.code(), s.api(), fmt::format("device 0x{:x}, {}", address, context_text(v.context)), {},
          v.context.address());
  }
}

Status DeviceBufferTraits::release(value_type& v) noexcept {
  const auto address = std::exchange(v.address, 0);
  retire_owner_id(v.id);
  const auto& core = core_of(v.context);
  if (!core.cleanup_allowed_in(v.context.address())) return {};
  try {
    ContextScope scope(core, v.context.address(), "DeviceBuffer::free");
    const CUresult r = DRVSHIM_CU(core, cuMemFree, address);
    core.note_result(r);
    if (r != CUDA_SUCCESS) {
      logf(log::Level::warn, "cuMemFree(0x{:x}) failed with {} ({})", address, result_name(static_cast<int>(r)),
           static_cast<int>(r));
    }
    return Status("cuMemFree", static_cast<int>(r));
  } catch (const Error& e) {
    logf(log::Level::warn, "DeviceBuffer::free(0x{:x}): {}", address, e.what());
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  }
}

}  // namespace detail

PitchedAllocation allocate_pitched(const ContextRef& context, std::size_t width_bytes, std::size_t height,
                                   unsigned element_bytes) {
  if (width_bytes == 0 || height == 0) {
    throw InvalidArgumentError("allocate_pitched",
                               fmt::format("a pitched allocation of {} x {} bytes was requested", width_bytes, height),
                               "ask for at least one row of one byte");
  }
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) {
    throw InvalidArgumentError("allocate_pitched", fmt::format("element size {} is not 4, 8 or 16", element_bytes));
  }
  const auto& core = detail::core_of(context);
  core.require_function(detail::Api::k_cuMemAllocPitch, "allocate_pitched");
  CUdeviceptr ptr = 0;
  std::size_t pitch = 0;
  {
    detail::ContextScope scope(core, context.address(), "allocate_pitched");
    DRVSHIM_TRY(core, cuMemAllocPitch,
                fmt::format("{} rows of {} bytes, {}", height, width_bytes, detail::context_text(context)), &ptr,
                &pitch, width_bytes, height, element_bytes);
  }
  return PitchedAllocation{DeviceBuffer(context, ptr, pitch * height), pitch};
}

void free_device_memory(const ContextRef& context, std::uint64_t address) {
  const auto& core = detail::core_of(context);
  detail::ContextScope scope(core, context.address(), "free_device_memory");
  DRVSHIM_TRY(core, cuMemFree, fmt::format("device memory 0x{:x}, {}", address, detail::context_text(context)),
              static_cast<CUdeviceptr>(address));
}

void free_device_memory(const StreamRef& stream, std::uint64_t address) {
  const auto& core = detail::core_of(stream.context());
  core.require_function(detail::Api::k_cuMemFreeAsync, "free_device_memory (stream-ordered)");
  detail::ContextScope scope(core, stream.context().address(), "free_device_memory");
  DRVSHIM_TRY(core, cuMemFreeAsync, fmt::format("device memory 0x{:x} on {}", address, stream.name()),
              static_cast<CUdeviceptr>(address), reinterpret_cast<CUstream>(stream.native()));
}

}  // namespace drvshim
