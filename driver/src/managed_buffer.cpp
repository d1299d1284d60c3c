#include <drvshim/managed_buffer.hpp>
#include <drvshim/error.hpp>

#include <utility>

#include "context_scope.hpp"
#include "core.hpp"
#include "core_of.hpp"
#include "log_internal.hpp"
#include "memory_errors.hpp"

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
    : context_(std::move(context)), address_(address), bytes_(bytes) {}

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
    detail::raise_out_of_memory(context, "cuMemAllocManaged", fmt::format("{}, {}", detail::bytes_text(bytes), detail::context_text(context)), bytes,
                        true);
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(core, static_cast<int>(r), "cuMemAllocManaged", fmt::format("{}, {}", detail::bytes_text(bytes), detail::context_text(context)));
  }
  return ManagedBuffer(context, ptr, bytes);
}

ManagedBuffer::ManagedBuffer(ManagedBuffer&& o) noexcept
    : context_(o.context_), address_(std::exchange(o.address_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

ManagedBuffer& ManagedBuffer::operator=(ManagedBuffer&& o) noexcept {
  if (this != &o) {
    (void)free(std::nothrow);
    context_ = o.context_;
    address_ = std::exchange(o.address_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

ManagedBuffer::~ManagedBuffer() { (void)free(std::nothrow); }

void ManagedBuffer::free() {
  if (address_ != 0) detail::core_of(context_).ensure_usable("ManagedBuffer::free");
  const Status s = free(std::nothrow);
  if (!s.ok()) detail::raise(detail::core_of(context_), s.code(), s.api(), detail::context_text(context_), {}, context_.address());
}

Status ManagedBuffer::free(std::nothrow_t) noexcept {
  if (address_ == 0) return {};
  const auto address = std::exchange(address_, 0);
  const auto& core = detail::core_of(context_);
  if (!core.cleanup_allowed_in(context_.address())) return {};
  try {
    detail::ContextScope scope(core, context_.address(), "ManagedBuffer::free");
    const CUresult r = DRVSHIM_CU(core, cuMemFree, address);
    core.note_result(r);
    return Status("cuMemFree", static_cast<int>(r));
  } catch (const Error& e) {
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  }
}

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
