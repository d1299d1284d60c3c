// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file staging_engine.hpp
/// Pageable copies at pinned speed.
///
/// StagingEngine copies between pageable host memory and device memory
/// through a ring of pinned staging blocks from a pool (pinned_pool.hpp): the
/// host-side copy of one chunk overlaps the DMA of the previous one, and the
/// host-side copies are spread over several threads. Small copies, and host
/// memory that is already pinned or registered, go straight to the driver
/// (except a stream-ordered copy to the device from page-locked memory, which
/// is staged: see StagingEngine::copy_to_device_async).
#include <drvshim/context.hpp>
#include <drvshim/copy.hpp>
#include <drvshim/export.hpp>
#include <drvshim/memory.hpp>
#include <drvshim/pinned_pool.hpp>
#include <drvshim/stream.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>

namespace drvshim {

namespace detail {
struct StagingCore;
}  // namespace detail

/// How a StagingEngine moves data. The defaults came from measurements on an
/// H200 machine (one host thread copies pageable memory at 5-9 GB/s there, so
/// the bus needs many); every field can be overridden.
struct StagingOptions {
  /// Bytes per staging block, and the largest DMA. 0: chosen per copy, the
  /// copy's size rounded up to a power of two, between 1 and 8 MiB.
  /// Otherwise at least 64 KiB.
  std::size_t chunk_bytes = 0;
  /// Staging blocks in the ring. 0: four (only as many as the copy fills).
  unsigned depth = 0;
  /// Host-side copy threads, the caller counting as one; 0: three quarters of
  /// the CPUs this process may use (its affinity mask and cgroup CPU quota,
  /// read when the engine is made), rounded up, at most 12. Never more than those CPUs:
  /// a larger number is lowered to it. Where the threads cannot beat the
  /// driver's own pageable path, copies in that direction go straight to the
  /// driver (counted as direct): with fewer than two threads, and, when the
  /// count is automatic, with fewer than three to the device (H200
  /// measurements). An explicit count stages from two.
  unsigned threads = 0;
  /// Copies smaller than this go straight to the driver (its own pageable
  /// path). With an automatic thread count below four, copies to the device
  /// go straight to it below 4 MiB at least (three threads lose to the
  /// driver on small copies to the device, on the H200 machine).
  std::size_t direct_below = std::size_t{1} << 20;
  /// How long the helper threads stay awake after a copy, waiting for the
  /// next one (spinning with a pause, yielding to other threads after the
  /// first 0.3 ms), before they sleep. A copy that finds them asleep waits
  /// for their wake-up: 50-100 µs on the H200 machine's VM, where it cost a
  /// 16 MiB copy to the device about a fifth of its speed. The price is up
  /// to `threads - 1` busy CPUs for this long after each copy; 0 lets them
  /// sleep at once.
  std::chrono::microseconds spin{5000};
};

/// What one staged copy did (for tests and benchmarks).
struct StagingStats {
  std::uint64_t staged_copies = 0;
  std::uint64_t direct_copies = 0;  ///< small, or host memory already page-locked (see StagingEngine)
  std::uint64_t chunks = 0;         ///< DMAs issued by staged copies
  std::uint64_t bytes_staged = 0;
};

/// Copies between pageable host memory and device memory through pinned
/// staging blocks (a shared handle; thread-safe; one copy at a time per
/// engine: concurrent calls queue on an internal lock). Each engine owns a
/// non-blocking stream for its synchronous copies and `threads - 1` helper
/// threads.
///
/// Ordering: the synchronous forms are ordered as the driver's synchronous
/// copies (cuMemcpyHtoD/DtoH) are: after the work already queued on the
/// context's legacy default stream (and through it on every blocking stream);
/// the stream-ordered forms follow `stream` only.
///
/// When the host buffer may be reused:
///  - copy_to_device / copy_to_host: on return (the copy is complete).
///  - copy_to_device_async: on return the source has been read completely
///    (copied into staging; page-locked memory too, of any size, since the
///    driver would read it only when the DMA runs); the DMAs follow on
///    `stream`, in its order, and the call does not wait for `stream` while
///    the pool holds no more than its cap (PinnedPoolOptions::max_cached_bytes)
///    of returned blocks: past it, it frees the ready ones and, if that is not
///    enough, waits for `stream`'s earlier work first. A copy larger than the
///    ring (`depth` blocks of `chunk_bytes`; by default 32 MiB) also waits for
///    `stream`'s earlier work, and is then complete on return. These waits
///    hold nothing of the engine, so other threads' copies go on.
///  - copy_to_host_async: the destination is written by host functions queued
///    on `stream` (cuLaunchHostFunc) after each DMA: it is complete, and may be
///    read, only once `stream` has passed this call (synchronize it, or wait for
///    an event recorded after it). It must stay alive until then.
///
/// On failure no staging block is reused while the device may still read or
/// write it, and nothing writes into the destination after the call
/// returned: the forms that are complete on return, and copy_to_host_async,
/// have waited for the DMAs they queued before they throw (synchronising
/// `stream`); copy_to_device_async gives its blocks back only once `stream`
/// has passed its DMAs. The destination's contents are then unspecified.
///
/// No form holds the engine while it waits for a stream of the caller's:
/// a stream that waits for another thread's copy on the same engine does
/// not deadlock.
class DRVSHIM_API StagingEngine {
 public:
  /// Throws InvalidArgumentError for chunk_bytes under 64 KiB (but not 0), a
  /// depth of 1, more than 64 threads or a negative spin; what Stream::create
  /// throws; SystemError when a helper thread cannot be started (none is left
  /// running). Starts `threads - 1` helper threads (see StagingOptions::spin).
  StagingEngine(const PinnedPool& pool, StagingOptions options = {});

