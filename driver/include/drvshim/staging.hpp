#pragma once
/// @file staging.hpp
/// Pageable copies at pinned speed, and pinned memory that is cheap to reuse.
///
/// PinnedPool caches page-locked blocks (cuMemHostAlloc) in power-of-two size
/// classes instead of freeing them, and knows about streams: a block released
/// while a stream may still read or write it is handed out again only after
/// an event recorded on that stream has completed.
///
/// StagingEngine copies between pageable host memory and device memory
/// through a ring of pinned staging blocks from a pool: the host-side copy of
/// one chunk overlaps the DMA of the previous one, and the host-side copies are
/// spread over several threads. Small copies, and host memory that is already
/// pinned or registered, go straight to the driver.
#include <drvshim/context.hpp>
#include <drvshim/export.hpp>
#include <drvshim/memory.hpp>
#include <drvshim/stream.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace drvshim {

namespace detail {
struct PoolCore;
struct PoolEntry;
struct StagingCore;
}  // namespace detail

/// How a PinnedPool behaves.
struct PinnedPoolOptions {
  /// Free blocks kept beyond this many bytes are freed (cuMemFreeHost) when
  /// they come back, instead of being cached.
  std::size_t max_cached_bytes = std::size_t{1} << 30;
  /// The smallest size class; requests are rounded up to a power of two at least this big.
  std::size_t min_block_bytes = std::size_t{64} << 10;
  HostAllocFlags flags = HostAllocFlags::portable;
  /// Each thread keeps the block it released last (ready at once) for its
  /// own next acquire of that size, without the pool's lock: a reuse on one
  /// thread costs a few nanoseconds. Such a block counts as cached in
  /// stats(), and trim(), other threads' acquires and the pool's end take it
  /// back. Needs Linux's membarrier(2); where that is refused it is off.
  bool thread_cache = true;
};

/// A pool's counters.
struct PinnedPoolStats {
  std::uint64_t acquires = 0;
  std::uint64_t reuses = 0;          ///< acquires served by a cached block
  std::uint64_t allocations = 0;     ///< cuMemHostAlloc calls
  std::uint64_t frees = 0;           ///< cuMemFreeHost calls
  std::uint64_t waits_skipped = 0;   ///< cached blocks passed over because their stream had not reached the release point
  std::size_t bytes_in_use = 0;      ///< handed out, not yet released
  std::size_t bytes_cached = 0;      ///< free (ready or waiting for their stream) in the pool
  std::size_t blocks_in_use = 0;
  std::size_t blocks_cached = 0;
};

class PinnedPool;

/// A pinned block from a PinnedPool (move-only owner). Going out of scope
/// returns it to the pool, ready at once; release_after() returns it for reuse
/// only after `stream` has passed the current point.
class DRVSHIM_API PinnedBlock {
 public:
  PinnedBlock() noexcept = default;
  PinnedBlock(PinnedBlock&& other) noexcept;
  PinnedBlock& operator=(PinnedBlock&& other) noexcept;
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;
  ~PinnedBlock();

  explicit operator bool() const noexcept { return data_ != nullptr; }
  std::byte* data() const noexcept { return data_; }
  /// The bytes asked for.
  std::size_t size() const noexcept { return size_; }
  /// The size class (at least size()).
  std::size_t capacity() const noexcept { return capacity_; }
  std::span<std::byte> bytes() const noexcept { return {data_, size_}; }

  /// Back to the pool, reusable at once. The owner becomes empty.
  void release() noexcept;
  /// Back to the pool, reusable once `stream` has completed the work queued
  /// on it so far (an event is recorded on it now: cuEventRecord). The owner
  /// becomes empty. Throws what the record throws; the block then stays owned.
  void release_after(const StreamRef& stream);

 private:
  friend class PinnedPool;
  friend struct detail::PoolCore;
  PinnedBlock(detail::PoolCore* pool, detail::PoolEntry* entry, std::byte* data, std::size_t size,
              std::size_t capacity) noexcept
      : pool_(pool), entry_(entry), data_(data), size_(size), capacity_(capacity) {}
  // The pool outlives its blocks: it counts them under its lock and is
  // deleted by whichever goes last, its last handle or its last block.
  detail::PoolCore* pool_ = nullptr;
  detail::PoolEntry* entry_ = nullptr;  // the pool's record of this allocation, handed back on release
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

/// A caching allocator of pinned host memory for one context (a shared
/// handle: copies share one pool; thread-safe). Blocks are freed when the last
/// handle and the last block are gone, or by trim().
class DRVSHIM_API PinnedPool {
 public:
  /// An empty pool; nothing is allocated until acquire(). Throws
  /// InvalidArgumentError when min_block_bytes is 0 or not a power of two, or
  /// for unknown flag bits.
  explicit PinnedPool(const ContextRef& context, PinnedPoolOptions options = {});

