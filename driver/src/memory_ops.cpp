// Memory operations beyond the owners of memory.cpp, which the CUDA
// Runtime's calls stand on: pitched allocations, 2D copies and fills, the
// managed-memory hints (advise, prefetch), the flags of page-locked memory.
#include <drvshim/driver.hpp>
#include <drvshim/memory.hpp>

#include "context_scope.hpp"
#include "core.hpp"
#include "log_internal.hpp"

namespace drvshim {
namespace {

const detail::DriverCore& core_of(const ContextRef& ctx) noexcept { return *ctx.device().core(); }

std::string dev_text(const ContextRef& ctx) {
  return fmt::format("device {}, context 0x{:x}", ctx.device().ordinal(), ctx.address());
}

CUmemorytype memory_type(MemorySide side) noexcept {
  switch (side) {
    case MemorySide::host: return CU_MEMORYTYPE_HOST;
    case MemorySide::device: return CU_MEMORYTYPE_DEVICE;
    case MemorySide::unified: return CU_MEMORYTYPE_UNIFIED;
  }
  return CU_MEMORYTYPE_UNIFIED;
}

CUmemLocation native_location(MemoryLocation location) noexcept {
  CUmemLocation out{};
  out.type = static_cast<CUmemLocationType>(location.type);
  out.id = location.id;
  return out;
}

static_assert(static_cast<int>(MemoryLocation::Type::host_numa_current) == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT);
static_assert(static_cast<int>(MemoryAdvice::unset_accessed_by) == CU_MEM_ADVISE_UNSET_ACCESSED_BY);

}  // namespace

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
  const auto& core = core_of(context);
  core.require_function(detail::Api::k_cuMemAllocPitch, "allocate_pitched");
  CUdeviceptr ptr = 0;
  std::size_t pitch = 0;
  {
    detail::ContextScope scope(core, context.address(), "allocate_pitched");
    DRVSHIM_TRY(core, cuMemAllocPitch, fmt::format("{} rows of {} bytes, {}", height, width_bytes, dev_text(context)), &ptr,
                &pitch, width_bytes, height, element_bytes);
  }
  return PitchedAllocation{DeviceBuffer(context, ptr, pitch * height), pitch};
}

void copy_2d(const ContextRef& context, const Copy2D& copy, const StreamRef* stream) {
  const char* api = stream != nullptr ? "copy_2d (async)" : "copy_2d";
  if (copy.height == 0 || copy.width_bytes == 0) return;
  if (copy.src == nullptr || copy.dst == nullptr) throw InvalidArgumentError(api, "the source or destination is null");
  if (copy.src_pitch < copy.width_bytes || copy.dst_pitch < copy.width_bytes) {
    throw InvalidArgumentError(api, fmt::format("rows of {} bytes do not fit the pitches (source {}, destination {})",
                                                copy.width_bytes, copy.src_pitch, copy.dst_pitch),
                               "each pitch must be at least the width in bytes");
  }
  const auto& core = core_of(context);
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = memory_type(copy.src_side);
  c.srcHost = copy.src;
  c.srcDevice = reinterpret_cast<CUdeviceptr>(copy.src);
  c.srcPitch = copy.src_pitch;
  c.dstMemoryType = memory_type(copy.dst_side);
  c.dstHost = copy.dst;
  c.dstDevice = reinterpret_cast<CUdeviceptr>(copy.dst);
  c.dstPitch = copy.dst_pitch;
  c.WidthInBytes = copy.width_bytes;
  c.Height = copy.height;
  const auto objects = [&] {
    return fmt::format("{} rows of {} bytes from {} (pitch {}) to {} (pitch {}), {}", copy.height, copy.width_bytes,
                       copy.src, copy.src_pitch, copy.dst, copy.dst_pitch, dev_text(context));
  };
  detail::ContextScope scope(core, context.address(), api);
  if (stream == nullptr) {
    core.require_function(detail::Api::k_cuMemcpy2D, api);
    DRVSHIM_TRY(core, cuMemcpy2D, objects(), &c);
  } else {
    core.require_function(detail::Api::k_cuMemcpy2DAsync, api);
    const auto s = reinterpret_cast<CUstream>(stream->native());
    DRVSHIM_TRY(core, cuMemcpy2DAsync, objects() + ", " + stream->name(), &c, s);
    detail::after_submit(core, s, "cuMemcpy2DAsync", objects);
  }
}

