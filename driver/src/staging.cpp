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
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "backoff.hpp"
#include "context_scope.hpp"
#include "core.hpp"
#include "cpu_budget.hpp"
#include "cpu_pause.hpp"
#include "env.hpp"
#include "log_internal.hpp"
#include "pool_core.hpp"
#include "threads.hpp"

namespace drvshim {
namespace detail {

bool host_is_page_locked(const DriverCore& core, const void* address);

// How the host side of a staged copy writes its bytes.
//  - stream: non-temporal stores; the lines go to memory, not into a cache,
//    and none is read before it is overwritten.
//  - demote: ordinary stores, each line then pushed from this core's cache to
//    the shared last-level cache (CLDEMOTE), where a DMA reads it without
//    pulling it out of a core. On the H200 machine (Xeon, a 16-vCPU VM) this
//    took 16 MiB copies to the device from 60-64 % of pinned speed with
//    streaming stores (and ~50 % with ordinary ones) to 72-83 %.
//  - plain: memcpy. For copies of 32 MiB and more it measured best both ways
//    (256 MiB to the device: ~87 % against ~75 % with demote; lines that many
//    leave the cache before their DMA reads them anyway).
// Every variant fetches the source 4 KiB ahead (one thread copied a source
// out of cache ~30 % faster with it there: its hardware prefetcher alone
// keeps too few lines in flight).
enum class Kernel { plain, stream, demote };

inline bool cpu_has_cldemote() noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  return (c >> 25) & 1u;
#else
  return false;
#endif
}

inline void copy_bytes(std::byte* dst, const std::byte* src, std::size_t n, Kernel kernel) noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  if (kernel == Kernel::plain) {
    std::memcpy(dst, src, n);
    return;
  }
  const std::size_t head = std::min(n, (16 - (reinterpret_cast<std::uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  auto* d = reinterpret_cast<__m128i*>(dst);
  const auto* s = reinterpret_cast<const __m128i*>(src);
  for (std::size_t i = 0; i < n / 64; ++i, d += 4, s += 4) {
    _mm_prefetch(reinterpret_cast<const char*>(s) + 4096, _MM_HINT_T0);
    const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
    if (kernel == Kernel::stream) {
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    } else {
      _mm_store_si128(d, a);
      _mm_store_si128(d + 1, b);
      _mm_store_si128(d + 2, c);
      _mm_store_si128(d + 3, e);
      // CLDEMOTE [d] (0F 1C /0), spelled out so that no compiler flag is
      // needed; a CPU without it runs it as a no-op (a hint).
      asm volatile(".byte 0x0f, 0x1c, 0x00" : : "a"(d) : "memory");
    }
  }
  std::memcpy(reinterpret_cast<std::byte*>(d), reinterpret_cast<const std::byte*>(s), n % 64);
  // Streaming stores are weakly ordered: fenced before the piece is counted as done.
  if (kernel == Kernel::stream) _mm_sfence();
#else
  (void)kernel;
  std::memcpy(dst, src, n);
#endif
}

// DRVSHIM_STAGING_STORES, read once: "auto" (below), "stream", "demote" or
// "plain" (that kernel for every copy, both directions; demote only to the
// device, plain to the host). A tuning and diagnosis switch.
enum class Stores { automatic, stream, demote, plain };
inline Stores stores_mode() noexcept {
  static const Stores mode = [] {
    try {
      return static_cast<Stores>(env::choice("DRVSHIM_STAGING_STORES", {"auto", "stream", "demote", "plain"}, 0));
    } catch (...) {
      return Stores::automatic;
    }
  }();
  return mode;
}

// Copies below this size use the streaming kernels (see Kernel).
constexpr std::size_t kStreamBelow = std::size_t{32} << 20;

// The kernel for a copy: automatically, under kStreamBelow, demote to the
// device where the CPU has CLDEMOTE (streaming stores elsewhere) and
// streaming stores into the user's buffer to the host (16 MiB copies to the
// host: 70-77 % of pinned speed with ordinary stores, 83-86 % streaming);
// plain from there up.
inline Kernel kernel_for(bool to_device, std::size_t bytes) noexcept {
  static const bool demote = cpu_has_cldemote();
  switch (stores_mode()) {
    case Stores::stream: return Kernel::stream;
    case Stores::demote: return to_device ? Kernel::demote : Kernel::plain;
    case Stores::plain: return Kernel::plain;
    case Stores::automatic: break;
  }
  if (bytes >= kStreamBelow) return Kernel::plain;
  return to_device && demote ? Kernel::demote : Kernel::stream;
}

// How a copy of `bytes` is staged: the ring's blocks (their size is also
// the largest DMA), and the DMA sizes aimed at. Defaults from the H200
// measurements in docs/staging.md: each DMA costs about 2.6 µs (host to
// device) or 1.8 µs (device to host) on top of its bytes, so a 16 MiB copy
// wants a handful of DMAs, not dozens; one ring as big as a 16 MiB copy
// never waits for a block to come back.
struct RingPlan {
  std::size_t block_bytes = 0;  // each staging block; no DMA or piece crosses one
  std::size_t blocks = 0;       // ring depth (only as many as the copy needs)
  std::size_t batch = 0;        // to the device: a DMA queued behind a running one waits for this many bytes
  std::size_t top = 0;          // to the host: the largest DMA of the plan (it starts and ends small)
};
inline RingPlan ring_for(const StagingOptions& o, std::size_t bytes) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  RingPlan r;
  r.block_bytes = o.chunk_bytes != 0 ? o.chunk_bytes : std::clamp(std::bit_ceil(bytes), MiB, 8 * MiB);
  const std::size_t depth = o.depth != 0 ? o.depth : 4;
  r.blocks = std::min(depth, (bytes + r.block_bytes - 1) / r.block_bytes);
  r.batch = std::min(r.block_bytes, std::clamp(std::bit_floor(std::max<std::size_t>(bytes / 8, 1)), MiB, 8 * MiB));
  r.top = std::min(r.block_bytes, std::clamp(std::bit_floor(std::max<std::size_t>(bytes / 4, 1)), MiB, 8 * MiB));
  return r;
}

// Device-to-host DMA ends: a head of 256 KiB, 256 KiB, 512 KiB ... up to
// half of plan.top (top bytes in all, so the top-sized DMAs after it stay
// aligned to the blocks), top-sized DMAs, and the head again reversed: the
// first bytes land early, and the host-side copy after the last DMA is
// short. None crosses a block.
inline std::vector<std::size_t> host_dma_ends(const RingPlan& plan, std::size_t bytes) {
  constexpr std::size_t kFirst = std::size_t{256} << 10;
  std::size_t top = plan.top;
  while (top > kFirst && bytes < 2 * top) top /= 2;
  std::vector<std::size_t> head;
  if (bytes >= 2 * top && top >= 2 * kFirst) {
    head.push_back(kFirst);
    for (std::size_t n = kFirst; n < top; n *= 2) head.push_back(n);
  }
  std::vector<std::size_t> sizes = head;
  std::size_t middle = bytes - 2 * (head.empty() ? 0 : top);
  for (; middle > 0; middle -= std::min(middle, top)) sizes.push_back(std::min(middle, top));
  sizes.insert(sizes.end(), head.rbegin(), head.rend());
  std::vector<std::size_t> ends;
  std::size_t at = 0;
  for (const std::size_t n : sizes) {
    for (const std::size_t to = at + n; at < to;) {
      at = std::min(to, (at / plan.block_bytes + 1) * plan.block_bytes);
      ends.push_back(at);
    }
  }
  return ends;
}

// One staged copy, shared by the thread that runs it (the conductor: it
// issues every DMA and watches every event) and the crew (helpers that only
// copy bytes).
//
// The copy streams through a ring of pinned blocks: byte x of the copy is
// staged at ring position x mod ring_bytes. The host-side work is cut into
// pieces (64 KiB, growing to 128 KiB; none crosses a block) handed out in
// order from one counter; a piece may be copied once it ends at or below
// `open_until` (to the device: the ring bytes it overwrites have been read by
// their DMA; to the host: its bytes have landed). DMAs are not tied to
// pieces. To the device, each DMA takes everything copied in, in order, since
// the last one: the bus starts after the first 64 KiB, and a DMA never waits
// for the slowest of a dozen pieces of a big chunk (the first engine's
// 4 MiB chunks left the bus idle for ~80 µs at a time, H200 timeline in
// docs/staging.md). To the host the DMAs follow host_dma_ends().
struct StagingJob {
  // Pieces stay small: the bytes copied in, in order, lag the pieces handed
  // out by up to one piece per thread, and a 16 MiB copy to the device
  // measured 83-84 % of pinned speed with 128 KiB pieces against 80-81 %
  // with 256 KiB ones (paired runs on the H200 machine; larger copies the same).
  static constexpr std::size_t kPieceMax = std::size_t{128} << 10;
  // The conductor copies its pieces in slices this big and looks after the
  // DMAs between them (a whole piece can take 50 µs on a busy memory bus).
  static constexpr std::size_t kSlice = std::size_t{64} << 10;

  bool to_device = true;
  Kernel kernel = Kernel::plain;
  std::byte* host = nullptr;  // the pageable side (read for H2D, written for D2H)
  std::size_t bytes = 0;
  std::size_t block_bytes = 0, ring_bytes = 0;
  std::vector<std::byte*> blocks;
  std::vector<std::size_t> piece_at;  // piece p covers [piece_at[p], piece_at[p + 1])
  std::size_t pieces = 0;
  std::unique_ptr<std::atomic<bool>[]> done;  // per piece: its host-side copy is complete
  std::atomic<std::size_t> next_piece{0};
  std::atomic<std::size_t> open_until{0};
  std::atomic<bool> abort{false};

  // Pieces of 64 KiB, one per thread, then kPieceMax; shrinking again to
  // 64 KiB over the last few. A piece is copied by one thread at 5-9 GB/s
  // (H200 machine), so the bytes copied in, in order, grow only as fast as
  // one piece finishes, and small first pieces start the bus early (a 16 MiB
  // copy's DMAs ran back to back only from ~60-90 µs with two pieces of each
  // size up to 256 KiB). The final pieces, copied at the same time by
  // different threads, finish close together, so the last DMA (to the
  // device) or the work after the last landing (to the host) is small.
  void plan_pieces(std::size_t threads) {
    constexpr std::size_t kPieceMin = std::size_t{64} << 10;
    piece_at.assign(1, 0);
    std::size_t ramp = kPieceMin;
    for (std::size_t same = 0; piece_at.back() < bytes;) {
      const std::size_t at = piece_at.back();
      const std::size_t tail = std::max(kPieceMin, std::bit_floor(std::max<std::size_t>((bytes - at) / 8, 1)));
      piece_at.push_back(std::min({at + std::min(ramp, tail), (at / block_bytes + 1) * block_bytes, bytes}));
      if (++same == threads && ramp < kPieceMax) {
        ramp *= 2;
        same = 0;
      }
    }
    pieces = piece_at.size() - 1;
    done = std::make_unique<std::atomic<bool>[]>(pieces);
  }

  std::byte* staged(std::size_t x) const noexcept { return blocks[(x / block_bytes) % blocks.size()] + x % block_bytes; }

  // Copies piece p, calling `between` after each slice but the last (the
  // conductor's DMA bookkeeping; it may throw, leaving the piece undone).
  template <class Between>
  void copy_piece(std::size_t p, Between&& between) {
    const std::size_t end = piece_at[p + 1];
    for (std::size_t at = piece_at[p]; at < end;) {
      const std::size_t n = std::min(end - at, kSlice);
      std::byte* to = to_device ? staged(at) : host + at;
      const std::byte* from = to_device ? host + at : staged(at);
      copy_bytes(to, from, n, kernel);
      at += n;
      if (at < end) between();
    }
    done[p].store(true, std::memory_order_release);
  }

  // A helper's turn: claims the next piece, waits for it to open, copies it.
  // Returns false when none is left or the copy was abandoned.
  bool take_piece() noexcept {
    const std::size_t p = next_piece.fetch_add(1, std::memory_order_relaxed);
    if (p >= pieces) return false;
    Backoff backoff;
    while (open_until.load(std::memory_order_acquire) < piece_at[p + 1]) {
      if (abort.load(std::memory_order_relaxed)) return false;
      backoff.wait();
    }
    copy_piece(p, [] {});
    return true;
  }

  // The conductor's turn: takes the next piece only if it is open already
  // (the conductor must never wait for bytes only it can open).
  template <class Between>
  bool try_piece(Between&& between) {
    std::size_t p = next_piece.load(std::memory_order_relaxed);
    while (p < pieces && piece_at[p + 1] <= open_until.load(std::memory_order_acquire)) {
      if (next_piece.compare_exchange_weak(p, p + 1, std::memory_order_relaxed)) {
        copy_piece(p, between);
        return true;
      }
    }
    return false;
  }
};

// Helper threads for the host-side copies. Between copies they stay awake
// for StagingOptions::spin (pausing, and after the first 0.3 ms yielding to
// any other thread that wants the CPU), then sleep on a futex
// (std::atomic::wait). Waking a sleeping helper took 50-100 µs on the H200
// machine's VM (its virtual CPU halted), about a third of a 16 MiB copy.
// A copy wakes one sleeper, and each helper woken wakes two more: a wake-up
// is a system call of a few microseconds there, which the conductor should
// not make a dozen times before its first piece. A copy's first pieces are
// taken by whoever is awake.
class CopyCrew {
 public:
  // Throws SystemError when a helper cannot be started; the ones already
  // started are stopped first.
  CopyCrew(unsigned helpers, std::chrono::microseconds spin) : spin_(spin) {
    try {
      threads_.reserve(helpers);
      for (unsigned i = 0; i < helpers; ++i) threads_.push_back(start_thread("StagingEngine", [this] { run(); }));
    } catch (...) {
      stop();
      throw;
    }
  }
  ~CopyCrew() { stop(); }
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
    Backoff backoff;
    while (active_.load() != 0) backoff.wait();
  }

 private:
  void stop() noexcept {
    if (fork_generation_ != current_fork_generation()) [[unlikely]] {
      // A forked child has none of these threads: joining them would hang,
      // destroying them joinable would terminate. They are left behind.
      static auto* orphans = new std::vector<std::thread>;  // never destroyed
      for (auto& t : threads_) orphans->push_back(std::move(t));
      threads_.clear();
      return;
    }
    stop_.store(true);
    bell_.fetch_add(1);
    bell_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  void ring() {
    bell_.fetch_add(1);
    bell_.notify_one();
  }

  void run() {
    std::uint64_t seen = generation_.load();
    for (;;) {
      const auto start = std::chrono::steady_clock::now();
      for (unsigned i = 1; generation_.load() == seen && !stop_.load(); ++i) {
        cpu_pause();
        if (i % 64 == 0) {
          const auto awake = std::chrono::steady_clock::now() - start;
          if (awake > spin_) break;
          if (awake > std::chrono::microseconds(300)) std::this_thread::yield();
        }
      }
      if (generation_.load() == seen && !stop_.load()) {
        // Read the bell before the last look: a job published after that
        // look rings it, and wait() returns at once.
        const std::uint32_t bell = bell_.load();
        sleepers_.fetch_add(1);
        if (generation_.load() == seen && !stop_.load()) bell_.wait(bell);
        sleepers_.fetch_sub(1);
        // Pass the wake-up on (a tree, not a chain: two more each).
        for (int i = 0; i < 2 && sleepers_.load() != 0; ++i) bell_.notify_one();
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

  const std::chrono::microseconds spin_;
  const std::uint64_t fork_generation_ = current_fork_generation();
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::uint32_t> bell_{0};
  std::atomic<StagingJob*> job_{nullptr};
  std::atomic<int> active_{0}, sleepers_{0};
};

struct StagingCore {
  // DMAs of one copy that may be queued at once (each with its own event).
  static constexpr std::size_t kMaxInFlight = 8;

  PinnedPool pool;
  StagingOptions options;
  // Whether staging can beat the driver's own pageable path with this many
  // threads, per direction. One thread copies pageable memory at 5-9 GB/s on
  // the H200 machine; with the process restricted by taskset (2026-12-01, H200,
  // bench_staging copies): 1 CPU never wins; 2 CPUs win to the host (1.2-1.9x
  // the driver's path) but not always to the device (16 MiB: 0.9x); 4 CPUs
  // (3 threads) win both ways (1.3-2.3x). Below these counts every copy goes
  // straight to the driver. An explicit StagingOptions::threads is the
  // caller's choice: it stages from two threads either way.
  static constexpr unsigned kThreadsToStageToDevice = 3;
  static constexpr unsigned kThreadsToStageToHost = 2;
  const bool stage_to_device;
  const bool stage_to_host;
  Stream stream;
  std::mutex copy_mutex;      // one copy at a time: the ring, its events and the crew are per engine
  std::vector<Event> events;  // kMaxInFlight, created at the first staged copy and kept
  std::optional<Event> legacy_mark;  // recorded on the legacy stream by each synchronous copy
  CopyCrew crew;
  mutable std::mutex stats_mutex;
  StagingStats stats;

  StagingCore(const PinnedPool& p, const StagingOptions& o)
      : pool(p),
        options(resolved(o)),
        stage_to_device(options.threads >= (o.threads != 0 ? kThreadsToStageToHost : kThreadsToStageToDevice)),
        stage_to_host(options.threads >= kThreadsToStageToHost),
        stream(Stream::create(p.context(), StreamFlags::non_blocking)),
        crew(stage_to_device || stage_to_host ? options.threads - 1 : 0, options.spin) {}

  // The thread count: asked for, or three quarters of the CPUs this process
  // may use (its affinity mask and cgroup quota, not the machine's hardware
  // threads), rounded up, at most 12; never more than those CPUs.
  static StagingOptions resolved(StagingOptions o) {
    const unsigned cpus = usable_cpus();
    if (o.threads == 0) o.threads = std::clamp((cpus * 3 + 3) / 4, 1u, 12u);
    o.threads = std::min(o.threads, cpus);
    return o;
  }

  // Before any lock: in a forked child (a lock may be held by a thread that
  // is not there) and inside a host function, the engine is refused.
  void ensure_usable(const char* api) const { pool.context().device().core()->ensure_usable(api); }

  // Whether this copy goes straight to the driver, and counts it.
  bool direct(const void* host, std::size_t bytes, bool to_device) {
    bool go_direct = !(to_device ? stage_to_device : stage_to_host) || bytes < options.direct_below;
    if (!go_direct) go_direct = host_is_page_locked(*pool.context().device().core(), host);
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++(go_direct ? stats.direct_copies : stats.staged_copies);
    if (!go_direct) stats.bytes_staged += bytes;
    return go_direct;
  }
};

namespace {

// A staged copy in progress: its ring (blocks from the pool), the job the
// crew works on, and the DMAs queued (in order; DMA k uses the engine's
// event k mod kMaxInFlight).
class StagedCopy {
 public:
  StagedCopy(StagingCore& c, bool to_device, std::byte* host, std::size_t bytes, const StreamRef& stream)
      : c_(c),
        stream_(stream),
        scope_(*c.pool.context().device().core(), c.pool.context().address(),
               to_device ? "StagingEngine::copy_to_device" : "StagingEngine::copy_to_host"),
        plan_(ring_for(c.options, bytes)) {
    c_.crew.rouse();
    StagingJob& j = job_;
    j.to_device = to_device;
    j.host = host;
    j.bytes = bytes;
    j.kernel = kernel_for(to_device, bytes);
    j.block_bytes = plan_.block_bytes;
    j.ring_bytes = plan_.blocks * plan_.block_bytes;
    j.plan_pieces(c.crew.size() + 1);
    while (c.events.size() < StagingCore::kMaxInFlight) c.events.push_back(Event::create(c.pool.context(), EventFlags::disable_timing));
    blocks_.reserve(plan_.blocks);
    for (std::size_t i = 0; i < plan_.blocks; ++i) {
      blocks_.push_back(c.pool.acquire(plan_.block_bytes));
      j.blocks.push_back(blocks_.back().data());
    }
  }
  StagedCopy(const StagedCopy&) = delete;
  StagedCopy& operator=(const StagedCopy&) = delete;

  // On any exit: the crew has left the job, and no DMA still uses a block
  // that goes back to the pool (after an error: the stream waited for, errors
  // of that wait dropped, as the first error is on its way).
  ~StagedCopy() {
    job_.abort.store(true);
    c_.crew.retire();
    if (queued_) {
      try {
        stream_.synchronize();
      } catch (...) {
        // The error being thrown is the first one; a second report of it is dropped.
      }
    }
    std::lock_guard<std::mutex> lock(c_.stats_mutex);
    c_.stats.chunks += issued_;
  }

  // A synchronous copy is ordered as the driver's synchronous copies are:
  // after the work already queued on the legacy default stream (and, through
  // it, on every blocking stream). The engine's own stream is non-blocking,
  // so it waits for an event recorded there: two calls, no host wait.
  void order_after_legacy_stream() {
    if (!c_.legacy_mark) c_.legacy_mark.emplace(Event::create(c_.pool.context(), EventFlags::disable_timing));
    c_.legacy_mark->ref().record(StreamRef::legacy_default(c_.pool.context()));
    stream_.wait(c_.legacy_mark->ref());
  }

  void to_device(DeviceSpan<std::byte> dst, bool wait_at_end) {
    StagingJob& j = job_;
    if (wait_at_end) order_after_legacy_stream();
    dst_.emplace(dst);
    j.open_until.store(std::min(j.bytes, j.ring_bytes), std::memory_order_release);
    c_.crew.publish(&j);
    auto between = [this] { send(); };
    Backoff backoff;
    while (sent_ < j.bytes) {
      if (send() || j.try_piece(between)) {
        backoff.reset();
      } else {
        backoff.wait();
      }
    }
    c_.crew.retire();  // every piece is in: the source has been read completely
    if (wait_at_end) {
      stream_.synchronize();
      queued_ = false;
      return;
    }
    // Still in flight (stream-ordered form): reusable once the stream passes this point.
    if (landed_ < issued_) {
      for (auto& b : blocks_) b.release_after(stream_);
    }
    queued_ = false;
  }

  void to_host(DeviceSpan<const std::byte> src) {
    StagingJob& j = job_;
    order_after_legacy_stream();
    src_.emplace(src);
    ends_ = host_dma_ends(plan_, j.bytes);
    c_.crew.publish(&j);
    auto between = [this] { fetch(); };
    Backoff backoff;
    while (emptied_ < j.bytes) {
      if (fetch() || j.try_piece(between)) {
        backoff.reset();
      } else {
        backoff.wait();
      }
    }
    queued_ = false;  // every byte copied out: every DMA has landed
  }

 private:
  // Notices the oldest DMA landing, and opens what it frees (to the device:
  // its ring bytes; to the host: its bytes). Returns whether one landed.
  bool land() {
    if (landed_ == issued_ || !c_.events[landed_ % StagingCore::kMaxInFlight].ref().query()) return false;
    landed_bytes_ = dma_end_[landed_ % StagingCore::kMaxInFlight];
    ++landed_;
    const StagingJob& j = job_;
    job_.open_until.store(j.to_device ? std::min(j.bytes, landed_bytes_ + j.ring_bytes) : landed_bytes_, std::memory_order_release);
    return true;
  }

  // Pieces finished in order from the front: the bytes through which the
  // host-side copy is complete.
  std::size_t copied_through() noexcept {
    const StagingJob& j = job_;
    while (front_ < j.pieces && j.done[front_].load(std::memory_order_acquire)) ++front_;
    return j.piece_at[front_];
  }

  void queue_dma(std::size_t from, std::size_t to) {
    const std::size_t slot = issued_ % StagingCore::kMaxInFlight;
    std::byte* stage = job_.staged(from);
    queued_ = true;
    if (job_.to_device) {
      copy_async(stream_, dst_->subspan(from, to - from), std::span<const std::byte>(stage, to - from));
    } else {
      copy_async(stream_, std::span<std::byte>(stage, to - from), src_->subspan(from, to - from));
    }
    c_.events[slot].ref().record(stream_);
    dma_end_[slot] = to;
    ++issued_;
  }

  // To the device: a DMA for what has been copied in since the last one,
  // when the bus is idle, or when it makes a batch worth queueing behind the
  // running DMA, or when it reaches a block's end or the copy's.
  bool send() {
    bool moved = land();
    const std::size_t ready = copied_through();
    if (ready > sent_ && issued_ - landed_ < StagingCore::kMaxInFlight) {
      const std::size_t block_end = (sent_ / plan_.block_bytes + 1) * plan_.block_bytes;
      const std::size_t to = std::min(ready, block_end);
      if (issued_ == landed_ || to - sent_ >= plan_.batch || to == block_end || to == job_.bytes) {
        queue_dma(sent_, to);
        sent_ = to;
        moved = true;
      }
    }
    return moved;
  }

  // To the host: the next planned DMA once the ring bytes it overwrites have
  // been copied out.
  bool fetch() {
    bool moved = land();
    emptied_ = copied_through();
    if (issued_ < ends_.size() && issued_ - landed_ < StagingCore::kMaxInFlight && ends_[issued_] <= emptied_ + job_.ring_bytes) {
      queue_dma(issued_ == 0 ? 0 : ends_[issued_ - 1], ends_[issued_]);
      moved = true;
    }
    return moved;
  }

  StagingCore& c_;
  StreamRef stream_;
  // The context stays current for the whole copy, so each DMA, record and
  // query inside skips its own push and pop.
  ContextScope scope_;
  RingPlan plan_;
  StagingJob job_;
  std::vector<PinnedBlock> blocks_;  // declared after job_: returned only after the destructor body ran
  std::optional<DeviceSpan<std::byte>> dst_;  // to the device
  std::optional<DeviceSpan<const std::byte>> src_;  // to the host
  std::vector<std::size_t> ends_;  // to the host: where each DMA ends
  std::array<std::size_t, StagingCore::kMaxInFlight> dma_end_{};
  std::size_t issued_ = 0, landed_ = 0;  // DMAs
  std::size_t landed_bytes_ = 0, sent_ = 0, emptied_ = 0, front_ = 0;
  bool queued_ = false;  // a DMA may be queued that nobody has waited for
};

// An engine serves the context of its pool: its stream, its ordering after
// that context's legacy default stream and its events all live there. Memory
// or a stream of another context (another device) would be copied on the
// wrong device's stream and ordered after the wrong device's work.
void check_engine_context(const char* api, const StagingCore& c, const ContextRef& memory, const StreamRef* stream) {
  const ContextRef& own = c.pool.context();
  const ContextRef* other = memory.address() != own.address() ? &memory
                            : (stream != nullptr && stream->context().address() != own.address()) ? &stream->context()
                                                                                                  : nullptr;
  if (other == nullptr) return;
  throw InvalidArgumentError(
      api,
      fmt::format("the {} is in context 0x{:x} on device {}; this engine's pool serves context 0x{:x} on device {}",
                  other == &memory ? "device memory" : "stream", other->address(), other->device().ordinal(),
                  own.address(), own.device().ordinal()),
      "use one PinnedPool and StagingEngine per context (per device); plain copies (drvshim::copy) work with any "
      "context");
}

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
  if (options.depth == 1 || options.threads > 64 || (options.chunk_bytes != 0 && options.chunk_bytes < (64 << 10)) ||
      options.spin.count() < 0) {
    throw InvalidArgumentError(
        "StagingEngine",
        fmt::format("chunk_bytes {}, depth {}, threads {}, spin {} µs", options.chunk_bytes, options.depth, options.threads,
                    options.spin.count()),
        "use chunk_bytes of 0 (automatic) or at least 65536, a depth of 0 (automatic) or at least 2, 0 (automatic) to 64 "
        "threads, and a spin of 0 or more");
  }
  core_ = std::make_shared<detail::StagingCore>(pool, options);
}

const StagingOptions& StagingEngine::options() const noexcept { return core_->options; }
const PinnedPool& StagingEngine::pool() const noexcept { return core_->pool; }

StagingStats StagingEngine::stats() const {
  core_->ensure_usable("StagingEngine::stats");
  std::lock_guard<std::mutex> lock(core_->stats_mutex);
  return core_->stats;
}

void StagingEngine::copy_to_device(DeviceSpan<std::byte> dst, std::span<const std::byte> src) const {
  detail::check_sizes("StagingEngine::copy_to_device", dst.size_bytes(), src.size());
  detail::check_engine_context("StagingEngine::copy_to_device", *core_, dst.context(), nullptr);
  auto& c = *core_;
  c.ensure_usable("StagingEngine::copy_to_device");
  if (src.empty()) return;
  if (c.direct(src.data(), src.size(), true)) return copy(dst, src);
  std::lock_guard<std::mutex> lock(c.copy_mutex);
  detail::stage_to_device(c, dst, src, c.stream.ref(), true);
}

void StagingEngine::copy_to_host(std::span<std::byte> dst, DeviceSpan<const std::byte> src) const {
  detail::check_sizes("StagingEngine::copy_to_host", dst.size(), src.size_bytes());
  detail::check_engine_context("StagingEngine::copy_to_host", *core_, src.context(), nullptr);
  auto& c = *core_;
  c.ensure_usable("StagingEngine::copy_to_host");
  if (dst.empty()) return;
  if (c.direct(dst.data(), dst.size(), false)) return copy(dst, src);
  std::lock_guard<std::mutex> lock(c.copy_mutex);
  detail::stage_to_host(c, dst, src, c.stream.ref());
}

void StagingEngine::copy_to_device_async(DeviceSpan<std::byte> dst, std::span<const std::byte> src,
                                         const StreamRef& stream) const {
  detail::check_sizes("StagingEngine::copy_to_device_async", dst.size_bytes(), src.size());
  detail::check_engine_context("StagingEngine::copy_to_device_async", *core_, dst.context(), &stream);
  auto& c = *core_;
  c.ensure_usable("StagingEngine::copy_to_device_async");
  if (src.empty()) return;
  if (c.direct(src.data(), src.size(), true)) {
    // The driver's own pageable path is synchronous for the source, like this form promises.
    return copy_async(stream, dst, src);
  }
  std::lock_guard<std::mutex> lock(c.copy_mutex);
  detail::stage_to_device(c, dst, src, stream, false);
}

void StagingEngine::copy_to_host_async(std::span<std::byte> dst, DeviceSpan<const std::byte> src,
                                       const StreamRef& stream) const {
  detail::check_sizes("StagingEngine::copy_to_host_async", dst.size(), src.size_bytes());
  detail::check_engine_context("StagingEngine::copy_to_host_async", *core_, src.context(), &stream);
  auto& c = *core_;
  c.ensure_usable("StagingEngine::copy_to_host_async");
  if (dst.empty()) return;
  if (c.direct(dst.data(), dst.size(), false)) return copy_async(stream, dst, src);
  // Stream-ordered: each chunk's DMA into a staging block, then a host
  // function on the same stream copying it out and returning the block (no
  // driver call inside: host functions must not make any). Stream order makes
  // a block reusable once its host function has run.
  const std::size_t chunk = detail::ring_for(c.options, dst.size()).top;
  // The chunk being queued: its DMA may be queued although its host function
  // is not, so its block must not go back to the pool before the stream has
  // passed that DMA.
  std::shared_ptr<PinnedBlock> block;
  try {
    for (std::size_t offset = 0; offset < dst.size(); offset += chunk) {
      const std::size_t n = std::min(chunk, dst.size() - offset);
      block = std::make_shared<PinnedBlock>(c.pool.acquire(n));
      copy_async(stream, std::span<std::byte>(block->data(), n), src.subspan(offset, n));
      std::byte* out = dst.data() + offset;
      stream.launch_host_func([block, out, n] {
        std::memcpy(out, block->data(), n);
        detail::PoolCore::release_in_host_func(*block);
      });
    }
  } catch (...) {
    // Wait for the stream before reporting: the queued DMAs land before their
    // blocks are reused, and no host function of this call writes into `dst`
    // after it returned (its contents are then unspecified). The wait's own
    // error is dropped: the first one is on its way.
    try {
      stream.synchronize();
    } catch (...) {
    }
    throw;
  }
}

}  // namespace drvshim
