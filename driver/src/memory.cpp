#include <drvshim/driver.hpp>
#include <drvshim/memory.hpp>

#include <mutex>
#include <utility>

#include "context_scope.hpp"
#include "core.hpp"
#include "flags_text.hpp"
#include "log_internal.hpp"
#include "trace_internal.hpp"
#include "view_checks.hpp"

namespace drvshim {
namespace {

const detail::DriverCore& core_of(const ContextRef& ctx) noexcept { return *ctx.device().core(); }

CUstream native_stream(const StreamRef* s) noexcept { return reinterpret_cast<CUstream>(s->native()); }

std::string bytes_text(std::size_t n) {
  if (n >= (std::size_t{1} << 20)) return fmt::format("{} bytes ({:.2f} MiB)", n, static_cast<double>(n) / (1u << 20));
  return fmt::format("{} bytes", n);
}

// Throws the typed out-of-memory error, asking the device how much it has left.
[[noreturn]] void raise_out_of_memory(const ContextRef& ctx, const char* api, std::string objects, std::size_t bytes,
                                      bool device_memory) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (device_memory) {
    try {
      const MemoryInfo info = ctx.memory_info();
      free_bytes = info.free;
      total_bytes = info.total;
    } catch (const Error&) {
      // The numbers are a courtesy; the allocation failure is the error.
    }
  }
  throw OutOfMemoryError(
      ErrorDetails{api, CUDA_ERROR_OUT_OF_MEMORY, std::move(objects),
                   device_memory ? "free device memory, or use smaller or stream-ordered allocations"
                                 : "pin less host memory at once (pinned memory is limited by RAM and ulimit -l)",
                   false},
      bytes, free_bytes, total_bytes);
}

void require_bytes(const char* api, std::size_t bytes) {
  if (bytes == 0) {
    throw InvalidArgumentError(api, "an allocation of 0 bytes was requested",
                               "ask for at least one byte; the driver itself answers CUDA_ERROR_INVALID_VALUE");
  }
}

std::string dev_text(const ContextRef& ctx) {
  return fmt::format("device {}, context 0x{:x}", ctx.device().ordinal(), ctx.address());
}

}  // namespace

bool view_checks_enabled() noexcept {
#ifdef DRVSHIM_CHECK_VIEWS
  return true;
#else
  return false;
#endif
}

// ---- copies and fills -----------------------------------------------------------------------

namespace detail {

void check_view([[maybe_unused]] std::uint64_t id, [[maybe_unused]] const char* api) {
#ifdef DRVSHIM_CHECK_VIEWS
  if (!owner_alive(id)) {
    throw InvalidArgumentError(api,
                               "a device view was used after the buffer that owned it was freed (or the module "
                               "whose global it views was unloaded)",
                               "keep the DeviceBuffer (or Module) alive while its views are in use");
  }
#endif
}

void throw_subspan(std::size_t offset, std::size_t count, std::size_t size) {
  throw InvalidArgumentError("DeviceSpan::subspan",
                             fmt::format("elements [{}, {}+{}) are outside a view of {} elements", offset, offset,
                                         count, size));
}

namespace {
void check_copy(const char* api, std::size_t bytes, std::size_t dst_bytes, const void* host) {
  if (bytes > dst_bytes) {
    throw InvalidArgumentError(api, fmt::format("copying {} into a destination of {}: the source is longer",
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
  const auto objects = [&] { return fmt::format("{} to device 0x{:x}, {}", bytes_text(bytes), dst, dev_text(ctx)); };
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
  const auto objects = [&] { return fmt::format("{} from device 0x{:x}, {}", bytes_text(bytes), src, dev_text(ctx)); };
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
    return fmt::format("{} from 0x{:x} to 0x{:x}, {}", bytes_text(bytes), src, dst, dev_text(ctx));
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
    return fmt::format("{} elements of {} bytes at 0x{:x}, {}", count, element_size, dst, dev_text(ctx));
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
    default:
      throw InvalidArgumentError(api, fmt::format("element size {} is not 1, 2 or 4", element_size));
  }
  if (stream != nullptr) after_submit(core, s, api, objects);
}

}  // namespace detail

// ---- DeviceBuffer -----------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept
    : context_(std::move(context)), address_(address), bytes_(bytes), id_(detail::new_owner_id()) {}

DeviceBuffer DeviceBuffer::allocate(const ContextRef& context, std::size_t bytes) {
  require_bytes("DeviceBuffer::allocate", bytes);
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "DeviceBuffer::allocate");
  CUdeviceptr ptr = 0;
  const CUresult r = DRVSHIM_CU(core, cuMemAlloc, &ptr, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    raise_out_of_memory(context, "cuMemAlloc", fmt::format("{}, {}", bytes_text(bytes), dev_text(context)), bytes, true);
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(core, static_cast<int>(r), "cuMemAlloc", fmt::format("{}, {}", bytes_text(bytes), dev_text(context)));
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
                                                               bytes_text(bytes_), element_size));
  }
}