  /// Host to device. Throws InvalidArgumentError when the sizes differ; CUDA
  /// errors of any step (the first error only; the ring is drained and every
  /// staging block returned before it is thrown).
  void copy_to_device(const DeviceSpan<std::byte>& dst, std::span<const std::byte> src) const;
  /// Device to host; the same rules.
  void copy_to_host(std::span<std::byte> dst, const DeviceSpan<const std::byte>& src) const;
  /// Host to device ordered on `stream`; see the class comment for when `src` may be reused.
  void copy_to_device_async(const DeviceSpan<std::byte>& dst, std::span<const std::byte> src,
                            const StreamRef& stream) const;
  /// Device to host ordered on `stream`; see the class comment for when `dst` is written.
  void copy_to_host_async(std::span<std::byte> dst, const DeviceSpan<const std::byte>& src,
                          const StreamRef& stream) const;

  /// The options in force: `threads` resolved (see StagingOptions::threads).
  const StagingOptions& options() const noexcept;
  StagingStats stats() const;
  const PinnedPool& pool() const noexcept;

 private:
  std::shared_ptr<detail::StagingCore> core_;
};

/// Typed conveniences over the byte forms. The element type comes from the
/// destination, and the source may be of const or mutable elements, as with
/// copy() (copy.hpp): a host source is any contiguous range of T, a host
/// destination any contiguous range of mutable elements.
template <class T>
requires(!std::is_const_v<T>) void staged_copy(const StagingEngine& engine, DeviceSpan<T> dst,
                                               std::type_identity_t<std::span<const T>> src) {
  engine.copy_to_device(DeviceSpan<std::byte>(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id()),
                        std::as_bytes(src));
}
template <detail::HostDestination R>
void staged_copy(const StagingEngine& engine, R&& dst, DeviceSpan<const detail::host_element_t<R>> src) {
  engine.copy_to_host(std::as_writable_bytes(detail::host_span(dst)),
                      DeviceSpan<const std::byte>(src.context(), src.address(), src.size_bytes(), src.owner_id()));
}

}  // namespace drvshim
