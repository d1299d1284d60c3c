// SPDX-License-Identifier: Apache-2.0
// Copies and fills of device memory: the untyped operations behind the typed
// templates of copy.hpp, and the 2D forms.
#include <drvshim/copy.hpp>
#include <drvshim/error.hpp>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "memory/memory_errors.hpp"
#include "seam/core.hpp"
#include "seam/core_of.hpp"
#include "support/view_checks.hpp"

namespace drvshim {
namespace detail {
namespace {

CUstream native_stream(const StreamRef* s) noexcept { return reinterpret_cast<CUstream>(s->native()); }

CUmemorytype memory_type(MemorySide side) noexcept {
  switch (side) {
    case MemorySide::host: return CU_MEMORYTYPE_HOST;
    case MemorySide::device: return CU_MEMORYTYPE_DEVICE;
    case MemorySide::unified: return CU_MEMORYTYPE_UNIFIED;
  }
  return CU_MEMORYTYPE_UNIFIED;
}

void check_copy(const char* api, std::size_t bytes, std::size_t dst_bytes, const void* host) {
  if (bytes > dst_bytes) {
    throw InvalidArgumentError(api,
                               fmt::format("copying {} into a destination of {}: the source is longer",
                                           bytes_text(bytes), bytes_text(dst_bytes)),
                               "copy a subspan of the source, or allocate a larger destination");
  }
  if (bytes != 0 && host == nullptr) throw InvalidArgumentError(api, "the host pointer is null");
}
}  // namespace

void copy_to_device(const ContextRef& ctx, DevicePtr dst, std::size_t dst_bytes, std::uint64_t dst_id, const void* src,
                    std::size_t bytes, const StreamRef* stream) {
  const char* api = stream != nullptr ? "copy_async (host to device)" : "copy (host to device)";
  check_copy(api, bytes, dst_bytes, src);
  check_view(dst_id, api);
  if (stream != nullptr) check_stream_view(*stream, api);
  if (bytes == 0) return;
  const auto& core = core_of(ctx);
  ContextScope scope(core, ctx.address(), api);
  const auto objects = [&] {
    return fmt::format("{} to device 0x{:x}, {}", bytes_text(bytes), dst, context_text(ctx));
  };
  if (stream == nullptr) {
    DRVSHIM_TRY(core, cuMemcpyHtoD, objects(), dst, src, bytes);
  } else {
    DRVSHIM_TRY(core, cuMemcpyHtoDAsync, objects() + ", " + stream->name(), dst, src, bytes, native_stream(stream));
    after_submit(core, native_stream(stream), "cuMemcpyHtoDAsync", objects);
  }
}

void copy_to_host(const ContextRef& ctx, void* dst, std::size_t dst_bytes, DevicePtr src, std::size_t bytes,
                  std::uint64_t src_id, const StreamRef* stream) {
  const char* api = stream != nullptr ? "copy_async (device to host)" : "copy (device to host)";
  check_copy(api, bytes, dst_bytes, dst);
  check_view(src_id, api);
  if (stream != nullptr) check_stream_view(*stream, api);
  if (bytes == 0) return;
  const auto& core = core_of(ctx);
  ContextScope scope(core, ctx.address(), api);
  const auto objects = [&] {
    return fmt::format("{} from device 0x{:x}, {}", bytes_text(bytes), src, context_text(ctx));
  };
  if (stream == nullptr) {
    DRVSHIM_TRY(core, cuMemcpyDtoH, objects(), dst, src, bytes);
  } else {
    DRVSHIM_TRY(core, cuMemcpyDtoHAsync, objects() + ", " + stream->name(), dst, src, bytes, native_stream(stream));
    after_submit(core, native_stream(stream), "cuMemcpyDtoHAsync", objects);
  }
}

void copy_device_to_device(const ContextRef& ctx, DevicePtr dst, std::size_t dst_bytes, std::uint64_t dst_id,
                           DevicePtr src, std::size_t bytes, std::uint64_t src_id, const StreamRef* stream) {
  const char* api = stream != nullptr ? "copy_async (device to device)" : "copy (device to device)";
  check_copy(api, bytes, dst_bytes, reinterpret_cast<const void*>(1));
  check_view(dst_id, api);
  check_view(src_id, api);
  if (stream != nullptr) check_stream_view(*stream, api);
  if (bytes == 0) return;
  const auto& core = core_of(ctx);
  ContextScope scope(core, ctx.address(), api);
  const auto objects = [&] {
    return fmt::format("{} from 0x{:x} to 0x{:x}, {}", bytes_text(bytes), src, dst, context_text(ctx));
  };
  if (stream == nullptr) {
    DRVSHIM_TRY(core, cuMemcpyDtoD, objects(), dst, src, bytes);
  } else {
    DRVSHIM_TRY(core, cuMemcpyDtoDAsync, objects() + ", " + stream->name(), dst, src, bytes, native_stream(stream));
    after_submit(core, native_stream(stream), "cuMemcpyDtoDAsync", objects);
  }
}

void fill_device(const ContextRef& ctx, DevicePtr dst, std::size_t count, std::size_t element_size,
                 std::uint32_t pattern, std::uint64_t id, const StreamRef* stream) {
  const char* api = stream != nullptr ? "fill_async" : "fill";
  check_view(id, api);
  if (stream != nullptr) check_stream_view(*stream, api);
  if (count == 0) return;
  const auto& core = core_of(ctx);
  ContextScope scope(core, ctx.address(), api);
  const auto objects = [&] {
    return fmt::format("{} elements of {} bytes at 0x{:x}, {}", count, element_size, dst, context_text(ctx));
  };
  const CUstream s = stream != nullptr ? native_stream(stream) : nullptr;
  switch (element_size) {
    case 1:
      if (stream == nullptr) {
        DRVSHIM_TRY(core, cuMemsetD8, objects(), dst, static_cast<unsigned char>(pattern), count);
      } else {
        DRVSHIM_TRY(core, cuMemsetD8Async, objects(), dst, static_cast<unsigned char>(pattern), count, s);
      }
      break;
    case 2:
      if (stream == nullptr) {
        DRVSHIM_TRY(core, cuMemsetD16, objects(), dst, static_cast<unsigned short>(pattern), count);
      } else {
        DRVSHIM_TRY(core, cuMemsetD16Async, objects(), dst, static_cast<unsigned short>(pattern), count, s);
      }
      break;
    case 4:
      if (stream == nullptr) {
        DRVSHIM_TRY(core, cuMemsetD32, objects(), dst, pattern, count);
      } else {
        DRVSHIM_TRY(core, cuMemsetD32Async, objects(), dst, pattern, count, s);
      }
      break;
    default: throw InvalidArgumentError(api, fmt::format("element size {} is not 1, 2 or 4", element_size));
  }
  if (stream != nullptr) after_submit(core, s, api, objects);
}

}  // namespace detail

// ---- 2D ------------------------------------------------------------------------------------------

void copy_2d(const ContextRef& context, const Copy2D& copy, const StreamRef* stream) {
  const char* api = stream != nullptr ? "copy_2d (async)" : "copy_2d";
  if (copy.height == 0 || copy.width_bytes == 0) return;
  if (copy.src == nullptr || copy.dst == nullptr) throw InvalidArgumentError(api, "the source or destination is null");
  if (copy.src_pitch < copy.width_bytes || copy.dst_pitch < copy.width_bytes) {
    throw InvalidArgumentError(api,
                               fmt::format("rows of {} bytes do not fit the pitches (source {}, destination {})",
                                           copy.width_bytes, copy.src_pitch, copy.dst_pitch),
                               "each pitch must be at least the width in bytes");
  }
  const auto& core = detail::core_of(context);
  CUDA_MEMCPY2D c{};
  c.srcMemoryType = detail::memory_type(copy.src_side);
  c.srcHost = copy.src;
  c.srcDevice = reinterpret_cast<CUdeviceptr>(copy.src);
  c.srcPitch = copy.src_pitch;
  c.dstMemoryType = detail::memory_type(copy.dst_side);
  c.dstHost = copy.dst;
  c.dstDevice = reinterpret_cast<CUdeviceptr>(copy.dst);
  c.dstPitch = copy.dst_pitch;
  c.WidthInBytes = copy.width_bytes;
  c.Height = copy.height;
  const auto objects = [&] {
    return fmt::format("{} rows of {} bytes from {} (pitch {}) to {} (pitch {}), {}", copy.height, copy.width_bytes,
                       copy.src, copy.src_pitch, copy.dst, copy.dst_pitch, detail::context_text(context));
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
  const auto& core = detail::core_of(context);
  const auto objects = [&] {
    return fmt::format("{} rows of {} bytes at 0x{:x} (pitch {}), {}", height, width_bytes, dst, pitch,
                       detail::context_text(context));
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

}  // namespace drvshim
