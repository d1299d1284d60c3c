// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file memory_flags.hpp
/// The typed flags of page-locked host memory: cuMemHostAlloc's
/// (HostAllocFlags) and cuMemHostRegister's (HostRegisterFlags); `|`, `&`,
/// has() and to_string() come from flags.hpp.
#include <drvshim/flags.hpp>

namespace drvshim {

/// Flags of cuMemHostAlloc (CU_MEMHOSTALLOC_*).
enum class HostAllocFlags : unsigned {
  none = 0x0,
  portable = 0x1,        ///< page-locked for every context, not only the allocating one
  device_map = 0x2,      ///< mapped into the device address space (zero-copy)
  write_combined = 0x4,  ///< write-combined: fast for the device to read, very slow for the host to read
};
template <>
struct FlagTraits<HostAllocFlags> {
  static constexpr FlagName names[] = {{0x1, "portable"}, {0x2, "device_map"}, {0x4, "write_combined"}};
  static constexpr unsigned zero_mask = ~0u;
  static constexpr const char* zero_name = "none";
};

/// Flags of cuMemHostRegister (CU_MEMHOSTREGISTER_*).
enum class HostRegisterFlags : unsigned {
  none = 0x0,
  portable = 0x1,
  device_map = 0x2,
  io_memory = 0x4,
  read_only = 0x8,
};
template <>
struct FlagTraits<HostRegisterFlags> {
  static constexpr FlagName names[] = {{0x1, "portable"}, {0x2, "device_map"}, {0x4, "io_memory"}, {0x8, "read_only"}};
  static constexpr unsigned zero_mask = ~0u;
  static constexpr const char* zero_name = "none";
};

}  // namespace drvshim