void DeviceBuffer::free() {
  const auto address = address_;
  if (address != 0) core_of(context_).ensure_usable("DeviceBuffer::free");  // the no-throw twin skips silently
  const Status s = free(std::nothrow);
  if (!s.ok()) {
    detail::raise(core_of(context_), s.code(), s.api(), fmt::format("device 0x{:x}, {}", address, dev_text(context_)), {},
                  context_.address());
  }
}

Status DeviceBuffer::free(std::nothrow_t) noexcept {
  if (address_ == 0) return {};
  const auto address = std::exchange(address_, 0);
  detail::retire_owner_id(id_);
  const auto& core = core_of(context_);
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

// ---- pinned and mapped host memory ----------------------------------------------------------

std::string to_string(HostAllocFlags flags) {
  return detail::flags_text(static_cast<unsigned>(flags),
                            {{0x1, "portable"}, {0x2, "device_map"}, {0x4, "write_combined"}});
}

PinnedBuffer::PinnedBuffer(ContextRef context, void* data, std::size_t bytes, HostAllocFlags flags) noexcept
    : context_(std::move(context)), data_(data), bytes_(bytes), flags_(flags) {}

PinnedBuffer PinnedBuffer::allocate(const ContextRef& context, std::size_t bytes, HostAllocFlags flags) {
  require_bytes("PinnedBuffer::allocate", bytes);
  if ((static_cast<unsigned>(flags) & ~0x7u) != 0) {
    throw InvalidArgumentError("PinnedBuffer::allocate", fmt::format("unknown flag bits in {}", to_string(flags)),
                               "use HostAllocFlags::portable, device_map and write_combined");
  }
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "PinnedBuffer::allocate");
  void* p = nullptr;
  const auto objects = [&] { return fmt::format("{}, flags {}, {}", bytes_text(bytes), to_string(flags), dev_text(context)); };
  const CUresult r = DRVSHIM_CU(core, cuMemHostAlloc, &p, bytes, static_cast<unsigned>(flags));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) raise_out_of_memory(context, "cuMemHostAlloc", objects(), bytes, false);
  if (r != CUDA_SUCCESS) detail::raise(core, static_cast<int>(r), "cuMemHostAlloc", objects());
  return PinnedBuffer(context, p, bytes, flags);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : context_(o.context_), data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
      flags_(o.flags_) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    (void)free(std::nothrow);
    context_ = o.context_;
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    flags_ = o.flags_;
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { (void)free(std::nothrow); }

void PinnedBuffer::check_view_of(std::size_t element_size) const {
  if (data_ == nullptr) throw InvalidArgumentError("PinnedBuffer::as", "this buffer is empty (moved from or freed)");
  if (bytes_ % element_size != 0) {
    throw InvalidArgumentError("PinnedBuffer::as", fmt::format("{} is not a multiple of the element size {}",
                                                               bytes_text(bytes_), element_size));
  }
}

