#include <drvshim/driver.hpp>
#include <drvshim/event.hpp>
#include <drvshim/staging.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core.hpp"
#include "log_internal.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace detail {

bool host_is_page_locked(const DriverCore& core, const void* address);

// ---- the pool ---------------------------------------------------------------------------------------

struct PoolCore {
  ContextRef context;
  PinnedPoolOptions options;
  mutable std::mutex mutex;
  struct Cached {
    PinnedBuffer buffer;
    std::optional<Event> event;  // set: reusable once it has completed
  };
  std::map<std::size_t, std::vector<Cached>> free;  // by size class
  std::map<const std::byte*, PinnedBuffer> in_use;
  std::vector<Event> spare_events;
  PinnedPoolStats stats;

  PoolCore(ContextRef c, PinnedPoolOptions o) : context(std::move(c)), options(o) {}

  std::size_t size_class(std::size_t bytes) const noexcept {
    return std::bit_ceil(std::max(bytes, options.min_block_bytes));
  }

  // Returns a block. `may_call_driver` is false inside a host function (where
  // CUDA calls are forbidden): the block is then cached even above the cap.
  void give_back(const std::byte* data, std::optional<Event> event, bool may_call_driver) noexcept {
    std::optional<PinnedBuffer> to_free;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = in_use.find(data);
      if (it == in_use.end()) return;
      PinnedBuffer buffer = std::move(it->second);
      in_use.erase(it);
      stats.bytes_in_use -= buffer.size();
      --stats.blocks_in_use;
      if (may_call_driver && stats.bytes_cached + buffer.size() > options.max_cached_bytes) {
        to_free.emplace(std::move(buffer));
        ++stats.frees;
        if (event) spare_events.push_back(std::move(*event));
      } else {
        stats.bytes_cached += buffer.size();
        ++stats.blocks_cached;
        free[buffer.size()].push_back(Cached{std::move(buffer), std::move(event)});
      }
    }
    // Freed outside the lock: cuMemFreeHost may take a while.
    to_free.reset();
  }

  // Returns `block` from inside a host function: no driver call may happen there.
  static void release_in_host_func(PinnedBlock& block) noexcept {
    if (block.data_ == nullptr) return;
    block.pool_->give_back(std::exchange(block.data_, nullptr), std::nullopt, false);
    block.pool_.reset();
  }

  // Frees ready cached blocks down to `keep` bytes cached; returns the bytes freed.
  std::size_t trim(std::size_t keep) {
    std::vector<PinnedBuffer> doomed;
    std::size_t freed = 0;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto& [cls, list] : free) {
        for (auto it = list.begin(); it != list.end() && stats.bytes_cached > keep;) {
          bool ready = true;
          if (it->event) {
            try {
              ready = it->event->ref().query();
            } catch (const Error&) {
              ready = false;  // its stream failed: the error belongs to whoever synchronises it
            }
          }
          if (!ready) {
            ++it;
            continue;
          }
          if (it->event) spare_events.push_back(std::move(*it->event));
          stats.bytes_cached -= it->buffer.size();
          --stats.blocks_cached;
          ++stats.frees;
          freed += it->buffer.size();
          doomed.push_back(std::move(it->buffer));
          it = list.erase(it);
        }
      }
    }
    return freed;
  }
};

}  // namespace detail

PinnedBlock::PinnedBlock(PinnedBlock&& o) noexcept
    : pool_(std::move(o.pool_)), data_(std::exchange(o.data_, nullptr)), size_(o.size_), capacity_(o.capacity_) {}

PinnedBlock& PinnedBlock::operator=(PinnedBlock&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::move(o.pool_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = o.size_;
    capacity_ = o.capacity_;
  }
  return *this;
}

PinnedBlock::~PinnedBlock() { release(); }

void PinnedBlock::release() noexcept {
  if (data_ == nullptr) return;
  pool_->give_back(std::exchange(data_, nullptr), std::nullopt, true);
  pool_.reset();
}