void fill_2d(const ContextRef& context, DevicePtr dst, std::size_t pitch, std::uint8_t value, std::size_t width_bytes,
             std::size_t height, const StreamRef* stream) {
  const char* api = stream != nullptr ? "fill_2d (async)" : "fill_2d";
  if (height == 0 || width_bytes == 0) return;
  if (pitch < width_bytes) {
    throw InvalidArgumentError(api, fmt::format("rows of {} bytes do not fit the pitch {}", width_bytes, pitch));
  }
  const auto& core = core_of(context);
  const auto objects = [&] {
    return fmt::format("{} rows of {} bytes at 0x{:x} (pitch {}), {}", height, width_bytes, dst, pitch, dev_text(context));
  };
  detail::ContextScope scope(core, context.address(), api);
  if (stream == nullptr) {
    core.require_function(detail::Api::k_cuMemsetD2D8, api);
    DRVSHIM_TRY(core, cuMemsetD2D8, objects(), dst, pitch, value, width_bytes, height);
  } else {
    core.require_function(detail::Api::k_cuMemsetD2D8Async, api);
    const auto s = reinterpret_cast<CUstream>(stream->native());
    DRVSHIM_TRY(core, cuMemsetD2D8Async, objects(), dst, pitch, value, width_bytes, height, s);
    detail::after_submit(core, s, "cuMemsetD2D8Async", objects);
  }
}

void advise(const ContextRef& context, DevicePtr address, std::size_t bytes, MemoryAdvice advice,
            MemoryLocation location) {
  const auto& core = core_of(context);
  core.require_function(detail::Api::k_cuMemAdvise, "advise");
  detail::ContextScope scope(core, context.address(), "advise");
  DRVSHIM_TRY(core, cuMemAdvise,
              fmt::format("managed memory 0x{:x} ({} bytes), advice {}, location type {} id {}", address, bytes,
                          static_cast<int>(advice), static_cast<int>(location.type), location.id),
              address, bytes, static_cast<CUmem_advise>(advice), native_location(location));
}

void prefetch_async(const StreamRef& stream, DevicePtr address, std::size_t bytes, MemoryLocation location) {
  const ContextRef& context = stream.context();
  const auto& core = core_of(context);
  core.require_function(detail::Api::k_cuMemPrefetchAsync, "prefetch_async");
  detail::ContextScope scope(core, context.address(), "prefetch_async");
  const auto s = reinterpret_cast<CUstream>(stream.native());
  const auto objects = [&] {
    return fmt::format("managed memory 0x{:x} ({} bytes) to location type {} id {}, {}", address, bytes,
                       static_cast<int>(location.type), location.id, stream.name());
  };
  DRVSHIM_TRY(core, cuMemPrefetchAsync, objects(), address, bytes, native_location(location), 0u, s);
  detail::after_submit(core, s, "cuMemPrefetchAsync", objects);
}

unsigned host_allocation_flags(const ContextRef& context, const void* host) {
  const auto& core = core_of(context);
  core.require_function(detail::Api::k_cuMemHostGetFlags, "host_allocation_flags");
  detail::ContextScope scope(core, context.address(), "host_allocation_flags");
  unsigned flags = 0;
  DRVSHIM_TRY(core, cuMemHostGetFlags, fmt::format("host memory {}, {}", host, dev_text(context)), &flags,
              const_cast<void*>(host));
  return flags;
}

}  // namespace drvshim
