// SPDX-License-Identifier: Apache-2.0
#include <drvshim/error.hpp>
#include <drvshim/pinned_buffer.hpp>

#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "memory/memory_errors.hpp"
#include "seam/core.hpp"
#include "seam/core_of.hpp"

namespace drvshim {

PinnedBuffer::PinnedBuffer(ContextRef context, void* data, std::size_t bytes, HostAllocFlags flags) noexcept
    : handle_({std::move(context), data, bytes, flags}) {}

PinnedBuffer PinnedBuffer::allocate(const ContextRef& context, std::size_t bytes, HostAllocFlags flags) {
  detail::require_bytes("PinnedBuffer::allocate", bytes);
  if ((static_cast<unsigned>(flags) & ~known_flag_bits<HostAllocFlags>()) != 0) {
    throw InvalidArgumentError("PinnedBuffer::allocate", fmt::format("unknown flag bits in {}", to_string(flags)),
                               "use HostAllocFlags::portable, device_map and write_combined");
  }
  const auto& core = detail::core_of(context);
  detail::ContextScope scope(core, context.address(), "PinnedBuffer::allocate");
  void* p = nullptr;
  const auto objects = [&] {
    return fmt::format("{}, flags {}, {}", detail::bytes_text(bytes), to_string(flags), detail::context_text(context));
  };
  const CUresult r = DRVSHIM_CU(core, cuMemHostAlloc, &p, bytes, static_cast<unsigned>(flags));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) detail::raise_out_of_memory(context, "cuMemHostAlloc", objects(), bytes, false);
  if (r != CUDA_SUCCESS) detail::raise(core, static_cast<int>(r), "cuMemHostAlloc", objects());
  return PinnedBuffer(context, p, bytes, flags);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&&) noexcept = default;
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&&) noexcept = default;
PinnedBuffer::~PinnedBuffer() = default;

void PinnedBuffer::check_view_of(std::size_t element_size) const {
  detail::check_whole_view("PinnedBuffer::as", "this buffer is empty (moved from or freed)", handle_.held(), size(),
                           element_size);
}

void* PinnedBuffer::detach() noexcept { return handle_.forget().data; }

void PinnedBuffer::free() { handle_.release(); }

Status PinnedBuffer::free(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void PinnedBufferTraits::release_or_throw(value_type& v) {
  core_of(v.context).ensure_usable("PinnedBuffer::free");
  const Status s = release(v);
  if (!s.ok()) raise(core_of(v.context), s.code(), s.api(), context_text(v.context), {}, v.context.address());
}

Status PinnedBufferTraits::release(value_type& v) noexcept {
  void* p = std::exchange(v.data, nullptr);
  const auto& core = core_of(v.context);
  if (!core.cleanup_allowed_in(v.context.address())) return {};
  // cuMemFreeHost needs no current context.
  const CUresult r = DRVSHIM_CU(core, cuMemFreeHost, p);
  core.note_result(r);
  if (r != CUDA_SUCCESS) {
    logf(log::Level::warn, "cuMemFreeHost({}) failed with {} ({})", p, result_name(static_cast<int>(r)),
         static_cast<int>(r));
  }
  return Status("cuMemFreeHost", static_cast<int>(r));
}

}  // namespace detail

MappedBuffer::MappedBuffer(PinnedBuffer&& pinned, DevicePtr device) noexcept
    : PinnedBuffer(std::move(pinned)), device_(device) {}

MappedBuffer MappedBuffer::allocate(const ContextRef& context, std::size_t bytes, HostAllocFlags extra) {
  const AttributeValue can_map = context.device().attribute(DeviceAttribute::can_map_host_memory);
  if (!can_map.is_true()) {
    throw UnsupportedError("MappedBuffer::allocate",
                           fmt::format("device {} ({}) cannot map host memory: its can_map_host_memory attribute is {}",
                                       context.device().ordinal(), context.device().name(), can_map.to_string()),
                           detail::context_text(context),
                           "copy through a PinnedBuffer with explicit copies instead of zero-copy access");
  }
  PinnedBuffer pinned = PinnedBuffer::allocate(context, bytes, extra | HostAllocFlags::device_map);
  const auto& core = detail::core_of(context);
  detail::ContextScope scope(core, context.address(), "MappedBuffer::allocate");
  CUdeviceptr device = 0;
  DRVSHIM_TRY(core, cuMemHostGetDevicePointer, fmt::format("host {}, {}", pinned.data(), detail::context_text(context)),
              &device, pinned.data(), 0u);
  return MappedBuffer(std::move(pinned), device);
}

unsigned host_allocation_flags(const ContextRef& context, const void* host) {
  const auto& core = detail::core_of(context);
  core.require_function(detail::Api::k_cuMemHostGetFlags, "host_allocation_flags");
  detail::ContextScope scope(core, context.address(), "host_allocation_flags");
  unsigned flags = 0;
  DRVSHIM_TRY(core, cuMemHostGetFlags, fmt::format("host memory {}, {}", host, detail::context_text(context)), &flags,
              const_cast<void*>(host));
  return flags;
}

void free_host_memory(const ContextRef& context, void* host) {
  const auto& core = detail::core_of(context);
  detail::ContextScope scope(core, context.address(), "free_host_memory");
  DRVSHIM_TRY(core, cuMemFreeHost, fmt::format("host memory {}, {}", host, detail::context_text(context)), host);
}

}  // namespace drvshim
