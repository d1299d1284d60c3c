// SPDX-License-Identifier: Apache-2.0
// PinnedPool and PinnedBlock (pinned_pool.hpp): the public members over the
// pool's core (pool_core.hpp).
#include <drvshim/error.hpp>
#include <drvshim/event.hpp>
#include <drvshim/memory.hpp>
#include <drvshim/pinned_pool.hpp>
#include <drvshim/stream.hpp>

#include <bit>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <utility>

#include "log_internal.hpp"
#include "pool/pool_core.hpp"
#include "streams/capture_check.hpp"

namespace drvshim {

PinnedBlock::PinnedBlock(PinnedBlock&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)),
      entry_(std::exchange(o.entry_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      size_(o.size_),
      capacity_(o.capacity_) {}

PinnedBlock& PinnedBlock::operator=(PinnedBlock&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::exchange(o.pool_, nullptr);
    entry_ = std::exchange(o.entry_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = o.size_;
    capacity_ = o.capacity_;
  }
  return *this;
}

PinnedBlock::~PinnedBlock() { release(); }

void PinnedBlock::release() noexcept {
  if (data_ != nullptr) detail::PoolCore::give_back_ready(*this);
}

namespace {

// A spare event of the pool's context, or a new one.
Event pool_event(detail::PoolCore& pool) {
  {
    std::lock_guard<detail::SpinLock> lock(pool.mutex);
    if (!pool.spare_events.empty()) {
      Event event = std::move(pool.spare_events.back());
      pool.spare_events.pop_back();
      return event;
    }
  }
  return Event::create(pool.context, EventFlags::disable_timing);
}

void keep_spare(detail::PoolCore& pool, Event&& event) noexcept {
  std::lock_guard<detail::SpinLock> lock(pool.mutex);
  try {
    pool.spare_events.push_back(std::move(event));
  } catch (const std::bad_alloc&) {
    // No room to keep it: destroyed when `event` goes.
  }
}

// A relay stream of the pool whose earlier waits are over, or a new one
// (under `relay_mutex`). One stream per pending wait: a stream of another
// device that never gets past its release point (held, waiting for the host)
// holds back only the blocks released after it.
StreamRef idle_relay(detail::PoolCore& pool) {
  for (const Stream& relay : pool.relays) {
    try {
      if (relay.ref().ready()) return relay.ref();
    } catch (const Error&) {
      // A wait that failed with its stream's context: that relay stays out of use.
    }
  }
  pool.relays.push_back(Stream::create(pool.context, StreamFlags::non_blocking));
  return pool.relays.back().ref();
}

}  // namespace

void PinnedBlock::release_after(const StreamRef& stream) {
  if (data_ == nullptr) return;
  detail::PoolCore& pool = *pool_;
  pool.refuse_if_forked("PinnedBlock::release_after");
  // Recorded in a capture, the release event would mark the block free while
  // a graph still copies from it at each launch.
  detail::refuse_if_capturing(stream, "PinnedBlock::release_after",
                              "a graph's copies from the block run at each of its launches, after the block went "
                              "to its next owner: copy from memory the graph owns as long as it lives (a "
                              "PinnedBuffer), or release the block after a stream that does not capture");
  // The driver records an event only on a stream of the event's own context.
  // For a stream of another context (portable blocks may serve several
  // devices), the pool keeps no event of that context: the context may end
  // while the block waits, and its events with it, after which querying or
  // destroying one would touch a dead handle (or another context's event
  // made at the same address). Instead, an idle relay stream of the pool waits for
  // that stream's current point (cuStreamWaitEvent across contexts) and the
  // pool's own event is recorded after the wait; the other context's event
  // is destroyed at once, which the driver allows while the wait is queued.
  const ContextRef& stream_ctx = stream.context();
  if (stream_ctx.address() == pool.context.address()) {
    Event event = pool_event(pool);
    try {
      event.ref().record(stream);
    } catch (...) {
      keep_spare(pool, std::move(event));
      throw;
    }
    detail::PoolCore::give_back(*this, std::move(event), true);
    return;
  }
  Event event = pool_event(pool);
  try {
    std::lock_guard<std::mutex> relay_lock(pool.relay_mutex);
    const StreamRef relay = idle_relay(pool);
    Event theirs = Event::create(stream_ctx, EventFlags::disable_timing);
    theirs.ref().record(stream);
    relay.wait(theirs.ref());
    event.ref().record(relay);
  } catch (...) {
    keep_spare(pool, std::move(event));
    throw;
  }
  // After the relay's lock is let go: the return may end the pool.
  detail::PoolCore::give_back(*this, std::move(event), true);
}

PinnedPool::PinnedPool(const ContextRef& context, PinnedPoolOptions options) {
  if (options.min_block_bytes == 0 || !std::has_single_bit(options.min_block_bytes)) {
    throw InvalidArgumentError("PinnedPool",
                               fmt::format("min_block_bytes {} is not a power of two", options.min_block_bytes),
                               "use a power of two such as 65536");
  }
  if ((static_cast<unsigned>(options.flags) & ~0x7u) != 0) {
    throw InvalidArgumentError("PinnedPool",
                               fmt::format("unknown HostAllocFlags bits 0x{:x}", static_cast<unsigned>(options.flags)),
                               "combine HostAllocFlags values only");
  }
  detail::PoolCore::bury_the_dead();
  core_ = std::shared_ptr<detail::PoolCore>(new detail::PoolCore(context, options), &detail::PoolCore::handles_gone);
}

std::size_t PinnedPool::size_class(std::size_t bytes) const noexcept { return core_->size_class(bytes); }
const ContextRef& PinnedPool::context() const noexcept { return core_->context; }

namespace {
// Out of line, so that acquire() needs no stack frame for building an error.
[[noreturn, gnu::noinline, gnu::cold]] void refuse_acquire(std::size_t bytes) {
  throw InvalidArgumentError("PinnedPool::acquire", fmt::format("{} bytes requested", bytes),
                             bytes == 0 ? "ask for at least one byte" : "ask for less than 2^62 bytes");
}
}  // namespace

PinnedBlock PinnedPool::acquire(std::size_t bytes) const {
  if (bytes - 1 >= (std::size_t{1} << 62)) [[unlikely]]
    refuse_acquire(bytes);
  auto& c = *core_;
  c.refuse_if_forked("PinnedPool::acquire");
  const std::size_t cls = c.size_class(bytes);
  if (detail::t_hot.serial == c.serial) {
    // This thread's parked block (see HotSlot).
    detail::HotSlot& slot = *detail::t_hot.slot;
    if (slot.size_class.load(std::memory_order_relaxed) == cls &&
        slot.entry.load(std::memory_order_relaxed) != nullptr) {
      if (detail::PoolEntry* e = slot.entry.exchange(nullptr, std::memory_order_acquire)) {
        slot.reuses.store(slot.reuses.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return PinnedBlock(core_.get(), e, e->data, bytes, cls);
      }
    }
  }
  return acquire_locked(bytes, cls);
}

PinnedBlock PinnedPool::acquire_locked(std::size_t bytes, std::size_t cls) const {
  auto& c = *core_;
  {
    // The common case, kept short: the most recently returned block of the
    // class, returned without an event (reusable at once).
    std::lock_guard<detail::SpinLock> lock(c.mutex);
    auto& list = c.free[detail::PoolCore::class_index(cls)];
    if (!list.empty() && !list.back()->event) [[likely]] {
      detail::PoolEntry* e = list.back();
      list.pop_back();
      c.count_reuse(cls);
      return PinnedBlock(core_.get(), e, e->data, bytes, cls);
    }
  }
  return acquire_slowly(bytes, cls);
}

PinnedBlock PinnedPool::acquire_slowly(std::size_t bytes, std::size_t cls) const {
  auto& c = *core_;
  {
    std::lock_guard<detail::SpinLock> lock(c.mutex);
    auto& list = c.free[detail::PoolCore::class_index(cls)];
    // Most recently returned first: its memory is the likeliest to be warm.
    for (std::size_t i = list.size(); i-- > 0;) {
      detail::PoolEntry* e = list[i];
      if (e->event) {
        if (!e->event->ref().query()) {
          ++c.counts.waits_skipped;
          continue;
        }
        c.spare_events.push_back(std::move(*e->event));
        e->event.reset();
      }
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      c.count_reuse(cls);
      return PinnedBlock(core_.get(), e, e->data, bytes, cls);
    }
    // A block another thread parked (it counts as in use already).
    if (detail::PoolEntry* e = c.unpark_one(cls)) {
      ++c.counts.reuses;
      return PinnedBlock(core_.get(), e, e->data, bytes, cls);
    }
  }
  std::unique_ptr<detail::PoolEntry> entry;
  try {
    std::optional<PinnedBuffer> buffer;
    try {
      buffer.emplace(PinnedBuffer::allocate(c.context, cls, c.options.flags));
    } catch (const OutOfMemoryError&) {
      // Cached blocks of other classes may be what keeps the host from pinning more.
      if (c.trim(0) == 0) throw;
      buffer.emplace(PinnedBuffer::allocate(c.context, cls, c.options.flags));
    }
    entry = std::make_unique<detail::PoolEntry>(std::move(*buffer));
  } catch (...) {
    std::lock_guard<detail::SpinLock> lock(c.mutex);
    ++c.counts.failures;
    throw;
  }
  auto* data = entry->data;
  const std::size_t index = detail::PoolCore::class_index(cls);
  std::lock_guard<detail::SpinLock> lock(c.mutex);
  // Room for this block in its free list from now on (a failure here only
  // means the block is freed instead of cached when it comes back).
  try {
    c.free[index].reserve(++c.blocks_of_class[index]);
  } catch (const std::bad_alloc&) {
  }
  ++c.counts.allocations;
  c.counts.bytes_total += cls;
  ++c.counts.blocks_total;
  c.counts.bytes_in_use += cls;
  ++c.counts.blocks_in_use;
  return PinnedBlock(core_.get(), entry.release(), data, bytes, cls);
}

std::size_t PinnedPool::trim(std::size_t keep_bytes) const { return core_->trim(keep_bytes); }

const PinnedPoolOptions& PinnedPool::options() const noexcept { return core_->options; }

PinnedPoolStats PinnedPool::stats() const {
  core_->refuse_if_forked("PinnedPool::stats");
  std::lock_guard<detail::SpinLock> lock(core_->mutex);
  return core_->snapshot();
}

}  // namespace drvshim
