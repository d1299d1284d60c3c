#include <drvshim/device_buffer.hpp>
#include <drvshim/error.hpp>

#include <utility>

#include "context_scope.hpp"
#include "core.hpp"
#include "core_of.hpp"
#include "log_internal.hpp"
#include "memory_errors.hpp"
#include "view_checks.hpp"

namespace drvshim {

DeviceBuffer::DeviceBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept
    : context_(std::move(context)), address_(address), bytes_(bytes), id_(detail::new_owner_id()) {}

DeviceBuffer DeviceBuffer::allocate(const ContextRef& context, std::size_t bytes) {
  detail::require_bytes("DeviceBuffer::allocate", bytes);
  const auto& core = detail::core_of(context);
  detail::ContextScope scope(core, context.address(), "DeviceBuffer::allocate");
  CUdeviceptr ptr = 0;
  const CUresult r = DRVSHIM_CU(core, cuMemAlloc, &ptr, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    detail::raise_out_of_memory(context, "cuMemAlloc", fmt::format("{}, {}", detail::bytes_text(bytes), detail::context_text(context)), bytes, true);
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(core, static_cast<int>(r), "cuMemAlloc", fmt::format("{}, {}", detail::bytes_text(bytes), detail::context_text(context)));
  }
  return DeviceBuffer(context, ptr, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : context_(o.context_), address_(std::exchange(o.address_, 0)), bytes_(std::exchange(o.bytes_, 0)), id_(o.id_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    (void)free(std::nothrow);
    context_ = o.context_;
    address_ = std::exchange(o.address_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
    id_ = o.id_;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { (void)free(std::nothrow); }

void DeviceBuffer::check_view_of(std::size_t element_size) const {
  if (address_ == 0) throw InvalidArgumentError("DeviceBuffer::as", "this DeviceBuffer is empty (moved from or freed)");
  if (bytes_ % element_size != 0) {
    throw InvalidArgumentError("DeviceBuffer::as", fmt::format("{} is not a multiple of the element size {}",
                                                               detail::bytes_text(bytes_), element_size));
  }
}

void DeviceBuffer::free() {
  const auto address = address_;
  if (address != 0) detail::core_of(context_).ensure_usable("DeviceBuffer::free");  // the no-throw twin skips silently
  const Status s = free(std::nothrow);
  if (!s.ok()) {
    detail::raise(detail::core_of(context_), s.code(), s.api(), fmt::format("device 0x{:x}, {}", address, detail::context_text(context_)), {},
                  context_.address());
  }
}

Status DeviceBuffer::free(std::nothrow_t) noexcept {
  if (address_ == 0) return {};
  const auto address = std::exchange(address_, 0);
  detail::retire_owner_id(id_);
  const auto& core = detail::core_of(context_);
  if (!core.cleanup_allowed_in(context_.address())) return {};
  try {
    detail::ContextScope scope(core, context_.address(), "DeviceBuffer::free");
    const CUresult r = DRVSHIM_CU(core, cuMemFree, address);
    core.note_result(r);
    if (r != CUDA_SUCCESS) {
      detail::logf(log::Level::warn, "cuMemFree(0x{:x}) failed with {} ({})", address,
                   result_name(static_cast<int>(r)), static_cast<int>(r));
    }
    return Status("cuMemFree", static_cast<int>(r));
  } catch (const Error& e) {
    detail::logf(log::Level::warn, "DeviceBuffer::free(0x{:x}): {}", address, e.what());
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  }
}

PitchedAllocation allocate_pitched(const ContextRef& context, std::size_t width_bytes, std::size_t height,
                                   unsigned element_bytes) {
  if (width_bytes == 0 || height == 0) {
    throw InvalidArgumentError("allocate_pitched", fmt::format("a pitched allocation of {} x {} bytes was requested",
                                                               width_bytes, height),
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
    DRVSHIM_TRY(core, cuMemAllocPitch, fmt::format("{} rows of {} bytes, {}", height, width_bytes, detail::context_text(context)), &ptr,
                &pitch, width_bytes, height, element_bytes);
  }
  return PitchedAllocation{DeviceBuffer(context, ptr, pitch * height), pitch};
}

}  // namespace drvshim
