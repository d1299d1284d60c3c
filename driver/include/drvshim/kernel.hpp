// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file kernel.hpp
/// Kernels: a kernel of a loaded module or library, its attributes,
/// occupancy and parameter layout.
#include <drvshim/context.hpp>
#include <drvshim/export.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace drvshim {

class Kernel;

namespace detail {
struct KernelState;
struct Access;  // the library's own door to private members (internal, not part of the API)
// Makes the Kernel for function `f` (a CUfunction) of `context` (inside the library).
Kernel make_kernel(const ContextRef& context, std::uintptr_t f, const std::string& name,
                   std::shared_ptr<const void> code);
}  // namespace detail

/// One kernel parameter: its offset and size in the parameter buffer.
struct ParamInfo {
  std::size_t offset = 0;
  std::size_t size = 0;
};

/// Kernel attributes, numbered as cuda.h's CUfunction_attribute (the CUDA
/// Runtime's cudaFuncAttribute uses the same numbers for the settable ones:
/// max_dynamic_shared_size_bytes and after).
enum class FunctionAttribute : int {
  max_threads_per_block = 0,
  shared_size_bytes = 1,
  const_size_bytes = 2,
  local_size_bytes = 3,
  num_regs = 4,
  ptx_version = 5,
  binary_version = 6,
  cache_mode_ca = 7,
  max_dynamic_shared_size_bytes = 8,  ///< settable: above 48 KiB needs this opt-in
  preferred_shared_memory_carveout = 9,
  cluster_size_must_be_set = 10,
  required_cluster_width = 11,
  required_cluster_height = 12,
  required_cluster_depth = 13,
  non_portable_cluster_size_allowed = 14,  ///< settable: clusters above 8 blocks on the H200
  cluster_scheduling_policy_preference = 15,
};

/// The block size the driver suggests for a kernel (Kernel::suggested_block).
struct BlockSuggestion {
  /// The block size, a multiple of the warp size, that keeps the most threads
  /// of the kernel resident on a multiprocessor (of several, the largest).
  unsigned block_threads = 0;
  /// The fewest blocks of that size that reach this occupancy on every
  /// multiprocessor: resident blocks per multiprocessor times their count.
  /// A grid of this many blocks is resident at once on an idle device.
  unsigned min_grid_blocks = 0;
};

/// The L1/shared-memory split a kernel prefers (CUfunc_cache).
enum class CachePreference : int { none = 0, shared = 1, l1 = 2, equal = 3 };

/// A kernel of a loaded module or library: a cheap handle that caches what it
/// read (the parameter layout and the block limit are read once per kernel).
/// It shares ownership of its code: the Module (or Library) stays loaded while
/// any Kernel of it exists, so a launch never reaches the driver with the
/// function handle of unloaded code (which a later load could reuse). Its
/// context must still outlive it.
class DRVSHIM_API Kernel {
 public:
  const std::string& name() const noexcept;
  std::uintptr_t native() const noexcept;
  const ContextRef& context() const noexcept { return context_; }

  /// cuFuncGetAttribute for the common attributes.
  int registers() const;
  int static_shared_bytes() const;
  int max_threads_per_block() const;
  int local_bytes() const;
  /// cuOccupancyMaxActiveBlocksPerMultiprocessor.
  int max_active_blocks_per_sm(unsigned block_threads, std::size_t dynamic_shared_bytes = 0) const;
  /// cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags (flags: 0 default,
  /// 1 disable the caching override). Throws DriverTooOldError without it.
  int max_active_blocks_per_sm(unsigned block_threads, std::size_t dynamic_shared_bytes, unsigned flags) const;
  /// cuOccupancyAvailableDynamicSMemPerBlock: the dynamic shared memory a block
  /// may use so that `blocks_per_sm` blocks of `block_threads` fit on one SM.
  std::size_t available_dynamic_shared_bytes(int blocks_per_sm, unsigned block_threads) const;
  /// cuOccupancyMaxPotentialBlockSize: the block size giving the most resident
  /// threads when each block uses `dynamic_shared_bytes` of dynamic shared
  /// memory, among sizes up to `block_limit` threads (0: the kernel's own
  /// limit). Throws DriverTooOldError without the call, CudaError as the
  /// driver answers (a dynamic shared size no block can have gives a
  /// block_threads of 0 on some drivers: launch_raw then refuses the block).
  BlockSuggestion suggested_block(std::size_t dynamic_shared_bytes = 0, unsigned block_limit = 0) const;
  /// cuFuncGetAttribute for any attribute.
  int attribute(FunctionAttribute attribute) const;
  /// cuFuncSetAttribute (CUDA 9.0+): for example max_dynamic_shared_size_bytes
  /// to launch with more than 48 KiB of dynamic shared memory, or
  /// non_portable_cluster_size_allowed for clusters above the portable size.
  /// Throws DriverTooOldError without it, CudaError (CUDA_ERROR_INVALID_VALUE)
  /// for a read-only attribute or a value the device cannot give.
  void set_attribute(FunctionAttribute attribute, int value) const;
  /// cuFuncSetCacheConfig: a preference the driver may ignore.
  void set_cache_preference(CachePreference preference) const;
  /// The parameter layout from cuFuncGetParamInfo (CUDA 12.4+), read at
  /// lookup; std::nullopt ("unknown": launches are not checked, and the debug
  /// log says why) where the driver cannot tell: an older driver, a failed
  /// query, an implausible layout, or CUDA_ERROR_INVALID_VALUE for parameter 0
  /// (the driver's answer both for a kernel without parameters and for one
  /// whose layout it does not know).
  const std::optional<std::vector<ParamInfo>>& params() const;

  /// The same kernel: the same lookup, or a copy of it.
  friend bool operator==(const Kernel&, const Kernel&) = default;

 private:
  friend struct detail::Access;
  friend Kernel detail::make_kernel(const ContextRef&, std::uintptr_t, const std::string&, std::shared_ptr<const void>);
  Kernel(ContextRef context, std::shared_ptr<detail::KernelState> state) noexcept
      : context_(std::move(context)), state_(std::move(state)) {}
  ContextRef context_;
  std::shared_ptr<detail::KernelState> state_;
};

}  // namespace drvshim
