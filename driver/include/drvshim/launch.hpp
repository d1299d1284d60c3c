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

/// One launch attribute as cuLaunchKernelEx takes it: the driver's number
/// (CUlaunchAttributeID) and its value, laid out as CUlaunchAttribute (the
/// id, then a 64-byte value at offset 8), so an array of CUlaunchAttribute or
/// cudaLaunchAttribute can be viewed as these. The named constructors cover
/// what has no field of its own in LaunchConfig; `raw` takes any other id.
struct LaunchAttribute {
  int id = 0;  ///< 0 (CU_LAUNCH_ATTRIBUTE_IGNORE): ignored
  alignas(8) std::array<std::byte, 64> value{};

  /// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the kernel may
  /// start before the previous kernel on the stream has finished, once that
  /// one triggers (programmatic dependent launch, compute capability 9.0+).
  DRVSHIM_API static LaunchAttribute programmatic_stream_serialization(bool allowed = true) noexcept;
  /// CU_LAUNCH_ATTRIBUTE_PRIORITY: the launch's priority, as a stream's.
  DRVSHIM_API static LaunchAttribute priority(int priority) noexcept;
  /// Any attribute by the driver's number, its value copied from `value`
  /// (at most 64 bytes). Throws InvalidArgumentError for a longer value.
  DRVSHIM_API static LaunchAttribute raw(int id, std::span<const std::byte> value);
};

/// How to launch: grid, block, dynamic shared memory, stream, and optionally
/// cluster dimensions and further attributes (then cuLaunchKernelEx is used)
/// and a cooperative launch (cuLaunchCooperativeKernel: the whole grid must be
/// resident at once, so grid-wide synchronisation works).
struct LaunchConfig {
  // Every member has a default, so a designated or braced initialiser may
  // stop early without -Wmissing-field-initializers (-Wextra) warning.
  Dim3 grid{};
  Dim3 block{};
  unsigned shared_bytes = 0;
  std::optional<StreamRef> stream{};  ///< empty: the legacy default stream of the kernel's context
  std::optional<Dim3> cluster{};
  bool cooperative = false;
  /// Passed to the driver after the cluster and cooperative ones; the driver
  /// checks them (an id it does not know is CUDA_ERROR_INVALID_VALUE). Not
  /// owned: the span's elements must live until launch_raw returns.
  std::span<const LaunchAttribute> attributes{};
  /// Whether launch() refuses a kernel whose parameter layout the driver cannot
  /// report (Kernel::params() empty: a driver before 12.4, for example), whose
  /// arguments it therefore cannot check, instead of launching it unchecked
  /// (which it logs as a warning at the first such launch of each
  /// Module::kernel / Library::kernel lookup; copies share it). One case
  /// passes unchecked: no arguments where the driver calls parameter 0
  /// invalid, its answer both for a kernel without parameters and for one
  /// whose layout it does not know. launch_raw() takes no argument sizes and
  /// does not look at it.
  bool require_checked = false;

  /// A 1D launch covering `elements` items with blocks of `block_threads`:
  /// ceil(elements / block_threads) blocks, so no item is left out (the
  /// kernel skips the indices past the end). Computed in 64 bits: no
  /// narrowing warning for a std::size_t count. `stream` empty: the legacy
  /// default stream. Throws InvalidArgumentError, naming the numbers, when
  /// `elements` or `block_threads` is 0 or the grid would need more than
  /// 2^31 - 1 blocks (the driver's limit for x). More than 2^32 elements
  /// need a 64-bit index in the kernel (blockIdx.x * blockDim.x in 32 bits wraps).
  DRVSHIM_API static LaunchConfig covering(std::size_t elements, unsigned block_threads,
                                           std::optional<StreamRef> stream = std::nullopt);
  /// A 1D launch covering `elements` items with the block size that keeps the
  /// most threads of `kernel` resident (Kernel::suggested_block, each block
  /// with `shared_bytes` of dynamic shared memory, which the launch carries).
  /// Otherwise as covering(elements, block_threads), and throws as it does,
  /// and as Kernel::suggested_block (DriverTooOldError without
  /// cuOccupancyMaxPotentialBlockSize); InvalidArgumentError, naming the
  /// kernel, when the driver suggests no block for `shared_bytes`.
  DRVSHIM_API static LaunchConfig covering(const Kernel& kernel, std::size_t elements, unsigned shared_bytes = 0,
                                           std::optional<StreamRef> stream = std::nullopt);
  /// A 1D launch for a grid-stride loop over `elements` items: the suggested
  /// block size (as above) and the fewest blocks that keep every
  /// multiprocessor at that occupancy (BlockSuggestion::min_grid_blocks), or
  /// fewer where `elements` needs fewer. Each thread must loop:
  /// `for (i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)`.
  /// On an idle device the whole grid is resident at once, so a cooperative
  /// launch of it fits. Throws as covering(kernel, elements, ...).
  DRVSHIM_API static LaunchConfig grid_stride(const Kernel& kernel, std::size_t elements, unsigned shared_bytes = 0,
                                              std::optional<StreamRef> stream = std::nullopt);
};

/// Launches with arguments the caller packed: `args[i]` points at parameter i
/// (cuLaunchKernel; cuLaunchCooperativeKernel for a cooperative launch;
/// cuLaunchKernelEx with a cluster). Throws InvalidArgumentError before the
/// launch for an empty grid or block (naming which and the dimension) and for
/// a block over the kernel's limit.
DRVSHIM_API void launch_raw(const Kernel& kernel, const LaunchConfig& config, void** args);

/// How many clusters of `config`'s cluster size can be resident on the
/// device at once, each with `config`'s block and shared memory
/// (cuOccupancyMaxActiveClusters, CUDA 11.7+). The cluster size is
/// config.cluster, or the kernel's own where it was compiled with one; the
/// grid is ignored. Throws DriverTooOldError without the call, CudaError as
/// the driver answers (CUDA_ERROR_INVALID_CLUSTER_SIZE: no cluster size, or
/// one above 8 blocks without Kernel's non_portable_cluster_size_allowed).
DRVSHIM_API int max_active_clusters(const Kernel& kernel, const LaunchConfig& config);

namespace detail {
DRVSHIM_API void check_launch_args(const Kernel& kernel, std::span<const std::size_t> sizes, bool require_checked);
}  // namespace detail

/// Launches with C++ arguments. Where the kernel's parameter layout is known
/// (Kernel::params()), their count and sizes are checked first: a mismatch throws
/// InvalidArgumentError naming the argument (counted from 1) and the expected
/// and given sizes, and the driver is not called. Sizes are all the layout
/// tells: an int where the kernel takes a float passes. Where the layout is
/// unknown, the launch goes unchecked with a warning logged at the kernel's
/// first such launch, or throws UnsupportedError with config.require_checked. Pass device views as their address()
/// (a DevicePtr) or as raw pointers.
template <class... Args>
void launch(const Kernel& kernel, const LaunchConfig& config, const Args&... args) {
  static_assert((std::is_trivially_copyable_v<Args> && ...), "kernel arguments must be trivially copyable");
  const std::array<std::size_t, sizeof...(Args)> sizes{sizeof(Args)...};
  detail::check_launch_args(kernel, sizes, config.require_checked);
  std::array<void*, sizeof...(Args) + 1> pointers{const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
  launch_raw(kernel, config, pointers.data());
}

}  // namespace drvshim
