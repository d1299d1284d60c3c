// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file pinned_pool.hpp
/// Pinned memory that is cheap to reuse.
///
/// PinnedPool caches page-locked blocks (cuMemHostAlloc) in power-of-two size
/// classes instead of freeing them, and knows about streams: a block released
/// while a stream may still read or write it is handed out again only after
/// an event recorded on that stream has completed.
#include <drvshim/context.hpp>
#include <drvshim/export.hpp>
#include <drvshim/memory.hpp>
#include <drvshim/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace drvshim {

namespace detail {
struct PoolCore;
struct PoolEntry;
}  // namespace detail

/// How a PinnedPool behaves.
struct PinnedPoolOptions {
  /// Free blocks kept beyond this many bytes are freed (cuMemFreeHost) when
  /// they come back, instead of being cached. Not a block given back with
  /// PinnedBlock::release_after: its stream may still use it, and freeing
  /// pinned memory makes the driver wait for the device, so it is cached
  /// over the cap and freed by trim() once its stream has passed it (a
  /// StagingEngine trims before each stream-ordered copy to the device once
  /// its pool is past the cap; nothing else trims on its own).
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
  std::uint64_t reuses = 0;       ///< acquires served by a cached block
  std::uint64_t allocations = 0;  ///< cuMemHostAlloc calls
  std::uint64_t frees = 0;        ///< cuMemFreeHost calls
  std::uint64_t waits_skipped =
      0;                         ///< cached blocks passed over because their stream had not reached the release point
  std::size_t bytes_in_use = 0;  ///< handed out, not yet released
  std::size_t bytes_cached = 0;  ///< free (ready or waiting for their stream) in the pool
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
  /// becomes empty. For a stream of another context (another device's, say),
  /// a stream of the pool's own context waits for it (cuStreamWaitEvent; a
  /// relay stream whose earlier waits are over, or a new one) and the event is
  /// recorded there: the pool keeps nothing of that context, which may end
  /// while the block waits, and a stream that never gets past its release
  /// point holds back only the blocks released after it.
  /// Throws what the record or the wait throws; the block then stays owned.
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
  /// The options the pool was made with.
  const PinnedPoolOptions& options() const noexcept;
  const ContextRef& context() const noexcept;
  /// The size class a request of `bytes` gets.
  std::size_t size_class(std::size_t bytes) const noexcept;

 private:
  PinnedBlock acquire_locked(std::size_t bytes, std::size_t size_class) const;
  PinnedBlock acquire_slowly(std::size_t bytes, std::size_t size_class) const;
  std::shared_ptr<detail::PoolCore> core_;
};

}  // namespace drvshim