void PinnedBuffer::free() {
  if (data_ != nullptr) core_of(context_).ensure_usable("PinnedBuffer::free");
  const Status s = free(std::nothrow);
  if (!s.ok()) detail::raise(core_of(context_), s.code(), s.api(), dev_text(context_), {}, context_.address());
}

Status PinnedBuffer::free(std::nothrow_t) noexcept {
  if (data_ == nullptr) return {};
  void* p = std::exchange(data_, nullptr);
  const auto& core = core_of(context_);
  if (!core.cleanup_allowed_in(context_.address())) return {};
  // cuMemFreeHost needs no current context.
  const CUresult r = DRVSHIM_CU(core, cuMemFreeHost, p);
  core.note_result(r);
  if (r != CUDA_SUCCESS) {
    detail::logf(log::Level::warn, "cuMemFreeHost({}) failed with {} ({})", p, result_name(static_cast<int>(r)),
                 static_cast<int>(r));
  }
  return Status("cuMemFreeHost", static_cast<int>(r));
}

MappedBuffer::MappedBuffer(PinnedBuffer&& pinned, DevicePtr device) noexcept
    : PinnedBuffer(std::move(pinned)), device_(device) {}

MappedBuffer MappedBuffer::allocate(const ContextRef& context, std::size_t bytes, HostAllocFlags extra) {
  const AttributeValue can_map = context.device().attribute(DeviceAttribute::can_map_host_memory);
  if (!can_map.is_true()) {
    throw UnsupportedError("MappedBuffer::allocate",
                           fmt::format("device {} ({}) cannot map host memory: its can_map_host_memory attribute is {}",
                                       context.device().ordinal(), context.device().name(), can_map.to_string()),
                           dev_text(context),
                           "copy through a PinnedBuffer with explicit copies instead of zero-copy access");
  }
  PinnedBuffer pinned = PinnedBuffer::allocate(context, bytes, extra | HostAllocFlags::device_map);
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "MappedBuffer::allocate");
  CUdeviceptr device = 0;
  DRVSHIM_TRY(core, cuMemHostGetDevicePointer, fmt::format("host {}, {}", pinned.data(), dev_text(context)), &device,
              pinned.data(), 0u);
  return MappedBuffer(std::move(pinned), device);
}

// ---- registered host ranges -------------------------------------------------------------------

std::string to_string(HostRegisterFlags flags) {
  return detail::flags_text(static_cast<unsigned>(flags),
                            {{0x1, "portable"}, {0x2, "device_map"}, {0x4, "io_memory"}, {0x8, "read_only"}});
}

RegisteredRange::RegisteredRange(ContextRef context, void* data, std::size_t bytes, HostRegisterFlags flags) noexcept
    : context_(std::move(context)), data_(data), bytes_(bytes), flags_(flags) {}

