#include <drvshim/driver.hpp>
#include <drvshim/event.hpp>
#include <drvshim/staging.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include "context_scope.hpp"
#include "core.hpp"
#include "log_internal.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace detail {

bool host_is_page_locked(const DriverCore& core, const void* address);

// ---- the pool ---------------------------------------------------------------------------------------

// One pinned allocation, for its whole life in the pool: in a free list (the
// pool owns it) or held by a PinnedBlock (which points at it). Keeping the
// record with the block makes acquire and release a push and a pop under one
// short lock, with no map and no heap allocation: the 1 MiB reuse target is a
// few tens of nanoseconds, next to the driver's own 4 µs for a small pinned
// alloc + free.
struct PoolEntry {
  explicit PoolEntry(PinnedBuffer b) noexcept : buffer(std::move(b)) {}
  PinnedBuffer buffer;
  std::optional<Event> event;  // set: reusable once it has completed
};

// A spin-wait hint to the CPU (lets a sibling hyperthread run).
inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// The pool's lock: held for a few pushes and pops (and, for blocks released
// after a stream, a cuEventQuery), so spinning beats a futex-backed mutex,
// whose lock + unlock pair costs as much as the whole reuse.
class SpinLock {
 public:
  void lock() noexcept {
    for (;;) {
      if (!held_.exchange(true, std::memory_order_acquire)) return;
      for (int spins = 0; held_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
          cpu_pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

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
  std::vector<Event> spare_events;
  // The counters a reuse must touch are few; the rest of PinnedPoolStats is
  // derived from them (cached = allocated - in use; acquires = reuses +
  // allocations + failures).
  struct Counts {
    std::uint64_t reuses = 0, allocations = 0, frees = 0, waits_skipped = 0, failures = 0;
    std::size_t bytes_in_use = 0, blocks_in_use = 0, bytes_total = 0, blocks_total = 0;
  } counts;
  bool orphaned = false;  // no PinnedPool handle is left: the last block returned deletes the pool

  PoolCore(ContextRef c, PinnedPoolOptions o) : context(std::move(c)), options(o) {}
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
    s.acquires = counts.reuses + counts.allocations + counts.failures;
    s.reuses = counts.reuses;
    s.allocations = counts.allocations;
    s.frees = counts.frees;
    s.waits_skipped = counts.waits_skipped;
    s.bytes_in_use = counts.bytes_in_use;
    s.blocks_in_use = counts.blocks_in_use;
    s.bytes_cached = bytes_cached();
    s.blocks_cached = counts.blocks_total - counts.blocks_in_use;
    return s;
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
    bury_the_dead();
    {
      std::lock_guard<SpinLock> lock(core->mutex);
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
      if (!last && room && (!may_call_driver || bytes_cached() <= options.max_cached_bytes)) {
        list.push_back(entry.release());
        return;
      }
      forget(bytes);
      if (!last && entry->event) spare_events.push_back(std::move(*entry->event));
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
    static std::mutex m;
    return m;
  }
  static std::vector<std::pair<PoolCore*, std::unique_ptr<PoolEntry>>>& graveyard() noexcept {
    static auto* g = new std::vector<std::pair<PoolCore*, std::unique_ptr<PoolEntry>>>;  // never destroyed: no frees at exit
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
  static void give_back_ready(PinnedBlock& block) noexcept {
    PoolCore& core = *block.pool_;
    const std::size_t bytes = block.capacity_;
    {
      std::lock_guard<SpinLock> lock(core.mutex);
      auto& list = core.free[class_index(bytes)];
      if (!core.orphaned && core.bytes_cached() + bytes <= core.options.max_cached_bytes && list.size() < list.capacity()) {
        core.counts.bytes_in_use -= bytes;
        --core.counts.blocks_in_use;
        list.push_back(block.entry_);
        block.data_ = nullptr;
        block.entry_ = nullptr;
        block.pool_ = nullptr;
        return;
      }
    }
    give_back(block, std::nullopt, true);
  }

  static void give_back(PinnedBlock& block, std::optional<Event> event, bool may_call_driver) noexcept {
    block.data_ = nullptr;
    std::exchange(block.pool_, nullptr)->give_back(std::exchange(block.entry_, nullptr), std::move(event), may_call_driver);
  }

  // Returns `block` from inside a host function: no driver call may happen there.
  static void release_in_host_func(PinnedBlock& block) noexcept {
    if (block.data_ != nullptr) give_back(block, std::nullopt, false);
  }

  // Frees ready cached blocks down to `keep` bytes cached; returns the bytes freed.
  std::size_t trim(std::size_t keep) {
    std::vector<std::unique_ptr<PoolEntry>> doomed;
    std::size_t freed = 0;
    {
      std::lock_guard<SpinLock> lock(mutex);
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

}  // namespace detail

PinnedBlock::PinnedBlock(PinnedBlock&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)), entry_(std::exchange(o.entry_, nullptr)), data_(std::exchange(o.data_, nullptr)),
      size_(o.size_), capacity_(o.capacity_) {}

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

void PinnedBlock::release_after(const StreamRef& stream) {
  if (data_ == nullptr) return;
  std::optional<Event> event;
  {
    std::lock_guard<detail::SpinLock> lock(pool_->mutex);
    if (!pool_->spare_events.empty()) {
      event.emplace(std::move(pool_->spare_events.back()));
      pool_->spare_events.pop_back();
    }
  }
  if (!event) event.emplace(Event::create(pool_->context, EventFlags::disable_timing));
  try {
    event->ref().record(stream);
  } catch (...) {
    std::lock_guard<detail::SpinLock> lock(pool_->mutex);
    pool_->spare_events.push_back(std::move(*event));
    throw;
  }
  detail::PoolCore::give_back(*this, std::move(event), true);
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
  detail::PoolCore::bury_the_dead();
  core_ = std::shared_ptr<detail::PoolCore>(new detail::PoolCore(context, options), &detail::PoolCore::handles_gone);
}

std::size_t PinnedPool::size_class(std::size_t bytes) const noexcept { return core_->size_class(bytes); }
const ContextRef& PinnedPool::context() const noexcept { return core_->context; }

PinnedBlock PinnedPool::acquire(std::size_t bytes) const {
  if (bytes - 1 >= (std::size_t{1} << 62)) [[unlikely]] {
    throw InvalidArgumentError("PinnedPool::acquire", fmt::format("{} bytes requested", bytes),
                               bytes == 0 ? "ask for at least one byte" : "ask for less than 2^62 bytes");
  }
  auto& c = *core_;
  const std::size_t cls = c.size_class(bytes);
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
      if (i + 1 == list.size()) {
        list.pop_back();
      } else {
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      }
      ++c.counts.reuses;
      c.counts.bytes_in_use += cls;
      ++c.counts.blocks_in_use;
      return PinnedBlock(core_.get(), e, static_cast<std::byte*>(e->buffer.data()), bytes, cls);
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
  auto* data = static_cast<std::byte*>(entry->buffer.data());
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

PinnedPoolStats PinnedPool::stats() const {
  std::lock_guard<detail::SpinLock> lock(core_->mutex);
  return core_->snapshot();
}

// ---- the staging engine -----------------------------------------------------------------------------

namespace detail {


// Copies with non-temporal (streaming) stores where the CPU has them: the
// bytes go to memory instead of into this core's cache, and no line is read
// before it is overwritten. A DMA that reads lines still dirty in some core's
// cache has to pull each one out of it: on the H200 machine a 16 MiB DMA ran
// at 45.5 GB/s right after the CPU wrote its source, 53.5 GB/s otherwise.
// (AVX-512 full-line stores measured the same there: 16 bytes at a time it is.)
inline void stream_copy_sse2(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  const std::size_t head = std::min(n, (16 - (reinterpret_cast<std::uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  auto* d = reinterpret_cast<__m128i*>(dst);
  const auto* s = reinterpret_cast<const __m128i*>(src);
  for (std::size_t i = 0; i < n / 64; ++i, d += 4, s += 4) {
    const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
    _mm_stream_si128(d, a);
    _mm_stream_si128(d + 1, b);
    _mm_stream_si128(d + 2, c);
    _mm_stream_si128(d + 3, e);
  }
  std::memcpy(reinterpret_cast<std::byte*>(d), reinterpret_cast<const std::byte*>(s), n % 64);
  // Streaming stores are weakly ordered: fenced before the piece is counted as done.
  _mm_sfence();
#else
  std::memcpy(dst, src, n);
#endif
}

// Which side's writes stream (DRVSHIM_STAGING_STORES, read once: "auto",
// "stream" or "plain"). auto: H2D chunks under 8 MiB stream into staging;
// stream: both directions, every chunk; plain: memcpy everywhere. A tuning
// and diagnosis switch; the default came from the H200 sweeps in docs/staging.md
// (streaming D2H writes measured no faster: 43.8 against 47.1 GB/s at 16 MiB).
enum class Stores { automatic, stream, plain };
inline Stores stores_mode() noexcept {
  static const Stores mode = [] {
    const char* v = std::getenv("DRVSHIM_STAGING_STORES");
    if (v != nullptr && std::strcmp(v, "stream") == 0) return Stores::stream;
    if (v != nullptr && std::strcmp(v, "plain") == 0) return Stores::plain;
    return Stores::automatic;
  }();
  return mode;
}

// One staged copy, shared by the thread that runs it (the conductor: it
// issues every DMA and watches every event) and the crew. The host-side work
// is cut into pieces, one per thread and chunk, handed out in order from
// one counter; a piece of chunk c may be copied once c < `open_below` (to the
// device: the chunk's ring slot is no longer read by an earlier DMA; to the
// host: the chunk's DMA has landed). Nobody waits for a whole chunk to be
// split and joined: whoever is free takes the next piece, so a helper that
// wakes late costs a share of the work, never a stall, and the conductor
// issues a chunk's DMA the moment its last piece is in.
struct StagingJob {
  bool to_device = true;
  bool streaming = false;  // the host-side writes (into staging, or into the user's buffer) stream
  std::byte* host = nullptr;  // the pageable side (read for H2D, written for D2H)
  std::size_t chunks = 0, total_pieces = 0;
  std::vector<std::size_t> begin;        // chunk c covers bytes [begin[c], begin[c + 1])
  std::vector<std::size_t> first_piece;  // chunk c's pieces are [first_piece[c], first_piece[c + 1])
  std::vector<std::uint32_t> chunk_of;   // the chunk of each piece
  std::vector<std::byte*> slots;         // ring slot memory; chunk c uses slot c % slots.size()
  std::unique_ptr<std::atomic<std::uint32_t>[]> remaining;  // per chunk: pieces not yet copied
  std::atomic<std::size_t> next_piece{0};
  std::atomic<std::size_t> open_below{0};
  std::atomic<bool> abort{false};

  // Cuts the copy at `bounds` (chunk starts, then the end) into pieces: one
  // per thread and chunk, none under 64 KiB.
  void plan(std::vector<std::size_t> bounds, std::size_t threads) {
    begin = std::move(bounds);
    chunks = begin.size() - 1;
    first_piece.assign(1, 0);
    chunk_of.clear();
    for (std::size_t c = 0; c < chunks; ++c) {
      const std::size_t n = std::clamp<std::size_t>((chunk_size(c) + 65535) / 65536, 1, threads);
      chunk_of.insert(chunk_of.end(), n, static_cast<std::uint32_t>(c));
      first_piece.push_back(first_piece.back() + n);
    }
    total_pieces = first_piece.back();
    remaining = std::make_unique<std::atomic<std::uint32_t>[]>(chunks);
    for (std::size_t c = 0; c < chunks; ++c) {
      remaining[c].store(static_cast<std::uint32_t>(first_piece[c + 1] - first_piece[c]));
    }
  }

  std::size_t chunk_size(std::size_t c) const noexcept { return begin[c + 1] - begin[c]; }

  void copy_piece(std::size_t p) noexcept {
    const std::size_t c = chunk_of[p];
    const std::size_t size = chunk_size(c), parts = first_piece[c + 1] - first_piece[c];
    const std::size_t piece = (size / parts + 63) / 64 * 64;
    const std::size_t at = (p - first_piece[c]) * piece;
    if (at < size) {
      std::byte* slot = slots[c % slots.size()] + at;
      std::byte* user = host + begin[c] + at;
      const std::size_t n = std::min(piece, size - at);
      std::byte* to = to_device ? slot : user;
      const std::byte* from = to_device ? user : slot;
      if (streaming) {
        stream_copy_sse2(to, from, n);
      } else {
        std::memcpy(to, from, n);
      }
    }
    remaining[c].fetch_sub(1, std::memory_order_release);
  }

  // A helper's turn: claims pieces in order, waiting for their chunk to open.
  // Returns false when none is left or the copy was abandoned.
  bool take_piece() noexcept {
    const std::size_t p = next_piece.fetch_add(1, std::memory_order_relaxed);
    if (p >= total_pieces) return false;
    const std::size_t c = chunk_of[p];
    while (open_below.load(std::memory_order_acquire) <= c) {
      if (abort.load(std::memory_order_relaxed)) {
        remaining[c].fetch_sub(1, std::memory_order_release);
        return false;
      }
      cpu_pause();
    }
    copy_piece(p);
    return true;
  }

  // The conductor's turn: takes the next piece only if its chunk is open (the
  // conductor must never wait for a chunk only it can open).
  bool try_piece() noexcept {
    std::size_t p = next_piece.load(std::memory_order_relaxed);
    while (p < total_pieces && chunk_of[p] < open_below.load(std::memory_order_relaxed)) {
      if (next_piece.compare_exchange_weak(p, p + 1, std::memory_order_relaxed)) {
        copy_piece(p);
        return true;
      }
    }
    return false;
  }

  bool chunk_done(std::size_t c) const noexcept { return remaining[c].load(std::memory_order_acquire) == 0; }
};

// Helper threads for the host-side copies. Between copies they spin for a
// while (waking a sleeping thread costs tens of microseconds on a VM, as much
// as a chunk's DMA), then sleep on a futex (std::atomic::wait: a wake-up
// needs no mutex, so a dozen helpers wake in parallel); a copy's first pieces
// are taken by whoever is awake.
class CopyCrew {
 public:
  // How long an idle helper spins before it sleeps.
  static constexpr std::chrono::microseconds kSpin{300};

  explicit CopyCrew(unsigned helpers) {
    for (unsigned i = 0; i < helpers; ++i) threads_.emplace_back([this] { run(); });
  }
  ~CopyCrew() {
    stop_.store(true);
    ring();
    for (auto& t : threads_) t.join();
  }
  CopyCrew(const CopyCrew&) = delete;
  CopyCrew& operator=(const CopyCrew&) = delete;

  std::size_t size() const noexcept { return threads_.size(); }

  // Wakes sleeping helpers ahead of a job: they spin until it is published.
  void rouse() {
    if (sleepers_.load() != 0) ring();
  }

  void publish(StagingJob* job) {
    job_.store(job);
    generation_.fetch_add(1);
    if (sleepers_.load() != 0) ring();
  }

  // Closes the job to late joiners and waits for every helper to leave it.
  void retire() noexcept {
    job_.store(nullptr);
    while (active_.load() != 0) cpu_pause();
  }

 private:
  void ring() {
    bell_.fetch_add(1);
    bell_.notify_all();
  }

  void run() {
    std::uint64_t seen = generation_.load();
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      for (unsigned i = 1; generation_.load() == seen && !stop_.load(); ++i) {
        cpu_pause();
        if (i % 64 == 0 && std::chrono::steady_clock::now() > until) break;
      }
      if (generation_.load() == seen && !stop_.load()) {
        // Read the bell before the last look: a job published after that
        // look rings it, and wait() returns at once.
        const std::uint32_t bell = bell_.load();
        sleepers_.fetch_add(1);
        if (generation_.load() == seen && !stop_.load()) bell_.wait(bell);
        sleepers_.fetch_sub(1);
        continue;  // woken (or roused): spin for the job
      }
      if (stop_.load()) return;
      seen = generation_.load();
      // Joining is announced before the job is read, so retire() (which
      // clears the job, then waits for the count) never misses a joiner.
      active_.fetch_add(1);
      if (StagingJob* job = job_.load()) {
        while (job->take_piece()) {
        }
      }
      active_.fetch_sub(1);
    }
  }

  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::uint32_t> bell_{0};
  std::atomic<StagingJob*> job_{nullptr};
  std::atomic<int> active_{0}, sleepers_{0};
};

// The chunk for a copy of `bytes`: the configured size, or when that is 0,
// a quarter of the copy between 1 and 8 MiB (H200: a DMA of 2 MiB pieces
// runs at ~50 GB/s, of 4 MiB ones at ~52, of 16 MiB at ~54).
inline std::size_t chunk_for(const StagingOptions& o, std::size_t bytes) {
  if (o.chunk_bytes != 0) return o.chunk_bytes;
  const std::size_t quarter = (bytes / 4 + 65535) / 65536 * 65536;
  return std::clamp(quarter, std::size_t{1} << 20, std::size_t{8} << 20);
}

// Where a copy is cut: chunks of chunk_for(), but (with the automatic chunk)
// starting at 256 KiB and doubling up to it, so the first DMA starts after a
// small host copy instead of a whole chunk's; for device to host the same
// cuts reversed, so the last chunk (whose host copy follows every DMA) is
// the small one. Returns the chunk starts followed by the end.
inline std::vector<std::size_t> cuts_for(const StagingOptions& o, std::size_t bytes, bool to_device) {
  const std::size_t chunk = chunk_for(o, bytes);
  std::vector<std::size_t> sizes;
  std::size_t next = o.chunk_bytes == 0 ? std::min<std::size_t>(chunk, 256 << 10) : chunk;
  for (std::size_t done = 0; done < bytes;) {
    sizes.push_back(std::min(next, bytes - done));
    done += sizes.back();
    next = std::min(next * 2, chunk);
  }
  if (!to_device) std::reverse(sizes.begin(), sizes.end());
  std::vector<std::size_t> cuts{0};
  for (const std::size_t n : sizes) cuts.push_back(cuts.back() + n);
  return cuts;
}

// The ring's depth: the configured one, or as many blocks as fit in 32 MiB,
// 4 to 8 (the sweep's best: 2 MiB chunks eight deep for 16 MiB copies, 8 MiB
// chunks four deep for 256 MiB ones).
inline std::size_t depth_for(const StagingOptions& o, std::size_t chunk) {
  if (o.depth != 0) return o.depth;
  return std::clamp<std::size_t>((std::size_t{32} << 20) / chunk, 4, 8);
}

// Chunks below this are written into staging with streaming stores. Measured
// on the H200 machine: 2-4 MiB chunks of a 16 MiB copy went from 21-31 to
// 30-37 GB/s with them; 8 MiB chunks of a 256 MiB copy dropped from ~49 to
// ~39 GB/s (ordinary stores copy faster, and lines that large leave the
// cache before their DMA reads them anyway).
constexpr std::size_t kStreamBelow = std::size_t{8} << 20;

struct StagingCore {
  PinnedPool pool;
  StagingOptions options;
  Stream stream;
  std::mutex copy_mutex;  // one copy at a time: the ring, its events and the crew are per engine
  std::vector<Event> events;  // one per ring slot, created at the first staged copy and kept
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
    if (!go_direct) stats.bytes_staged += bytes;
    return go_direct;
  }
};

namespace {

// A staged copy in progress: its ring (blocks from the pool, the engine's
// events), the job the crew works on, and which slots a DMA may still use.
class StagedCopy {
 public:
  StagedCopy(StagingCore& c, bool to_device, std::byte* host, std::size_t bytes, const StreamRef& stream)
      : c_(c),
        stream_(stream),
        scope_(*c.pool.context().device().core(), c.pool.context().address(),
               to_device ? "StagingEngine::copy_to_device" : "StagingEngine::copy_to_host") {
    c_.crew.rouse();
    StagingJob& j = job_;
    j.to_device = to_device;
    j.host = host;
    const std::size_t chunk = chunk_for(c.options, bytes);
    switch (stores_mode()) {
      case Stores::automatic: j.streaming = to_device && chunk < kStreamBelow; break;
      case Stores::stream: j.streaming = true; break;
      case Stores::plain: j.streaming = false; break;
    }
    j.plan(cuts_for(c.options, bytes, to_device), c.crew.size() + 1);
    {
      std::lock_guard<std::mutex> lock(c.stats_mutex);
      c.stats.chunks += j.chunks;
    }
    const std::size_t slots = std::min<std::size_t>(depth_for(c.options, chunk), j.chunks);
    while (c.events.size() < slots) c.events.push_back(Event::create(c.pool.context(), EventFlags::disable_timing));
    blocks_.reserve(slots);
    busy_.assign(slots, false);
    for (std::size_t i = 0; i < slots; ++i) {
      blocks_.push_back(c.pool.acquire(std::min(chunk, bytes)));
      j.slots.push_back(blocks_.back().data());
    }
  }
  StagedCopy(const StagedCopy&) = delete;
  StagedCopy& operator=(const StagedCopy&) = delete;

  // On any exit: the crew has left the job, and no DMA still uses a block
  // that goes back to the pool (after an error: every in-flight DMA waited
  // for, errors of that wait dropped, as the first error is on its way).
  ~StagedCopy() {
    job_.abort.store(true);
    c_.crew.retire();
    bool waited = false;
    for (std::size_t s = 0; s < busy_.size(); ++s) {
      if (!busy_[s] || waited) continue;
      try {
        stream_.synchronize();
      } catch (...) {
        // The error being thrown is the first one; a second report of it is dropped.
      }
      waited = true;
    }
  }

  void to_device(DeviceSpan<std::byte> dst, bool wait_at_end) {
    StagingJob& j = job_;
    const std::size_t slots = blocks_.size();
    j.open_below.store(slots, std::memory_order_release);
    c_.crew.publish(&j);
    std::size_t issued = 0, landed = 0;
    while (issued < j.chunks) {
      if (j.chunk_done(issued)) {
        const std::size_t s = issued % slots, n = j.chunk_size(issued);
        copy_async(stream_, dst.subspan(j.begin[issued], n), std::span<const std::byte>(j.slots[s], n));
        c_.events[s].ref().record(stream_);
        busy_[s] = true;
        ++issued;
      } else if (landed < issued && landed + slots < j.chunks && c_.events[landed % slots].ref().query()) {
        busy_[landed % slots] = false;
        ++landed;
        j.open_below.store(landed + slots, std::memory_order_release);
      } else if (!j.try_piece()) {
        cpu_pause();
      }
    }
    c_.crew.retire();  // every piece is in: the source has been read completely
    if (wait_at_end) {
      stream_.synchronize();
      busy_.assign(busy_.size(), false);
      return;
    }
    // Still in flight (stream-ordered form): reusable once the stream passes this point.
    for (std::size_t s = 0; s < slots; ++s) {
      if (!busy_[s]) continue;
      blocks_[s].release_after(stream_);
      busy_[s] = false;
    }
  }

  void to_host(DeviceSpan<const std::byte> src) {
    StagingJob& j = job_;
    const std::size_t slots = blocks_.size();
    std::size_t issued = 0, landed = 0, emptied = 0;
    auto issue = [&] {
      const std::size_t s = issued % slots, n = j.chunk_size(issued);
      copy_async(stream_, std::span<std::byte>(j.slots[s], n), src.subspan(j.begin[issued], n));
      c_.events[s].ref().record(stream_);
      busy_[s] = true;
      ++issued;
    };
    while (issued < slots) issue();
    c_.crew.publish(&j);
    while (emptied < j.chunks) {
      if (landed < issued && c_.events[landed % slots].ref().query()) {
        busy_[landed % slots] = false;
        ++landed;
        j.open_below.store(landed, std::memory_order_release);
      } else if (emptied < landed && j.chunk_done(emptied)) {
        ++emptied;
        if (issued < j.chunks) issue();  // into the slot just emptied
      } else if (!j.try_piece()) {
        cpu_pause();
      }
    }
  }

 private:
  StagingCore& c_;
  StreamRef stream_;
  // The context stays current for the whole copy, so each DMA, record and
  // query inside skips its own push and pop.
  ContextScope scope_;
  StagingJob job_;
  std::vector<PinnedBlock> blocks_;  // declared after job_: returned only after the destructor body ran
  std::vector<bool> busy_;           // slot s: a DMA queued on it may not have completed
};

void check_sizes(const char* api, std::size_t dst, std::size_t src) {
  if (dst != src) {
    throw InvalidArgumentError(api, fmt::format("destination has {} bytes, source {}", dst, src),
                               "pass spans of the same size");
  }
}

}  // namespace

void stage_to_device(StagingCore& c, DeviceSpan<std::byte> dst, std::span<const std::byte> src, const StreamRef& stream,
                     bool wait_at_end) {
  // The job writes through `host` only when copying to the host.
  StagedCopy copy(c, true, const_cast<std::byte*>(src.data()), src.size(), stream);
  copy.to_device(dst, wait_at_end);
}

void stage_to_host(StagingCore& c, std::span<std::byte> dst, DeviceSpan<const std::byte> src, const StreamRef& stream) {
  StagedCopy copy(c, false, dst.data(), dst.size(), stream);
  copy.to_host(src);
}

}  // namespace detail

StagingEngine::StagingEngine(const PinnedPool& pool, StagingOptions options) {
  if (options.depth == 1 || options.threads > 64) {
    throw InvalidArgumentError(
        "StagingEngine",
        fmt::format("chunk_bytes {}, depth {}, threads {}", options.chunk_bytes, options.depth, options.threads),
        "use a depth of 0 (automatic) or at least 2, and 0 (automatic) to 64 threads");
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
  const std::size_t chunk = detail::chunk_for(c.options, dst.size());
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
