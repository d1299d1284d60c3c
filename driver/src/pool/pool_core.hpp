// SPDX-License-Identifier: Apache-2.0
#pragma once
// The shared state of a PinnedPool (pinned_pool.hpp): its free lists and
// counters under one spin lock, the threads' hot slots, the return of a block
// (parked, through the lock, or freed), and the end of the pool, which
// whichever goes last decides: its last handle or its last block.
//
// Everything here is inline on purpose: a reuse (PinnedPool::acquire, a
// block's release) is a few nanoseconds, and these functions are its body.
#include <drvshim/error.hpp>
#include <drvshim/event.hpp>
#include <drvshim/memory.hpp>
#include <drvshim/pinned_pool.hpp>
#include <drvshim/stream.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <pthread.h>

#include "pool/hot_slot.hpp"
#include "pool/membarrier.hpp"
#include "pool/pool_entry.hpp"
#include "pool/spin_lock.hpp"
#include "seam/core.hpp"
#include "seam/process.hpp"
#include "support/test_hooks.hpp"

namespace drvshim::detail {

struct PoolCore {
  ContextRef context;
  PinnedPoolOptions options;
  mutable SpinLock mutex;
  // Free entries by size class (index: log2 of the class), most recently
  // returned last; the pool owns them. Each list's capacity covers every
  // block of its class (reserved when one is allocated), so returning a block
  // never allocates.
  std::array<std::vector<PoolEntry*>, 64> free;
  std::array<std::size_t, 64> blocks_of_class{};
  // Events of the pool's own context, ready to be recorded again.
  std::vector<Event> spare_events;
  // Streams of the pool's context that wait for other contexts' streams (see
  // PinnedBlock::release_after), made as needed, under `relay_mutex`.
  std::mutex relay_mutex;
  std::vector<Stream> relays;
  // The counters a reuse must touch are few; the rest of PinnedPoolStats is
  // derived from them (cached = allocated - in use; acquires = reuses +
  // allocations + failures).
  struct Counts {
    std::uint64_t reuses = 0, allocations = 0, frees = 0, waits_skipped = 0, failures = 0;
    std::size_t bytes_in_use = 0, blocks_in_use = 0, bytes_total = 0, blocks_total = 0;
  } counts;
  bool orphaned = false;  // no PinnedPool handle is left: the last block returned deletes the pool
  // Hot slots (see HotSlot): one per thread that parked a block here, under `mutex`.
  std::vector<std::unique_ptr<HotSlot>> hot_slots;
  const bool hot;                    // options.thread_cache and membarrier_ready()
  std::atomic<bool> closing{false};  // the last handle is going: no more parking
  const std::uint64_t serial = next_serial();
  // In a child forked after the pool was made, its lock may be held by a
  // thread that does not exist there: the pool is then never locked again
  // (acquire and friends throw UsedAfterForkError, returned blocks are dropped).
  const std::uint64_t fork_generation = current_fork_generation();
  bool forked() const noexcept { return fork_generation != current_fork_generation(); }
  void refuse_if_forked(const char* api) const {
    if (forked()) [[unlikely]]
      throw UsedAfterForkError(api);
  }

  PoolCore(ContextRef c, PinnedPoolOptions o)
      : context(std::move(c)), options(o), hot(o.thread_cache && membarrier_ready()) {}

  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> counter{0};
    return counter.fetch_add(1) + 1;
  }