void PinnedBlock::release_after(const StreamRef& stream) {
  if (data_ == nullptr) return;
  std::optional<Event> event;
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    if (!pool_->spare_events.empty()) {
      event.emplace(std::move(pool_->spare_events.back()));
      pool_->spare_events.pop_back();
    }
  }
  if (!event) event.emplace(Event::create(pool_->context, EventFlags::disable_timing));
  try {
    event->ref().record(stream);
  } catch (...) {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    pool_->spare_events.push_back(std::move(*event));
    throw;
  }
  pool_->give_back(std::exchange(data_, nullptr), std::move(event), true);
  pool_.reset();
}

PinnedPool::PinnedPool(const ContextRef& context, PinnedPoolOptions options) {
  if (options.min_block_bytes == 0 || !std::has_single_bit(options.min_block_bytes)) {
    throw InvalidArgumentError("PinnedPool", fmt::format("min_block_bytes {} is not a power of two", options.min_block_bytes),
                               "use a power of two such as 65536");
  }
  if ((static_cast<unsigned>(options.flags) & ~0x7u) != 0) {
    throw InvalidArgumentError("PinnedPool", fmt::format("unknown HostAllocFlags bits 0x{:x}", static_cast<unsigned>(options.flags)),
                               "combine HostAllocFlags values only");
  }
  core_ = std::make_shared<detail::PoolCore>(context, options);
}

std::size_t PinnedPool::size_class(std::size_t bytes) const noexcept { return core_->size_class(bytes); }
const ContextRef& PinnedPool::context() const noexcept { return core_->context; }

PinnedBlock PinnedPool::acquire(std::size_t bytes) const {
  if (bytes == 0) {
    throw InvalidArgumentError("PinnedPool::acquire", "0 bytes requested", "ask for at least one byte");
  }
  auto& c = *core_;
  const std::size_t cls = c.size_class(bytes);
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    ++c.stats.acquires;
    auto& list = c.free[cls];
    // Most recently returned first: its memory is the likeliest to be warm.
    for (auto it = list.rbegin(); it != list.rend(); ++it) {
      if (it->event && !it->event->ref().query()) {
        ++c.stats.waits_skipped;
        continue;
      }
      PinnedBuffer buffer = std::move(it->buffer);
      if (it->event) c.spare_events.push_back(std::move(*it->event));
      list.erase(std::next(it).base());
      c.stats.bytes_cached -= buffer.size();
      --c.stats.blocks_cached;
      ++c.stats.reuses;
      auto* data = static_cast<std::byte*>(buffer.data());
      c.stats.bytes_in_use += buffer.size();
      ++c.stats.blocks_in_use;
      c.in_use.emplace(data, std::move(buffer));
      return PinnedBlock(core_, data, bytes, cls);
    }
  }
  std::optional<PinnedBuffer> buffer;
  try {
    buffer.emplace(PinnedBuffer::allocate(c.context, cls, c.options.flags));
  } catch (const OutOfMemoryError&) {
    // Cached blocks of other classes may be what keeps the host from pinning more.
    if (c.trim(0) == 0) throw;
    buffer.emplace(PinnedBuffer::allocate(c.context, cls, c.options.flags));
  }
  auto* data = static_cast<std::byte*>(buffer->data());
  std::lock_guard<std::mutex> lock(c.mutex);
  ++c.stats.allocations;
  c.stats.bytes_in_use += cls;
  ++c.stats.blocks_in_use;
  c.in_use.emplace(data, std::move(*buffer));
  return PinnedBlock(core_, data, bytes, cls);
}

std::size_t PinnedPool::trim(std::size_t keep_bytes) const { return core_->trim(keep_bytes); }

PinnedPoolStats PinnedPool::stats() const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  return core_->stats;
}

// ---- the staging engine -----------------------------------------------------------------------------

namespace detail {

// Helper threads for the host-side copies: one memcpy split into parts, the
// calling thread doing the first part itself. Helpers spin briefly between
// parts (a futex wake-up of a dozen threads costs tens of microseconds, as
// much as copying a part), then sleep on a condition variable.
class CopyCrew {
 public:
  explicit CopyCrew(unsigned helpers) {
    for (unsigned i = 0; i < helpers; ++i) threads_.emplace_back([this, i] { run(i + 1); });
  }
  ~CopyCrew() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  CopyCrew(const CopyCrew&) = delete;
  CopyCrew& operator=(const CopyCrew&) = delete;

