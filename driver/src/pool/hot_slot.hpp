// SPDX-License-Identifier: Apache-2.0
#pragma once
// The pinned pool's per-thread cache: a thread's hot slot in a pool, and the
// thread-local that finds it.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

namespace drvshim::detail {

struct PoolEntry;

// A thread's hot slot in one pool: the block the thread released last
// (returned ready at once), kept for its next acquire of that size class.
// Parking a block there is a plain store and taking it back one exchange, so
// a reuse on one thread skips the pool's lock, its free list and its
// counters (two locked instructions and most of what a reuse through the lock
// costs: docs/staging.md). The block stays counted as in use by the pool's
// counters; stats() moves hot blocks to "cached", and trim(), an acquire
// that would otherwise allocate, and the pool's last handle take them back
// with an exchange. Slots belong to the pool (freed with it); a thread finds
// its own through t_hot, checked against the pool's serial number (never
// reused), so a slot of a dead pool is never touched.
struct HotSlot {
  std::atomic<PoolEntry*> entry{nullptr};
  // Of `entry`; written by the owner (before it parks a block), read by
  // anyone holding the pool's lock (atomic only so that those reads are not
  // a data race: relaxed loads and stores are plain moves).
  std::atomic<std::size_t> size_class{0};
  std::atomic<std::uint64_t> reuses{0};  // acquires served from here (written by the owner only)
  // Set by the owner while it parks a block (see give_back_ready()): the
  // pool's last handle waits for it to clear before it takes the slots back.
  std::atomic<bool> parking{false};
  std::thread::id owner;
};
struct ThreadHot {
  std::uint64_t serial = 0;  // the pool `slot` belongs to
  HotSlot* slot = nullptr;
};
// initial-exec: a thread_local of a shared library otherwise costs a call to
// __tls_get_addr on every access (most of a reuse).
[[gnu::tls_model("initial-exec")]] inline thread_local ThreadHot t_hot;

}  // namespace drvshim::detail