  // A block taken out of a hot slot goes into the free list of its own size
  // (under `mutex`) and stops counting as in use. The size is the entry's
  // own, never the slot's label: the owner may relabel its slot at any time.
  void file_unparked(PoolEntry* e) noexcept {
    const std::size_t bytes = e->buffer.size();
    counts.bytes_in_use -= bytes;
    --counts.blocks_in_use;
    auto& list = free[class_index(bytes)];
    if (list.size() < list.capacity()) {
      list.push_back(e);
    } else {
      forget(bytes);  // no room was reserved for it (see acquire): freed instead
      delete e;
    }
  }
  // Takes every parked block back into the free lists (under `mutex`).
  void unpark_all() noexcept {
    for (auto& slot : hot_slots) {
      if (PoolEntry* e = slot->entry.exchange(nullptr, std::memory_order_acquire)) file_unparked(e);
    }
  }
  // A parked block of size class `cls`, taken back for an acquire (under
  // `mutex`). The slot's label is only a hint: between reading it and taking
  // the entry, the owner can take its block back and park one of another
  // class, so the entry taken is checked; one of another class goes to its
  // own free list.
  PoolEntry* unpark_one(std::size_t cls) noexcept {
    for (auto& slot : hot_slots) {
      if (slot->size_class.load(std::memory_order_relaxed) != cls ||
          slot->entry.load(std::memory_order_relaxed) == nullptr)
        continue;
      test_hooks::at(test_hooks::Point::pool_unpark);
      PoolEntry* e = slot->entry.exchange(nullptr, std::memory_order_acquire);
      if (e == nullptr) continue;
      if (e->buffer.size() == cls) return e;
      file_unparked(e);
    }
    return nullptr;
  }
  // This thread's slot, made on first use (under `mutex`); null if it cannot be allocated.
  HotSlot* slot_of_this_thread() noexcept {
    const auto me = std::this_thread::get_id();
    for (auto& slot : hot_slots) {
      if (slot->owner == me) return slot.get();
    }
    try {
      auto slot = std::make_unique<HotSlot>();
      slot->owner = me;
      hot_slots.push_back(std::move(slot));
      return hot_slots.back().get();
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  ~PoolCore() {
    for (auto& list : free) {
      for (PoolEntry* e : list) delete e;
    }
  }
  PoolCore(const PoolCore&) = delete;
  PoolCore& operator=(const PoolCore&) = delete;

  std::size_t bytes_cached() const noexcept { return counts.bytes_total - counts.bytes_in_use; }
  PinnedPoolStats snapshot() const noexcept {
    PinnedPoolStats s;
    std::uint64_t hot_reuses = 0;
    std::size_t hot_bytes = 0, hot_blocks = 0;
    for (const auto& slot : hot_slots) {
      hot_reuses += slot->reuses.load(std::memory_order_relaxed);
      if (slot->entry.load(std::memory_order_acquire) != nullptr) {
        hot_bytes += slot->size_class.load(std::memory_order_relaxed);
        ++hot_blocks;
      }
    }
    s.acquires = counts.reuses + hot_reuses + counts.allocations + counts.failures;
    s.reuses = counts.reuses + hot_reuses;
    s.allocations = counts.allocations;
    s.frees = counts.frees;
    s.waits_skipped = counts.waits_skipped;
    s.bytes_in_use = counts.bytes_in_use - hot_bytes;
    s.blocks_in_use = counts.blocks_in_use - hot_blocks;
    s.bytes_cached = bytes_cached() + hot_bytes;
    s.blocks_cached = counts.blocks_total - counts.blocks_in_use + hot_blocks;
    return s;
  }
  // A free block of class `cls` is handed out again (under `mutex`).
  void count_reuse(std::size_t cls) noexcept {
    ++counts.reuses;
    counts.bytes_in_use += cls;
    ++counts.blocks_in_use;
  }
  // A block leaves the pool's books (freed).
  void forget(std::size_t bytes) noexcept {
    ++counts.frees;
    counts.bytes_total -= bytes;
    --counts.blocks_total;
    --blocks_of_class[class_index(bytes)];
  }

  // The deleter of the handles' shared pointer: blocks still out keep the pool
  // (and their memory) alive; counting them under the lock spares every
  // acquire and release a reference-count update.
  static void handles_gone(PoolCore* core) noexcept {
    // In a forked child the lock may be held by a thread that is not there,
    // and a parked block's `parking` mark may never clear: the pool and its
    // memory are left as they are (no lock, no wait, no driver call), as
    // drop_in_forked_child() leaves a block.
    if (core->forked()) [[unlikely]]
      return;
    bury_the_dead();
    if (core->hot) {
      // After this fence, a thread that starts to park a block sees
      // `closing` and returns its block through the lock instead (the block
      // still counts as in use, so the pool outlives that return); one that
      // had started before it is waited for, and its block is then visible
      // to unpark_all() (see give_back_ready()).
      core->closing.store(true, std::memory_order_relaxed);
      fence_every_thread();
      std::vector<HotSlot*> slots;
      {
        std::lock_guard<SpinLock> lock(core->mutex);
        for (auto& slot : core->hot_slots) {
          try {
            slots.push_back(slot.get());
          } catch (const std::bad_alloc&) {
            // Too little memory to list them: wait for each one under the
            // lock (parking itself never takes the lock).
            while (slot->parking.load(std::memory_order_acquire)) cpu_pause();
          }
        }
      }
      for (HotSlot* slot : slots) {
        while (slot->parking.load(std::memory_order_acquire)) std::this_thread::yield();
      }
    }
    {
      std::lock_guard<SpinLock> lock(core->mutex);
      core->unpark_all();
      if (core->counts.blocks_in_use != 0) {
        core->orphaned = true;
        return;
      }
    }
    delete core;
  }

  std::size_t size_class(std::size_t bytes) const noexcept {
    return std::bit_ceil(std::max(bytes, options.min_block_bytes));
  }
  static std::size_t class_index(std::size_t cls) noexcept { return static_cast<std::size_t>(std::countr_zero(cls)); }

  // Returns a block's entry. `may_call_driver` is false inside a host function
  // (where CUDA calls are forbidden): the block is then cached even above the cap.
  // May delete the pool (its last block back after its last handle).
  void give_back(PoolEntry* raw, std::optional<Event> event, bool may_call_driver) noexcept {
    if (in_host_function()) may_call_driver = false;  // a block released by user code inside a host function
    std::unique_ptr<PoolEntry> entry(raw);
    if (event) entry->event = std::move(event);
    const std::size_t bytes = entry->buffer.size();
    bool last = false;
    {
      std::lock_guard<SpinLock> lock(mutex);
      counts.bytes_in_use -= bytes;
      --counts.blocks_in_use;
      last = orphaned && counts.blocks_in_use == 0;
      auto& list = free[class_index(bytes)];
      const bool room = list.size() < list.capacity();  // pushing never allocates (or throws)
      // A block with an event may still be in use by its stream: cached over
      // the cap (freeing it would make the driver wait for the device, maybe
      // under a caller's lock); trim() frees it once its stream has passed it.
      if (!last && room && (!may_call_driver || entry->event || bytes_cached() <= options.max_cached_bytes)) {
        list.push_back(entry.release());
        return;
      }
      forget(bytes);
      if (!last && entry->event) {
        try {
          test_hooks::fail_allocation_if_asked();
          spare_events.push_back(std::move(*entry->event));
        } catch (const std::bad_alloc&) {
          // No room to keep the event: it goes with the entry, below.
        }
      }
    }
    if (last && !may_call_driver) {
      // Inside a host function, where no driver call is allowed, the pool's
      // memory cannot be freed: it waits for the next pool created or dropped.
      std::lock_guard<std::mutex> lock(graveyard_mutex());
      graveyard().emplace_back(this, std::move(entry));
      return;
    }
    // Freed outside the lock: cuMemFreeHost may take a while.
    entry.reset();
    if (last) delete this;
  }

  // Pools whose last block came back inside a host function, with that block.
  static std::mutex& graveyard_mutex() noexcept {
    static std::mutex& m = []() -> std::mutex& {
      static std::mutex mutex;
      // Held across fork(), so a child never inherits it locked by a thread that is not there.
      pthread_atfork([] { mutex.lock(); }, [] { mutex.unlock(); }, [] { mutex.unlock(); });
      return mutex;
    }();
    return m;
  }
  static std::vector<std::pair<PoolCore*, std::unique_ptr<PoolEntry>>>& graveyard() noexcept {
    static auto* g =
        new std::vector<std::pair<PoolCore*, std::unique_ptr<PoolEntry>>>;  // never destroyed: no frees at exit
    return *g;
  }
  static void bury_the_dead() noexcept {
    std::vector<std::pair<PoolCore*, std::unique_ptr<PoolEntry>>> dead;
    {
      std::lock_guard<std::mutex> lock(graveyard_mutex());
      dead.swap(graveyard());
    }
    for (auto& [core, entry] : dead) {
      entry.reset();
      delete core;
    }
  }

  // The common return (no event, room under the cap, pool alive): one short
  // lock, a push, counters; anything else takes give_back().
  //
  // Parking: mark the slot busy, then look at `closing`. The pool's last
  // handle sets `closing`, fences every thread (membarrier), then waits for
  // busy slots to clear. So either this thread marked its slot before that
  // fence (the handle waits for it; the block stored meanwhile is visible to
  // unpark_all()), or it sees `closing` and returns the block through the
  // lock. Once the block is stored and the mark cleared, nothing of the pool
  // is touched: its last handle may delete it at any moment from then on.
  static void give_back_ready(PinnedBlock& block) noexcept {
    PoolCore& core = *block.pool_;
    const std::size_t bytes = block.capacity_;
    if (core.forked()) [[unlikely]]
      return drop_in_forked_child(block);
    if (t_hot.serial == core.serial) {
      HotSlot& slot = *t_hot.slot;
      if (slot.entry.load(std::memory_order_relaxed) == nullptr) {
        slot.parking.store(true, std::memory_order_relaxed);
        // Paired with the fence in handles_gone(): no CPU fence needed here.
        std::atomic_signal_fence(std::memory_order_seq_cst);
        if (!core.closing.load(std::memory_order_relaxed)) [[likely]] {
          PoolEntry* e = std::exchange(block.entry_, nullptr);
          block.data_ = nullptr;
          block.pool_ = nullptr;
          slot.size_class.store(bytes, std::memory_order_relaxed);
          test_hooks::at(test_hooks::Point::pool_park);
          slot.entry.store(e, std::memory_order_release);
          slot.parking.store(false, std::memory_order_release);
          return;
        }
        slot.parking.store(false, std::memory_order_release);
      }
    }
    give_back_locked(block);
  }

  // The return through the lock (kept out of give_back_ready() so that its
  // hot path needs no stack frame).
  [[gnu::noinline]] static void give_back_locked(PinnedBlock& block) noexcept {
    PoolCore& core = *block.pool_;
    const std::size_t bytes = block.capacity_;
    {
      std::lock_guard<SpinLock> lock(core.mutex);
      test_hooks::at(test_hooks::Point::pool_locked);
      if (core.hot && t_hot.serial != core.serial && !core.orphaned && !core.closing.load(std::memory_order_relaxed)) {
        // From the next release on, this thread parks its block here.
        if (HotSlot* slot = core.slot_of_this_thread()) t_hot = ThreadHot{core.serial, slot};
      }
      auto& list = core.free[class_index(bytes)];
      if (!core.orphaned && core.bytes_cached() + bytes <= core.options.max_cached_bytes &&
          list.size() < list.capacity()) {
        core.counts.bytes_in_use -= bytes;
        --core.counts.blocks_in_use;
        list.push_back(block.entry_);
        block.data_ = nullptr;
        block.entry_ = nullptr;
        block.pool_ = nullptr;
        return;
      }
    }
    give_back_slowly(block);
  }
  // Kept out of line so that the fast path above needs no stack frame for
  // the optional event it passes.
  [[gnu::noinline]] static void give_back_slowly(PinnedBlock& block) noexcept { give_back(block, std::nullopt, true); }

  static void give_back(PinnedBlock& block, std::optional<Event> event, bool may_call_driver) noexcept {
    block.data_ = nullptr;
    std::exchange(block.pool_, nullptr)
        ->give_back(std::exchange(block.entry_, nullptr), std::move(event), may_call_driver);
  }

  // In a forked child: the block and its pinned memory are left as they are
  // (no lock, no driver call; the child's copy of them is never freed).
  [[gnu::noinline, gnu::cold]] static void drop_in_forked_child(PinnedBlock& block) noexcept {
    block.data_ = nullptr;
    block.entry_ = nullptr;
    block.pool_ = nullptr;
  }

  // Returns `block` from inside a host function: no driver call may happen there.
  static void release_in_host_func(PinnedBlock& block) noexcept {
    if (block.data_ != nullptr) give_back(block, std::nullopt, false);
  }

  // Frees ready cached blocks down to `keep` bytes cached; returns the bytes freed.
  std::size_t trim(std::size_t keep) {
    refuse_if_forked("PinnedPool::trim");
    std::vector<std::unique_ptr<PoolEntry>> doomed;
    std::size_t freed = 0;
    {
      std::lock_guard<SpinLock> lock(mutex);
      unpark_all();
      for (auto& list : free) {
        for (auto it = list.begin(); it != list.end() && bytes_cached() > keep;) {
          PoolEntry& e = **it;
          bool ready = true;
          if (e.event) {
            try {
              ready = e.event->ref().query();
            } catch (const Error&) {
              ready = false;  // its stream failed: the error belongs to whoever synchronises it
            }
          }
          if (!ready) {
            ++it;
            continue;
          }
          if (e.event) spare_events.push_back(std::move(*e.event));
          forget(e.buffer.size());
          freed += e.buffer.size();
          doomed.emplace_back(*it);
          it = list.erase(it);
        }
      }
    }
    return freed;
  }
};

}  // namespace drvshim::detail
