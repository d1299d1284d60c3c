// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file launch.hpp
/// Launching kernels: the launch configuration, a typed launch that checks
/// the arguments against the kernel's parameter layout before the driver sees
/// them, and a raw launch.
#include <drvshim/export.hpp>
#include <drvshim/kernel.hpp>
#include <drvshim/stream.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>

namespace drvshim {

/// Grid or block dimensions.
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  std::uint64_t count() const noexcept { return std::uint64_t{x} * y * z; }
};

/// How to launch: grid, block, dynamic shared memory, stream, and optionally
/// cluster dimensions (then cuLaunchKernelEx is used) and a cooperative launch
/// (cuLaunchCooperativeKernel: the whole grid must be resident at once, so
/// grid-wide synchronisation works).
struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  unsigned shared_bytes = 0;
  std::optional<StreamRef> stream;  ///< empty: the legacy default stream of the kernel's context
  std::optional<Dim3> cluster;
  bool cooperative = false;
};

/// Launches with arguments the caller packed: `args[i]` points at parameter i
/// (cuLaunchKernel; cuLaunchCooperativeKernel for a cooperative launch;
/// cuLaunchKernelEx with a cluster). Throws InvalidArgumentError before the
/// launch for an empty grid or block (naming which and the dimension) and for
/// a block over the kernel's limit.
DRVSHIM_API void launch_raw(const Kernel& kernel, const LaunchConfig& config, void** args);

namespace detail {
DRVSHIM_API void check_launch_args(const Kernel& kernel, std::span<const std::size_t> sizes);
}  // namespace detail

/// Launches with C++ arguments. Where the kernel's parameter layout is known
/// (Kernel::params()), their count and sizes are checked first: a mismatch throws
/// InvalidArgumentError naming the argument index and the expected and given
/// sizes, and the driver is not called. Pass device views as their address()
/// (a DevicePtr) or as raw pointers.
template <class... Args>
void launch(const Kernel& kernel, const LaunchConfig& config, const Args&... args) {
  static_assert((std::is_trivially_copyable_v<Args> && ...), "kernel arguments must be trivially copyable");
  const std::array<std::size_t, sizeof...(Args)> sizes{sizeof(Args)...};
  detail::check_launch_args(kernel, sizes);
  std::array<void*, sizeof...(Args) + 1> pointers{const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
  launch_raw(kernel, config, pointers.data());
}

}  // namespace drvshim
