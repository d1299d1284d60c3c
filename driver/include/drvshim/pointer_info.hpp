// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file pointer_info.hpp
/// Pointer inspection: what kind of memory an address is, in which context
/// and allocation (cuPointerGetAttributes), for people debugging mixed code.
#include <drvshim/device_span.hpp>
#include <drvshim/export.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace drvshim {

class Driver;

/// What kind of memory an address is.
enum class MemoryKind {
  pageable_host,     ///< ordinary host memory, unknown to the driver
  page_locked_host,  ///< pinned (cuMemHostAlloc) or registered (cuMemHostRegister) host memory
  device,            ///< device memory
  managed,           ///< managed (unified) memory
  array,             ///< a CUDA array
};
DRVSHIM_API const char* to_string(MemoryKind kind) noexcept;

/// cuPointerGetAttributes of one address, for people debugging mixed code.
struct DRVSHIM_API PointerInfo {
  MemoryKind kind = MemoryKind::pageable_host;
  DevicePtr device_address = 0;  ///< where the device accesses it (0 if it cannot)
  void* host_address = nullptr;  ///< where the host accesses it (null if it cannot)
  std::uintptr_t context = 0;    ///< the context it was allocated or registered in
  int device_ordinal = -1;
  DevicePtr range_start = 0;  ///< the allocation containing it
  std::size_t range_size = 0;
  /// One line: "device memory of device 0 in context 0x..., allocation 0x...+1048576".
  std::string to_string() const;
};

/// Where inspect_pointer reads an address's device and host addresses, which
/// the driver reports "in the current context".
enum class AddressesIn {
  /// The pointer's own context, made current for the question: the addresses
  /// as that context sees them. A context with a sticky error is refused
  /// (ContextPoisonedError).
  own_context,
  /// The calling thread's current context, as it is: 0 / null where that
  /// context cannot reach the memory, and without a current context. What
  /// cudaPointerGetAttributes reports; answers after a sticky error too.
  current_context,
};

/// Inspects an address (host or device): cuPointerGetAttributes. Never throws
/// for addresses unknown to the driver (they are pageable host memory);
/// throws MissingStepError before init, NotPermittedError inside a host function.
DRVSHIM_API PointerInfo inspect_pointer(const Driver& driver, const void* address);
DRVSHIM_API PointerInfo inspect_pointer(const Driver& driver, DevicePtr address);
/// The same, reading the device and host addresses where `where` says.
DRVSHIM_API PointerInfo inspect_pointer(const Driver& driver, DevicePtr address, AddressesIn where);

}  // namespace drvshim