RegisteredRange RegisteredRange::register_range(const ContextRef& context, void* data, std::size_t bytes,
                                                HostRegisterFlags flags) {
  const char* api = "RegisteredRange::register_range";
  if (data == nullptr) throw InvalidArgumentError(api, "the host pointer is null");
  if (bytes == 0) {
    throw InvalidArgumentError(api, "a range of 0 bytes cannot be registered",
                               "register at least one byte; the driver itself answers CUDA_ERROR_INVALID_VALUE");
  }
  if ((static_cast<unsigned>(flags) & ~0xFu) != 0) {
    throw InvalidArgumentError(api, fmt::format("unknown flag bits in {}", to_string(flags)));
  }
  const Device& dev = context.device();
  const AttributeValue supported = dev.attribute(DeviceAttribute::host_register_supported);
  if (!supported.is_true()) {
    const bool can_map = dev.attribute(DeviceAttribute::can_map_host_memory).is_true();
    throw UnsupportedError(
        "cuMemHostRegister",
        fmt::format("host registration is not supported on device {} ({}): its host_register_supported attribute is {}",
                    dev.ordinal(), dev.name(), supported.to_string()),
        fmt::format("{} bytes at {}, flags {}, {}", bytes, data, to_string(flags), dev_text(context)),
        can_map ? "allocate the memory as mapped pinned memory instead (drvshim::MappedBuffer, cuMemHostAlloc with "
                  "DEVICEMAP): zero-copy works on this device (can_map_host_memory 1)"
                : "allocate a drvshim::PinnedBuffer and copy through it");
  }
  if (has(flags, HostRegisterFlags::read_only)) {
    const AttributeValue ro = dev.attribute(DeviceAttribute::read_only_host_register_supported);
    if (!ro.is_true()) {
      throw UnsupportedError(
          "cuMemHostRegister",
          fmt::format("read-only host registration is not supported on device {} ({}): its "
                      "read_only_host_register_supported attribute is {}",
                      dev.ordinal(), dev.name(), ro.to_string()),
          dev_text(context), "register without HostRegisterFlags::read_only");
    }
  }
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), api);
  DRVSHIM_TRY(core, cuMemHostRegister,
              fmt::format("{} at {}, flags {}, {}", bytes_text(bytes), data, to_string(flags), dev_text(context)), data,
              bytes, static_cast<unsigned>(flags));
  return RegisteredRange(context, data, bytes, flags);
}

RegisteredRange::RegisteredRange(RegisteredRange&& o) noexcept
    : context_(o.context_), data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)),
      flags_(o.flags_) {}

RegisteredRange& RegisteredRange::operator=(RegisteredRange&& o) noexcept {
  if (this != &o) {
    (void)unregister(std::nothrow);
    context_ = o.context_;
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    flags_ = o.flags_;
  }
  return *this;
}

RegisteredRange::~RegisteredRange() { (void)unregister(std::nothrow); }

DevicePtr RegisteredRange::device_address() const {
  if (data_ == nullptr) throw InvalidArgumentError("RegisteredRange::device_address", "this range is empty");
  if (!has(flags_, HostRegisterFlags::device_map) &&
      !context_.device().attribute(DeviceAttribute::unified_addressing).is_true()) {
    throw InvalidArgumentError("RegisteredRange::device_address",
                               "the range was registered without DEVICEMAP on a device without unified addressing",
                               "register with HostRegisterFlags::device_map");
  }
  const auto& core = core_of(context_);
  detail::ContextScope scope(core, context_.address(), "RegisteredRange::device_address");
  CUdeviceptr device = 0;
  DRVSHIM_TRY(core, cuMemHostGetDevicePointer, fmt::format("host {}, {}", data_, dev_text(context_)), &device, data_,
              0u);
  return device;
}

void RegisteredRange::unregister() {
  if (data_ != nullptr) core_of(context_).ensure_usable("RegisteredRange::unregister");
  const Status s = unregister(std::nothrow);
  if (!s.ok()) detail::raise(core_of(context_), s.code(), s.api(), dev_text(context_), {}, context_.address());
}

Status RegisteredRange::unregister(std::nothrow_t) noexcept {
  if (data_ == nullptr) return {};
  void* p = std::exchange(data_, nullptr);
  if (!core_of(context_).cleanup_allowed_in(context_.address())) return {};
  return unregister_host_range(context_, p);
}

Status unregister_host_range(const ContextRef& context, void* data) noexcept {
  const auto& core = core_of(context);
  if (!core.cleanup_allowed_in(context.address())) return {};
  try {
    detail::ContextScope scope(core, context.address(), "unregister_host_range");
    const CUresult r = DRVSHIM_CU(core, cuMemHostUnregister, data);
    core.note_result(r);
    if (r != CUDA_SUCCESS) {
      detail::logf(log::Level::warn, "cuMemHostUnregister({}) failed with {} ({})", data,
                   result_name(static_cast<int>(r)), static_cast<int>(r));
    }
    return Status("cuMemHostUnregister", static_cast<int>(r));
  } catch (const Error& e) {
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  }
}