  /// A block of at least `bytes`: a cached block of the size class whose
  /// stream has passed its release point (cuEventQuery), else a new one
  /// (cuMemHostAlloc; OutOfMemoryError if the host cannot pin it, after
  /// freeing the ready cached blocks and trying once more). Throws
  /// InvalidArgumentError for 0 bytes.
  PinnedBlock acquire(std::size_t bytes) const;

  /// Frees cached blocks whose streams are done until at most `keep_bytes`
  /// stay cached. Returns the bytes freed. Never waits for a stream.
  std::size_t trim(std::size_t keep_bytes = 0) const;
  PinnedPoolStats stats() const;
  const ContextRef& context() const noexcept;
  /// The size class a request of `bytes` gets.
  std::size_t size_class(std::size_t bytes) const noexcept;

 private:
  PinnedBlock acquire_locked(std::size_t bytes, std::size_t size_class) const;
  PinnedBlock acquire_slowly(std::size_t bytes, std::size_t size_class) const;
  std::shared_ptr<detail::PoolCore> core_;
};

/// How a StagingEngine moves data. The defaults came from the H200
/// measurements in docs/staging.md (one host thread copies pageable memory at
/// 5-9 GB/s there, so the bus needs many); every field can be overridden.
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
  /// measurements in docs/staging.md). An explicit count stages from two.
  unsigned threads = 0;
  /// Copies smaller than this go straight to the driver (its own pageable path).
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
  std::uint64_t direct_copies = 0;  ///< small, or host memory already page-locked
  std::uint64_t chunks = 0;  ///< DMAs issued by staged copies
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
///    (copied into staging); the DMAs follow on `stream`, in its order. The
///    call blocks while the ring is full, i.e. while `stream` is still busy with
///    earlier work or the DMAs of this copy.
///  - copy_to_host_async: the destination is written by host functions queued
///    on `stream` (cuLaunchHostFunc) after each DMA: it is complete, and may be
///    read, only once `stream` has passed this call (synchronize it, or wait for
///    an event recorded after it). It must stay alive until then.
///
/// On failure every form has waited for the DMAs it queued before it throws
/// (the stream-ordered forms synchronise `stream`): no staging block is
/// reused while the device may still read or write it, and nothing writes
/// into the destination after the call returned. The destination's contents
/// are then unspecified.
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
  void copy_to_device(DeviceSpan<std::byte> dst, std::span<const std::byte> src) const;
  /// Device to host; the same rules.
  void copy_to_host(std::span<std::byte> dst, DeviceSpan<const std::byte> src) const;
  /// Host to device ordered on `stream`; see the class comment for when `src` may be reused.
  void copy_to_device_async(DeviceSpan<std::byte> dst, std::span<const std::byte> src, const StreamRef& stream) const;
  /// Device to host ordered on `stream`; see the class comment for when `dst` is written.
  void copy_to_host_async(std::span<std::byte> dst, DeviceSpan<const std::byte> src, const StreamRef& stream) const;

  /// The options in force: `threads` resolved (see StagingOptions::threads).
  const StagingOptions& options() const noexcept;
  StagingStats stats() const;
  const PinnedPool& pool() const noexcept;

 private:
  std::shared_ptr<detail::StagingCore> core_;
};

/// Typed conveniences over the byte forms.
template <class T>
void staged_copy(const StagingEngine& engine, DeviceSpan<T> dst, std::span<const T> src) {
  engine.copy_to_device(DeviceSpan<std::byte>(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id()),
                        std::as_bytes(src));
}
template <class T>
void staged_copy(const StagingEngine& engine, std::span<T> dst, DeviceSpan<const T> src) {
  engine.copy_to_host(std::as_writable_bytes(dst),
                      DeviceSpan<const std::byte>(src.context(), src.address(), src.size_bytes(), src.owner_id()));
}

}  // namespace drvshim