  void copy(void* dst, const void* src, std::size_t bytes) {
    // Below this, splitting costs more than it saves.
    constexpr std::size_t kParallelFrom = std::size_t{256} << 10;
    if (threads_.empty() || bytes < kParallelFrom) {
      std::memcpy(dst, src, bytes);
      return;
    }
    const std::size_t parts = threads_.size() + 1;
    per_ = (bytes / parts + 63) / 64 * 64;
    dst_ = static_cast<std::byte*>(dst);
    src_ = static_cast<const std::byte*>(src);
    bytes_ = bytes;
    pending_.store(threads_.size());
    generation_.fetch_add(1);  // publishes the job (sequentially consistent)
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    std::memcpy(dst, src, std::min(per_, bytes));
    while (pending_.load() != 0) pause();
  }

 private:
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  void run(std::size_t part) {
    std::uint64_t seen = 0;
    for (;;) {
      // Spin about 0.2 ms for the next job before sleeping.
      for (int i = 0; i < 20000 && generation_.load() == seen && !stop_.load(); ++i) pause();
      if (generation_.load() == seen && !stop_.load()) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
        sleepers_.fetch_sub(1);
      }
      if (stop_.load()) return;
      seen = generation_.load();
      const std::size_t begin = std::min(part * per_, bytes_);
      const bool last = part == threads_.size();
      const std::size_t end = last ? bytes_ : std::min(begin + per_, bytes_);
      if (end > begin) std::memcpy(dst_ + begin, src_ + begin, end - begin);
      pending_.fetch_sub(1);
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::size_t> pending_{0};
  std::atomic<int> sleepers_{0};
  // The job: written by copy() before the generation bump, read by helpers after seeing it.
  std::byte* dst_ = nullptr;
  const std::byte* src_ = nullptr;
  std::size_t bytes_ = 0, per_ = 0;
};

// The chunk for a copy of `bytes`: the configured size, but small enough that
// even a copy of a few chunks' size is split into four, so DMA and host copy overlap.
inline std::size_t chunk_for(const StagingOptions& o, std::size_t bytes) {
  const std::size_t quarter = (bytes / 4 + 4095) / 4096 * 4096;
  return std::max<std::size_t>(std::min(o.chunk_bytes, quarter), std::min<std::size_t>(o.chunk_bytes, 1 << 20));
}

struct StagingCore {
  PinnedPool pool;
  StagingOptions options;
  Stream stream;
  std::mutex copy_mutex;  // one copy at a time: the ring and the crew are per engine
  CopyCrew crew;
  mutable std::mutex stats_mutex;
  StagingStats stats;

  StagingCore(const PinnedPool& p, const StagingOptions& o)
      : pool(p), options(resolved(o)), stream(Stream::create(p.context(), StreamFlags::non_blocking)),
        crew(options.threads - 1) {}

  static StagingOptions resolved(StagingOptions o) {
    if (o.threads == 0) o.threads = std::clamp(std::thread::hardware_concurrency() * 3 / 4, 1u, 12u);
    return o;
  }

