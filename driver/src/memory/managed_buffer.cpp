// SPDX-License-Identifier: Apache-2.0
#include <drvshim/error.hpp>
#include <drvshim/managed_buffer.hpp>

#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "memory/memory_errors.hpp"
#include "seam/core.hpp"
#include "seam/core_of.hpp"
#include "support/view_checks.hpp"

namespace drvshim {
namespace {

CUmemLocation native_location(MemoryLocation location) noexcept {
  CUmemLocation out{};
  out.type = static_cast<CUmemLocationType>(location.type);
  out.id = location.id;
  return out;
}

static_assert(static_cast<int>(MemoryLocation::Type::host_numa_current) == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT);
static_assert(static_cast<int>(MemoryAdvice::unset_accessed_by) == CU_MEM_ADVISE_UNSET_ACCESSED_BY);

}  // namespace

ManagedBuffer::ManagedBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept
    : handle_({std::move(context), address, bytes, detail::new_owner_id()}) {}

ManagedBuffer ManagedBuffer::allocate(const ContextRef& context, std::size_t bytes, MemoryAttach attach) {
  detail::require_bytes("ManagedBuffer::allocate", bytes);
  if (attach != MemoryAttach::global && attach != MemoryAttach::host) {
    throw InvalidArgumentError("ManagedBuffer::allocate",
                               fmt::format("attach flags 0x{:x}: an allocation is attached globally or to the host",
                                           static_cast<unsigned>(attach)),
                               "attach to one stream afterwards with StreamRef::attach_memory");
  }
  const AttributeValue managed = context.device().attribute(DeviceAttribute::managed_memory);
  if (!managed.is_true()) {
    throw UnsupportedError("cuMemAllocManaged",
                           fmt::format("device {} does not support managed memory: its managed_memory attribute is {}",
                                       context.device().ordinal(), managed.to_string()),
                           detail::context_text(context), "use a DeviceBuffer with explicit copies");
  }
  const auto& core = detail::core_of(context);
  detail::ContextScope scope(core, context.address(), "ManagedBuffer::allocate");
  CUdeviceptr ptr = 0;
  const CUresult r = DRVSHIM_CU(core, cuMemAllocManaged, &ptr, bytes, static_cast<unsigned>(attach));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    detail::raise_out_of_memory(context, "cuMemAllocManaged",
                                fmt::format("{}, {}", detail::bytes_text(bytes), detail::context_text(context)), bytes,
                                true);
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(core, static_cast<int>(r), "cuMemAllocManaged",
                  fmt::format("{}, {}", detail::bytes_text(bytes), detail::context_text(context)));
  }
  return ManagedBuffer(context, ptr, bytes);
}

ManagedBuffer::ManagedBuffer(ManagedBuffer&&) noexcept = default;
ManagedBuffer& ManagedBuffer::operator=(ManagedBuffer&&) noexcept = default;
ManagedBuffer::~ManagedBuffer() = default;

void ManagedBuffer::check_view_of(std::size_t element_size) const {
  detail::check_whole_view("ManagedBuffer::as", "this ManagedBuffer is empty (moved from or freed)", handle_.held(),
                           size(), element_size);
}

DevicePtr ManagedBuffer::detach() noexcept {
  const auto v = handle_.forget();
  detail::retire_owner_id(v.id);
  return v.address;
}

void ManagedBuffer::free() { handle_.release(); }

Status ManagedBuffer::free(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void ManagedBufferTraits::release_or_throw(value_type& v) {
  core_of(v.context).ensure_usable("ManagedBuffer::free");
  const Status s = release(v);
  if (!s.ok()) raise(core_of(v.context), s.code(), s.api(), context_text(v.context), {}, v.context.address());
}

Status ManagedBufferTraits::release(value_type& v) noexcept {
  const auto address = std::exchange(v.address, 0);
  retire_owner_id(v.id);
  const auto& core = core_of(v.context);
  if (!core.cleanup_allowed_in(v.context.address())) return {};
  try {
    ContextScope scope(core, v.context.address(), "ManagedBuffer::free");
    const CUresult r = DRVSHIM_CU(core, cuMemFree, address);
    core.note_result(r);
    return Status("cuMemFree", static_cast<int>(r));
  } catch (const Error& e) {
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  }
}

}  // namespace detail

void advise(const ContextRef& context, DevicePtr address, std::size_t bytes, MemoryAdvice advice,
            MemoryLocation location) {
  const auto& core = detail::core_of(context);
  core.require_function(detail::Api::k_cuMemAdvise, "advise");
  detail::ContextScope scope(core, context.address(), "advise");
  DRVSHIM_TRY(core, cuMemAdvise,
              fmt::format("managed memory 0x{:x} ({} bytes), advice {}, location type {} id {}", address, bytes,
                          static_cast<int>(advice), static_cast<int>(location.type), location.id),
              address, bytes, static_cast<CUmem_advise>(advice), native_location(location));
}

void prefetch_async(const StreamRef& stream, DevicePtr address, std::size_t bytes, MemoryLocation location) {
  const ContextRef& context = stream.context();
  const auto& core = detail::core_of(context);
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

}  // namespace drvshim
