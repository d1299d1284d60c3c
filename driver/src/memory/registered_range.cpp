// SPDX-License-Identifier: Apache-2.0
#include <drvshim/error.hpp>
#include <drvshim/registered_range.hpp>

#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "memory/memory_errors.hpp"
#include "seam/core.hpp"
#include "seam/core_of.hpp"
#include "support/view_checks.hpp"

namespace drvshim {

RegisteredRange::RegisteredRange(ContextRef context, void* data, std::size_t bytes, HostRegisterFlags flags) noexcept
    : handle_({std::move(context), data, bytes, flags, detail::new_owner_id()}) {}

RegisteredRange RegisteredRange::register_range(const ContextRef& context, void* data, std::size_t bytes,
                                                HostRegisterFlags flags) {
  const char* api = "RegisteredRange::register_range";
  if (data == nullptr) throw InvalidArgumentError(api, "the host pointer is null");
  if (bytes == 0) {
    throw InvalidArgumentError(api, "a range of 0 bytes cannot be registered",
                               "register at least one byte; the driver itself answers CUDA_ERROR_INVALID_VALUE");
  }
  if ((static_cast<unsigned>(flags) & ~known_flag_bits<HostRegisterFlags>()) != 0) {
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
        fmt::format("{} bytes at {}, flags {}, {}", bytes, data, to_string(flags), detail::context_text(context)),
        can_map ? "allocate the memory as mapped pinned memory instead (drvshim::MappedBuffer, cuMemHostAlloc with "
                  "DEVICEMAP): zero-copy works on this device (can_map_host_memory 1)"
                : "allocate a drvshim::PinnedBuffer and copy through it");
  }
  if (has(flags, HostRegisterFlags::read_only)) {
    const AttributeValue ro = dev.attribute(DeviceAttribute::read_only_host_register_supported);
    if (!ro.is_true()) {
      throw UnsupportedError("cuMemHostRegister",
                             fmt::format("read-only host registration is not supported on device {} ({}): its "
                                         "read_only_host_register_supported attribute is {}",
                                         dev.ordinal(), dev.name(), ro.to_string()),
                             detail::context_text(context), "register without HostRegisterFlags::read_only");
    }
  }
  const auto& core = detail::core_of(context);
  detail::ContextScope scope(core, context.address(), api);
  DRVSHIM_TRY(core, cuMemHostRegister,
              fmt::format("{} at {}, flags {}, {}", detail::bytes_text(bytes), data, to_string(flags),
                          detail::context_text(context)),
              data, bytes, static_cast<unsigned>(flags));
  return RegisteredRange(context, data, bytes, flags);
}

RegisteredRange::RegisteredRange(RegisteredRange&&) noexcept = default;
RegisteredRange& RegisteredRange::operator=(RegisteredRange&&) noexcept = default;
RegisteredRange::~RegisteredRange() = default;

DevicePtr RegisteredRange::device_address() const {
  const auto& ctx = handle_.get().context;
  void* const host = handle_.get().data;
  if (host == nullptr) throw InvalidArgumentError("RegisteredRange::device_address", "this range is empty");
  if (!has(flags(), HostRegisterFlags::device_map) &&
      !ctx.device().attribute(DeviceAttribute::unified_addressing).is_true()) {
    throw InvalidArgumentError("RegisteredRange::device_address",
                               "the range was registered without DEVICEMAP on a device without unified addressing",
                               "register with HostRegisterFlags::device_map");
  }
  const auto& core = detail::core_of(ctx);
  detail::ContextScope scope(core, ctx.address(), "RegisteredRange::device_address");
  CUdeviceptr device = 0;
  DRVSHIM_TRY(core, cuMemHostGetDevicePointer, fmt::format("host {}, {}", host, detail::context_text(ctx)), &device,
              host, 0u);
  return device;
}

DevicePtr RegisteredRange::device_view_address(std::size_t element_size, std::size_t alignment) const {
  detail::check_whole_view("RegisteredRange::device_as", "this range is empty (moved from or unregistered)",
                           handle_.held(), size(), element_size);
  const DevicePtr address = device_address();
  if (address % alignment != 0) {
    throw InvalidArgumentError("RegisteredRange::device_as",
                               fmt::format("the range starts at device address {:#x}, not aligned to the element's {} "
                                           "bytes",
                                           address, alignment),
                               "register memory aligned for the element type, or view it as bytes (std::byte)");
  }
  return address;
}

void* RegisteredRange::detach() noexcept {
  const auto v = handle_.forget();
  detail::retire_owner_id(v.id);
  return v.data;
}

void RegisteredRange::unregister() { handle_.release(); }

Status RegisteredRange::unregister(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void RegisteredRangeTraits::release_or_throw(value_type& v) {
  core_of(v.context).ensure_usable("RegisteredRange::unregister");
  const Status s = release(v);
  if (!s.ok()) raise(core_of(v.context), s.code(), s.api(), context_text(v.context), {}, v.context.address());
}

Status RegisteredRangeTraits::release(value_type& v) noexcept {
  void* p = std::exchange(v.data, nullptr);
  retire_owner_id(v.id);
  if (!core_of(v.context).cleanup_allowed_in(v.context.address())) return {};
  return unregister_host_range(v.context, p);
}

}  // namespace detail

Status unregister_host_range(const ContextRef& context, void* data) noexcept {
  const auto& core = detail::core_of(context);
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
void unregister_host_memory(const ContextRef& context, void* host) {
  const auto& core = detail::core_of(context);
  detail::ContextScope scope(core, context.address(), "unregister_host_memory");
  DRVSHIM_TRY(core, cuMemHostUnregister, fmt::format("host memory {}, {}", host, detail::context_text(context)), host);
}

}  // namespace drvshim