  // Whether this copy goes straight to the driver, and counts it.
  bool direct(const void* host, std::size_t bytes) {
    bool go_direct = bytes < options.direct_below;
    if (!go_direct) go_direct = host_is_page_locked(*pool.context().device().core(), host);
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++(go_direct ? stats.direct_copies : stats.staged_copies);
    if (!go_direct) {
      const std::size_t chunk = chunk_for(options, bytes);
      stats.chunks += (bytes + chunk - 1) / chunk;
      stats.bytes_staged += bytes;
    }
    return go_direct;
  }
};

namespace {

// One slot of the ring: a staging block and the event after its last DMA.
struct Slot {
  PinnedBlock block;
  Event done;
  bool busy = false;
};

std::vector<Slot> make_ring(StagingCore& c, std::size_t bytes, std::size_t chunk) {
  std::vector<Slot> ring;
  const std::size_t chunks = (bytes + chunk - 1) / chunk;
  const std::size_t slots = std::min<std::size_t>(c.options.depth, chunks);
  ring.reserve(slots);
  for (std::size_t i = 0; i < slots; ++i) {
    ring.push_back(Slot{c.pool.acquire(std::min(chunk, bytes)),
                        Event::create(c.pool.context(), EventFlags::disable_timing), false});
  }
  return ring;
}

// Waits for every DMA still reading or writing a slot, swallowing errors when
// an error is already on its way (the first error is the one reported).
void drain(std::vector<Slot>& ring, bool rethrow) {
  for (auto& s : ring) {
    if (!s.busy) continue;
    s.busy = false;
    try {
      s.done.ref().synchronize();
    } catch (...) {
      if (rethrow) throw;
    }
  }
}

// Runs `body`, and on any exception drains the ring before rethrowing, so no
// staging block goes back to the pool while a DMA may still use it.
template <class F>
void guarded(std::vector<Slot>& ring, const StreamRef& stream, F&& body) {
  try {
    body();
  } catch (...) {
    drain(ring, false);
    try {
      stream.synchronize();
    } catch (...) {
      // The error being thrown is the first one; a second report of it is dropped.
    }
    throw;
  }
}

void check_sizes(const char* api, std::size_t dst, std::size_t src) {
  if (dst != src) {
    throw InvalidArgumentError(api, fmt::format("destination has {} bytes, source {}", dst, src),
                               "pass spans of the same size");
  }
}

}  // namespace

// Host to device through the ring on `stream`: for each chunk, wait until its
// slot's previous DMA is done, copy the chunk into the slot (the crew), queue
// the DMA and record the slot's event. Returns with the source fully read.
void stage_to_device(StagingCore& c, DeviceSpan<std::byte> dst, std::span<const std::byte> src, const StreamRef& stream,
                     bool wait_at_end) {
  const std::size_t chunk = chunk_for(c.options, src.size());
  std::vector<Slot> ring = make_ring(c, src.size(), chunk);
  guarded(ring, stream, [&] {
    std::size_t index = 0;
    for (std::size_t offset = 0; offset < src.size(); offset += chunk, ++index) {
      Slot& s = ring[index % ring.size()];
      if (s.busy) s.done.ref().synchronize();
      s.busy = false;
      const std::size_t n = std::min(chunk, src.size() - offset);
      c.crew.copy(s.block.data(), src.data() + offset, n);
      copy_async(stream, dst.subspan(offset, n), std::span<const std::byte>(s.block.data(), n));
      s.done.ref().record(stream);
      s.busy = true;
    }
    if (wait_at_end) {
      stream.synchronize();
      for (auto& s : ring) s.busy = false;
    }
  });
  guarded(ring, stream, [&] {
    for (auto& s : ring) {
      // Still in flight (async form): reusable once the stream passes this point.
      if (s.busy) {
        s.block.release_after(stream);
        s.busy = false;
      }
    }
  });
}

// Device to host through the ring: up to `depth` DMAs ahead; each chunk is
// copied out of its slot once its event completes, then the slot takes the next DMA.
void stage_to_host(StagingCore& c, std::span<std::byte> dst, DeviceSpan<const std::byte> src, const StreamRef& stream) {
  const std::size_t chunk = chunk_for(c.options, src.size_bytes());
  std::vector<Slot> ring = make_ring(c, src.size_bytes(), chunk);
  guarded(ring, stream, [&] {
    const std::size_t total = src.size_bytes();
    const std::size_t chunks = (total + chunk - 1) / chunk;
    auto issue = [&](std::size_t i) {
      Slot& s = ring[i % ring.size()];
      const std::size_t n = std::min(chunk, total - i * chunk);
      copy_async(stream, std::span<std::byte>(s.block.data(), n), src.subspan(i * chunk, n));
      s.done.ref().record(stream);
      s.busy = true;
    };
    for (std::size_t i = 0; i < std::min(chunks, ring.size()); ++i) issue(i);
    for (std::size_t i = 0; i < chunks; ++i) {
      Slot& s = ring[i % ring.size()];
      s.done.ref().synchronize();
      s.busy = false;
      const std::size_t n = std::min(chunk, total - i * chunk);
      c.crew.copy(dst.data() + i * chunk, s.block.data(), n);
      if (i + ring.size() < chunks) issue(i + ring.size());
    }
  });
}

}  // namespace detail

StagingEngine::StagingEngine(const PinnedPool& pool, StagingOptions options) {
  if (options.chunk_bytes == 0 || options.depth < 2 || options.threads > 64) {
    throw InvalidArgumentError(
        "StagingEngine",
        fmt::format("chunk_bytes {}, depth {}, threads {}", options.chunk_bytes, options.depth, options.threads),
        "use chunk_bytes > 0, depth >= 2 and 0 (automatic) to 64 threads");
  }
  core_ = std::make_shared<detail::StagingCore>(pool, options);
}

const StagingOptions& StagingEngine::options() const noexcept { return core_->options; }
const PinnedPool& StagingEngine::pool() const noexcept { return core_->pool; }

StagingStats StagingEngine::stats() const {
  std::lock_guard<std::mutex> lock(core_->stats_mutex);
  return core_->stats;
}

void StagingEngine::copy_to_device(DeviceSpan<std::byte> dst, std::span<const std::byte> src) const {
  detail::check_sizes("StagingEngine::copy_to_device", dst.size_bytes(), src.size());
  auto& c = *core_;
  if (src.empty()) return;
  if (c.direct(src.data(), src.size())) return copy(dst, src);
  std::lock_guard<std::mutex> lock(c.copy_mutex);
  detail::stage_to_device(c, dst, src, c.stream.ref(), true);
}

void StagingEngine::copy_to_host(std::span<std::byte> dst, DeviceSpan<const std::byte> src) const {
  detail::check_sizes("StagingEngine::copy_to_host", dst.size(), src.size_bytes());
  auto& c = *core_;
  if (dst.empty()) return;
  if (c.direct(dst.data(), dst.size())) return copy(dst, src);
  std::lock_guard<std::mutex> lock(c.copy_mutex);
  detail::stage_to_host(c, dst, src, c.stream.ref());
}

void StagingEngine::copy_to_device_async(DeviceSpan<std::byte> dst, std::span<const std::byte> src,
                                         const StreamRef& stream) const {
  detail::check_sizes("StagingEngine::copy_to_device_async", dst.size_bytes(), src.size());
  auto& c = *core_;
  if (src.empty()) return;
  if (c.direct(src.data(), src.size())) {
    // The driver's own pageable path is synchronous for the source, like this form promises.
    return copy_async(stream, dst, src);
  }
  std::lock_guard<std::mutex> lock(c.copy_mutex);
  detail::stage_to_device(c, dst, src, stream, false);
}

void StagingEngine::copy_to_host_async(std::span<std::byte> dst, DeviceSpan<const std::byte> src,
                                       const StreamRef& stream) const {
  detail::check_sizes("StagingEngine::copy_to_host_async", dst.size(), src.size_bytes());
  auto& c = *core_;
  if (dst.empty()) return;
  if (c.direct(dst.data(), dst.size())) return copy_async(stream, dst, src);
  // Stream-ordered: each chunk's DMA into a staging block, then a host
  // function on the same stream copying it out and returning the block (no
  // driver call inside: host functions must not make any). Stream order makes
  // a block reusable once its host function has run.
  const std::size_t chunk = c.options.chunk_bytes;
  for (std::size_t offset = 0; offset < dst.size(); offset += chunk) {
    const std::size_t n = std::min(chunk, dst.size() - offset);
    auto block = std::make_shared<PinnedBlock>(c.pool.acquire(n));
    copy_async(stream, std::span<std::byte>(block->data(), n), src.subspan(offset, n));
    std::byte* out = dst.data() + offset;
    stream.launch_host_func([block, out, n] {
      std::memcpy(out, block->data(), n);
      detail::PoolCore::release_in_host_func(*block);
    });
  }
}

}  // namespace drvshim
