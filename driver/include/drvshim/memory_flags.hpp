#pragma once
/// @file memory_flags.hpp
/// The typed flags of page-locked host memory: cuMemHostAlloc's
/// (HostAllocFlags) and cuMemHostRegister's (HostRegisterFlags).
#include <drvshim/export.hpp>

#include <string>

namespace drvshim {

/// Flags of cuMemHostAlloc (CU_MEMHOSTALLOC_*).
enum class HostAllocFlags : unsigned {
  none = 0x0,
  portable = 0x1,        ///< page-locked for every context, not only the allocating one
  device_map = 0x2,      ///< mapped into the device address space (zero-copy)
  write_combined = 0x4,  ///< write-combined: fast for the device to read, very slow for the host to read
};
constexpr HostAllocFlags operator|(HostAllocFlags a, HostAllocFlags b) noexcept {
  return static_cast<HostAllocFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
constexpr bool has(HostAllocFlags set, HostAllocFlags flag) noexcept {
  return (static_cast<unsigned>(set) & static_cast<unsigned>(flag)) != 0;
}
/// "portable|device_map", or "none".
DRVSHIM_API std::string to_string(HostAllocFlags flags);

/// Flags of cuMemHostRegister (CU_MEMHOSTREGISTER_*).
enum class HostRegisterFlags : unsigned {
  none = 0x0,
  portable = 0x1,
  device_map = 0x2,
  io_memory = 0x4,
  read_only = 0x8,
};
constexpr HostRegisterFlags operator|(HostRegisterFlags a, HostRegisterFlags b) noexcept {
  return static_cast<HostRegisterFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
constexpr bool has(HostRegisterFlags set, HostRegisterFlags flag) noexcept {
  return (static_cast<unsigned>(set) & static_cast<unsigned>(flag)) != 0;
}
/// "portable|device_map", or "none".
DRVSHIM_API std::string to_string(HostRegisterFlags flags);

}  // namespace drvshim