// ---- managed and stream-ordered memory -----------------------------------------------------------

ManagedBuffer::ManagedBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept
    : context_(std::move(context)), address_(address), bytes_(bytes) {}

ManagedBuffer ManagedBuffer::allocate(const ContextRef& context, std::size_t bytes, MemoryAttach attach) {
  require_bytes("ManagedBuffer::allocate", bytes);
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
                           dev_text(context), "use a DeviceBuffer with explicit copies");
  }
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "ManagedBuffer::allocate");
  CUdeviceptr ptr = 0;
  const CUresult r = DRVSHIM_CU(core, cuMemAllocManaged, &ptr, bytes, static_cast<unsigned>(attach));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    raise_out_of_memory(context, "cuMemAllocManaged", fmt::format("{}, {}", bytes_text(bytes), dev_text(context)), bytes,
                        true);
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(core, static_cast<int>(r), "cuMemAllocManaged", fmt::format("{}, {}", bytes_text(bytes), dev_text(context)));
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
  if (address_ != 0) core_of(context_).ensure_usable("ManagedBuffer::free");
  const Status s = free(std::nothrow);
  if (!s.ok()) detail::raise(core_of(context_), s.code(), s.api(), dev_text(context_), {}, context_.address());
}

Status ManagedBuffer::free(std::nothrow_t) noexcept {
  if (address_ == 0) return {};
  const auto address = std::exchange(address_, 0);
  const auto& core = core_of(context_);
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

AsyncDeviceBuffer::AsyncDeviceBuffer(StreamRef stream, DevicePtr address, std::size_t bytes) noexcept
    : stream_(std::move(stream)), address_(address), bytes_(bytes) {}

AsyncDeviceBuffer AsyncDeviceBuffer::allocate(const StreamRef& stream, std::size_t bytes) {
  require_bytes("AsyncDeviceBuffer::allocate", bytes);
  detail::check_stream_view(stream, "AsyncDeviceBuffer::allocate");
  const ContextRef& context = stream.context();
  const auto& core = core_of(context);
  core.require_function(detail::Api::k_cuMemAllocAsync, "AsyncDeviceBuffer::allocate");
  core.require_function(detail::Api::k_cuMemFreeAsync, "AsyncDeviceBuffer::allocate");
  const AttributeValue pools = context.device().attribute(DeviceAttribute::memory_pools_supported);
  if (!pools.is_true()) {
    throw UnsupportedError("cuMemAllocAsync",
                           fmt::format("device {} has no memory pools: its memory_pools_supported attribute is {}",
                                       context.device().ordinal(), pools.to_string()),
                           dev_text(context), "use DeviceBuffer::allocate (cuMemAlloc)");
  }
  detail::ContextScope scope(core, context.address(), "AsyncDeviceBuffer::allocate");
  CUdeviceptr ptr = 0;
  const auto objects = [&] { return fmt::format("{}, {}, {}", bytes_text(bytes), stream.name(), dev_text(context)); };
  const CUresult r = DRVSHIM_CU(core, cuMemAllocAsync, &ptr, bytes, reinterpret_cast<CUstream>(stream.native()));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) raise_out_of_memory(context, "cuMemAllocAsync", objects(), bytes, true);
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
  const auto& core = core_of(stream_.context());
  detail::ContextScope scope(core, on.context().address(), "AsyncDeviceBuffer::free");
  DRVSHIM_TRY(core, cuMemFreeAsync, fmt::format("0x{:x}, {}", address_, on.name()), address_,
              reinterpret_cast<CUstream>(on.native()));
  address_ = 0;
}

