#include <drvshim/async_device_buffer.hpp>
#include <drvshim/error.hpp>

#include <utility>

#include "context_scope.hpp"
#include "core.hpp"
#include "core_of.hpp"
#include "log_internal.hpp"
#include "memory_errors.hpp"
#include "view_checks.hpp"

namespace drvshim {

AsyncDeviceBuffer::AsyncDeviceBuffer(StreamRef stream, DevicePtr address, std::size_t bytes) noexcept
    : stream_(std::move(stream)), address_(address), bytes_(bytes) {}

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
  const auto objects = [&] { return fmt::format("{}, {}, {}", detail::bytes_text(bytes), stream.name(), detail::context_text(context)); };
  const CUresult r = DRVSHIM_CU(core, cuMemAllocAsync, &ptr, bytes, reinterpret_cast<CUstream>(stream.native()));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) detail::raise_out_of_memory(context, "cuMemAllocAsync", objects(), bytes, true);
  if (r != CUDA_SUCCESS) detail::raise(core, static_cast<int>(r), "cuMemAllocAsync", objects());
  return AsyncDeviceBuffer(stream, ptr, bytes);
}

AsyncDeviceBuffer::AsyncDeviceBuffer(AsyncDeviceBuffer&& o) noexcept
    : stream_(o.stream_), address_(std::exchange(o.address_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

AsyncDeviceBuffer& AsyncDeviceBuffer::operator=(AsyncDeviceBuffer&& o) noexcept {
  if (this != &o) {
    (void)free(std::nothrow);
    stream_ = o.stream_;
    address_ = std::exchange(o.address_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

AsyncDeviceBuffer::~AsyncDeviceBuffer() { (void)free(std::nothrow); }

void AsyncDeviceBuffer::free() { free(stream_); }

void AsyncDeviceBuffer::free(const StreamRef& on) {
  if (address_ == 0) return;
  detail::check_stream_view(on, "AsyncDeviceBuffer::free");
  const auto& core = detail::core_of(stream_.context());
  detail::ContextScope scope(core, on.context().address(), "AsyncDeviceBuffer::free");
  DRVSHIM_TRY(core, cuMemFreeAsync, fmt::format("0x{:x}, {}", address_, on.name()), address_,
              reinterpret_cast<CUstream>(on.native()));
  address_ = 0;
}

Status AsyncDeviceBuffer::free(std::nothrow_t) noexcept {
  if (address_ == 0) return {};
  const auto address = std::exchange(address_, 0);
  const auto& core = detail::core_of(stream_.context());
  if (!core.cleanup_allowed_in(stream_.context().address())) return {};
  try {
    detail::ContextScope scope(core, stream_.context().address(), "AsyncDeviceBuffer::free");
    // Its stream may be gone (known in debug builds): the legacy default stream then orders the free.
    const std::uintptr_t on = detail::owner_alive(stream_.owner_id())
                                  ? stream_.native()
                                  : StreamRef::legacy_default(stream_.context()).native();
    const CUresult r = DRVSHIM_CU(core, cuMemFreeAsync, address, reinterpret_cast<CUstream>(on));
    core.note_result(r);
    return Status("cuMemFreeAsync", static_cast<int>(r));
  } catch (const Error& e) {
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  }
}
}  // namespace drvshim
