// SPDX-License-Identifier: Apache-2.0
#include <drvshim/driver.hpp>
#include <drvshim/pointer_info.hpp>

#include <algorithm>
#include <iterator>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "seam/access.hpp"
#include "seam/core.hpp"

namespace drvshim {

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
  return inspect_pointer(driver, address, AddressesIn::own_context);
}

PointerInfo inspect_pointer(const Driver& driver, DevicePtr address, AddressesIn where) {
  const auto& core = *detail::Access::core(driver);
  core.require_init("inspect_pointer");
  const CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT,          CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                       CU_POINTER_ATTRIBUTE_IS_MANAGED,       CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
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
  const CUpointer_attribute addresses_of[] = {CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER};
  std::uint64_t addresses[2] = {};
  if (where == AddressesIn::current_context) {
    query_attributes(core, address, addresses_of, addresses);
  } else if (info.context != 0) {
    // The device and host addresses are reported "in the current context"
    // (0 without one, seen on the H200): ask again inside the pointer's own context.
    detail::ContextScope scope(core, info.context, "inspect_pointer");
    query_attributes(core, address, addresses_of, addresses);
  }
  info.device_address = addresses[0];
  info.host_address = reinterpret_cast<void*>(static_cast<std::uintptr_t>(addresses[1]));
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