Status AsyncDeviceBuffer::free(std::nothrow_t) noexcept {
  if (address_ == 0) return {};
  const auto address = std::exchange(address_, 0);
  const auto& core = core_of(stream_.context());
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

// ---- pointer inspection ------------------------------------------------------------------------

const char* to_string(MemoryKind kind) noexcept {
  switch (kind) {
    case MemoryKind::pageable_host: return "pageable host memory";
    case MemoryKind::page_locked_host: return "page-locked host memory";
    case MemoryKind::device: return "device memory";
    case MemoryKind::managed: return "managed memory";
    case MemoryKind::array: return "array";
  }
  return "unknown";
}

std::string PointerInfo::to_string() const {
  if (kind == MemoryKind::pageable_host) return "pageable host memory (unknown to the driver)";
  return fmt::format("{} of device {} in context 0x{:x}, allocation 0x{:x}+{}, device address 0x{:x}, host address {}",
                     drvshim::to_string(kind), device_ordinal, context, range_start, range_size, device_address,
                     host_address);
}

namespace {

// Attribute values of `address`; each slot is 8 zeroed bytes, wide enough for
// every attribute's type, so narrower types (bool, int) read back correctly.
template <std::size_t N>
void query_attributes(const detail::DriverCore& core, DevicePtr address, const CUpointer_attribute (&attrs)[N],
                      std::uint64_t (&values)[N]) {
  void* data[N];
  for (std::size_t i = 0; i < N; ++i) data[i] = &values[i];
  CUpointer_attribute list[N];
  std::copy(std::begin(attrs), std::end(attrs), list);
  DRVSHIM_TRY(core, cuPointerGetAttributes, fmt::format("address 0x{:x}", address), static_cast<unsigned>(N), list,
              data, address);
}

}  // namespace

PointerInfo inspect_pointer(const Driver& driver, DevicePtr address) {
  const auto& core = *driver.core();
  core.require_init("inspect_pointer");
  const CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT,     CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                       CU_POINTER_ATTRIBUTE_IS_MANAGED,  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                       CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  std::uint64_t values[6] = {};
  values[3] = 0xffffffffu;  // device ordinal: -1 unless written
  query_attributes(core, address, attrs, values);
  PointerInfo info;
  const auto type = static_cast<unsigned>(values[1]);
  if (values[2] != 0 || type == CU_MEMORYTYPE_UNIFIED) {
    info.kind = MemoryKind::managed;
  } else if (type == CU_MEMORYTYPE_HOST) {
    info.kind = MemoryKind::page_locked_host;
  } else if (type == CU_MEMORYTYPE_DEVICE) {
    info.kind = MemoryKind::device;
  } else if (type == CU_MEMORYTYPE_ARRAY) {
    info.kind = MemoryKind::array;
  } else {
    info.kind = MemoryKind::pageable_host;
  }
  info.context = static_cast<std::uintptr_t>(values[0]);
  info.device_ordinal = static_cast<int>(static_cast<std::int32_t>(values[3] & 0xffffffffu));
  info.range_start = values[4];
  info.range_size = static_cast<std::size_t>(values[5]);
  if (info.context != 0) {
    // The device and host addresses are reported "in the current context"
    // (0 without one, seen on the H200): ask again inside the pointer's own context.
    detail::ContextScope scope(core, info.context, "inspect_pointer");
    const CUpointer_attribute where[] = {CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER};
    std::uint64_t addresses[2] = {};
    query_attributes(core, address, where, addresses);
    info.device_address = addresses[0];
    info.host_address = reinterpret_cast<void*>(static_cast<std::uintptr_t>(addresses[1]));
  }
  return info;
}

namespace detail {
// One attribute, no context switch: the staging engine asks this on every large copy.
bool host_is_page_locked(const DriverCore& core, const void* address) {
  const CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
  std::uint64_t values[1] = {};
  query_attributes(core, static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(address)), attrs, values);
  return static_cast<unsigned>(values[0]) == CU_MEMORYTYPE_HOST;
}
}  // namespace detail

PointerInfo inspect_pointer(const Driver& driver, const void* address) {
  return inspect_pointer(driver, static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(address)));
}

}  // namespace drvshim
