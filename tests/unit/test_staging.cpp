// SPDX-License-Identifier: Apache-2.0
// The pinned pool and the staging engine against the fake driver: values for
// odd sizes and unaligned addresses, the direct path, many threads, a fault
// injected at every step of a staged copy, and pool reuse only after the
// stream's event.
#include <drvshim/staging.hpp>

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "fixture.hpp"
#include "staging_test_support.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

class Staging : public PrimaryContextTest {
 protected:
  static StagingOptions small() { return small_staging(3); }
  static std::vector<std::uint8_t> pattern(std::size_t bytes, unsigned seed) {
    std::vector<std::uint8_t> v(bytes);
    for (std::size_t i = 0; i < bytes; ++i) v[i] = test_byte(i, seed);
    return v;
  }
  static DeviceSpan<std::byte> bytes_of(const DeviceBuffer& b) { return b.as<std::byte>(); }
};

TEST_F(Staging, RoundTripsOddSizesFromUnalignedAddresses) {
  PinnedPool pool(ctx());
  StagingEngine engine(pool, small());
  const std::size_t sizes[] = {1, (1 << 20) - 1, 1 << 20, (4 << 20) + 3, (13 << 20) + 7};
  unsigned seed = 1;
  for (const std::size_t n : sizes) {
    SCOPED_TRACE(n);
    for (std::size_t misalign : {0u, 1u, 3u}) {
      const auto src = pattern(n + misalign, seed++);
      std::vector<std::uint8_t> back(n + 5, 0);
      auto dev = DeviceBuffer::allocate(ctx(), n);
      engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)).subspan(misalign, n));
      engine.copy_to_host(std::as_writable_bytes(std::span(back)).subspan(5 - misalign, n),
                          DeviceSpan<const std::byte>(bytes_of(dev)));
      ASSERT_TRUE(std::equal(src.begin() + static_cast<std::ptrdiff_t>(misalign), src.end(),
                             back.begin() + static_cast<std::ptrdiff_t>(5 - misalign)));
    }
  }
  const auto s = engine.stats();
  EXPECT_EQ(s.direct_copies, 2u * 2u * 3u) << "sizes below direct_below go straight to the driver";
  EXPECT_EQ(s.staged_copies, 2u * 3u * 3u);
  EXPECT_EQ(pool.stats().blocks_in_use, 0u);
  EXPECT_EQ(pool.stats().allocations, 3u) << "the ring's three blocks, reused by every later copy";
}

TEST_F(Staging, PinnedOrRegisteredHostMemoryGoesStraightToTheDriver) {
  PinnedPool pool(ctx());
  StagingEngine engine(pool, small());
  auto pinned = PinnedBuffer::allocate(ctx(), 8 << 20);
  auto dev = DeviceBuffer::allocate(ctx(), 8 << 20);
  drvshim_fake_clear_call_log();
  const auto before = drvshim_fake_call_count("cuMemcpyHtoD");
  engine.copy_to_device(bytes_of(dev),
                        std::span<const std::byte>(static_cast<const std::byte*>(pinned.data()), 8 << 20));
  EXPECT_EQ(drvshim_fake_call_count("cuMemcpyHtoD"), before + 1);
  EXPECT_EQ(engine.stats().direct_copies, 1u);
  EXPECT_EQ(engine.stats().staged_copies, 0u);
  EXPECT_EQ(pool.stats().allocations, 0u);
}

TEST_F(Staging, ManyThreadsShareOneEngine) {
  PinnedPool pool(ctx());
  StagingEngine engine(pool, small());
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (unsigned t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const std::size_t n = (3 << 20) + t * 4097;
      const auto src = pattern(n, t);
      std::vector<std::uint8_t> back(n);
      auto dev = DeviceBuffer::allocate(ctx(), n);
      for (int round = 0; round < 3; ++round) {
        engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
        engine.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
        if (back == src) ++good;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), 24);
  EXPECT_EQ(pool.stats().blocks_in_use, 0u);
}

// Every driver call a staged copy makes, failed in turn: one error, naming
// the call; no staging block left in use; the engine works again afterwards;
// nothing leaks (the fixture's TearDown counts pinned memory, events, streams).
// The calls are read from the fake's call log of a clean copy, so a new step
// in the engine is covered without editing this list. How many DMAs a copy to
// the device makes, and how often the conductor polls an event, depend on
// timing (a DMA takes whatever has been copied in); so only the first event
// query is failed, and DMAs and event records up to the number every copy
// makes (one per 1 MiB block at least). The context policy's own calls (get,
// push, pop current) are failed in the context tests.
TEST_F(Staging, AFaultAtEveryStepSurfacesOnceAndLeavesNothingInUse) {
  const std::size_t n = (5 << 20) + 11;
  const auto src = pattern(n, 7);
  auto run_copy = [&](const StagingEngine& engine, const DeviceBuffer& dev, std::vector<std::uint8_t>& back,
                      bool to_device) {
    if (to_device) {
      engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
    } else {
      engine.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
    }
  };
  for (const bool to_device : {true, false}) {
    // The calls of a clean first copy on a fresh engine (for D2H: after one H2D, as below).
    std::vector<std::pair<std::string, int>> steps;
    {
      PinnedPool pool(ctx());
      StagingEngine engine(pool, small());
      auto dev = DeviceBuffer::allocate(ctx(), n);
      std::vector<std::uint8_t> back(n);
      if (!to_device) engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
      drvshim_fake_clear_call_log();
      run_copy(engine, dev, back, to_device);
      std::map<std::string, int> seen;
      for (std::size_t i = 0; i < drvshim_fake_call_log_size(); ++i) {
        const std::string api = drvshim_fake_call_log_entry(i);
        const int nth = ++seen[api];
        if (api == "cuEventQuery" && nth > 1) continue;
        const bool per_dma = api == "cuMemcpyHtoDAsync" || api == "cuMemcpyDtoHAsync" || api == "cuEventRecord";
        if (per_dma && static_cast<std::size_t>(nth) > (n + small().chunk_bytes - 1) / small().chunk_bytes) continue;
        // The context policy's own calls are failed in the context tests.
        if (api == "cuCtxGetCurrent" || api == "cuCtxPushCurrent" || api == "cuCtxPopCurrent") continue;
        steps.emplace_back(api, nth);
      }
    }
    ASSERT_GE(steps.size(), 8u) << "the log shows the copy's calls";
    std::set<std::string> apis;
    for (const auto& [api, nth] : steps) apis.insert(api);
    for (const char* expected :
         to_device ? std::vector<const char*>{"cuPointerGetAttributes", "cuMemcpyHtoDAsync", "cuEventRecord",
                                              "cuEventQuery", "cuStreamSynchronize", "cuMemHostAlloc", "cuEventCreate"}
                   : std::vector<const char*>{"cuPointerGetAttributes", "cuMemcpyDtoHAsync", "cuEventRecord",
                                              "cuEventQuery"}) {
      EXPECT_TRUE(apis.count(expected)) << expected << " is one of the steps";
    }
    for (const auto& [api, nth] : steps) {
      SCOPED_TRACE(api + " #" + std::to_string(nth) + (to_device ? " H2D" : " D2H"));
      PinnedPool pool(ctx());
      StagingEngine engine(pool, small());
      auto dev = DeviceBuffer::allocate(ctx(), n);
      std::vector<std::uint8_t> back(n);
      if (!to_device) engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
      drvshim_fake_fail_call(api.c_str(), nth, 1 /* CUDA_ERROR_INVALID_VALUE */);
      int errors = 0;
      try {
        run_copy(engine, dev, back, to_device);
      } catch (const CudaError& e) {
        ++errors;
        EXPECT_NE(std::string(e.what()).find(api), std::string::npos) << e.what();
      }
      drvshim_fake_clear_injections();
      EXPECT_EQ(errors, 1);
      EXPECT_EQ(pool.stats().blocks_in_use, 0u) << "a staging block was left in use";
      // Usable again, with no error left over for later calls.
      engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
      engine.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
      EXPECT_EQ(back, src);
    }
  }
}

TEST_F(Staging, StreamOrderedFormsFollowTheStream) {
  PinnedPool pool(ctx());
  StagingEngine engine(pool, small());
  auto stream = Stream::create(ctx());
  const std::size_t n = (6 << 20) + 1;
  const auto src = pattern(n, 3);
  auto dev = DeviceBuffer::allocate(ctx(), n);
  engine.copy_to_device_async(bytes_of(dev), std::as_bytes(std::span(src)), stream.ref());
  stream.ref().synchronize();
  std::vector<std::uint8_t> back(n, 0xee);
  drvshim_fake_stream_hold(reinterpret_cast<void*>(stream.ref().native()), 1);
  engine.copy_to_host_async(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)),
                            stream.ref());
  EXPECT_EQ(back[0], 0xee) << "written by host functions in stream order, not before";
  EXPECT_GT(pool.stats().blocks_in_use, 0u);
  drvshim_fake_stream_hold(reinterpret_cast<void*>(stream.ref().native()), 0);
  stream.ref().synchronize();
  EXPECT_EQ(back, src);
  EXPECT_EQ(pool.stats().blocks_in_use, 0u) << "the host functions returned every block";
}

// The defaults choose the ring per copy: blocks of the copy's size rounded up
// to a power of two, 1 to 8 MiB, at most four of them, only as many as the
// copy fills. To the host the DMAs follow a fixed plan (a head of 256 KiB,
// 256 KiB, 512 KiB ... summing to the largest DMA, a quarter of the copy
// between 1 and 8 MiB; DMAs of that size; the head reversed); to the device
// each DMA takes what has been copied in, at least one per block.
TEST_F(Staging, AutomaticRingAndDmaPlanFollowTheCopySize) {
  StagingOptions o;
  o.threads = 2;
  {
    PinnedPool pool(ctx());
    StagingEngine engine(pool, o);
    EXPECT_EQ(engine.options().chunk_bytes, 0u);
    EXPECT_EQ(engine.options().depth, 0u);
  }
  struct Case {
    std::size_t bytes, blocks, block_bytes, dmas_to_host;
  };
  // 16 MiB: 2 x 8 MiB; to the host 0.25 0.25 0.5 1 2, 4 4, 2 1 0.5 0.25 0.25 MiB.
  // 64 MiB: 4 x 8 MiB; 0.25 0.25 0.5 1 2 4, 6 x 8, 4 2 1 0.5 0.25 0.25.
  // 4 MiB: 1 x 4 MiB; 0.25 0.25 0.5, 1 1, 0.5 0.25 0.25.
  // 3 MiB + 5 bytes: 1 x 4 MiB; 0.25 0.25 0.5, 1, 5 bytes, 0.5 0.25 0.25 (a 1 MiB top).
  for (const Case& c : {Case{16 << 20, 2, 8 << 20, 12}, Case{std::size_t{64} << 20, 4, 8 << 20, 18},
                        Case{4 << 20, 1, 4 << 20, 8}, Case{(3 << 20) + 5, 1, 4 << 20, 8}}) {
    SCOPED_TRACE(c.bytes);
    PinnedPool fresh(ctx());
    StagingEngine e(fresh, o);
    const auto src = pattern(c.bytes, 3);
    auto dev = DeviceBuffer::allocate(ctx(), c.bytes);
    e.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
    const auto to_device = e.stats().chunks;
    EXPECT_GE(to_device, c.blocks) << "at least one DMA per block";
    EXPECT_LE(to_device, c.bytes / (64 << 10) + 1) << "never more than one per piece";
    EXPECT_EQ(fresh.stats().allocations, c.blocks);
    EXPECT_EQ(fresh.stats().bytes_cached, c.blocks * c.block_bytes);
    std::vector<std::uint8_t> back(c.bytes);
    e.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
    EXPECT_EQ(e.stats().chunks - to_device, c.dmas_to_host);
    EXPECT_EQ(back, src);
  }
}

TEST_F(Staging, BadOptionsAndMismatchedSizesAreRefused) {
  PinnedPool pool(ctx());
  auto o = small();
  o.depth = 1;
  expect_throw<InvalidArgumentError>([&] { StagingEngine e(pool, o); });
  o = small();
  o.threads = 65;
  expect_throw<InvalidArgumentError>([&] { StagingEngine e(pool, o); });
  o.threads = 0;
  EXPECT_GE(StagingEngine(pool, o).options().threads, 1u) << "0 picks a count from the hardware";
  o = small();
  o.chunk_bytes = 4096;
  auto bad = expect_throw<InvalidArgumentError>([&] { StagingEngine e(pool, o); });
  EXPECT_NE(std::string(bad.what()).find("chunk_bytes 4096"), std::string::npos) << bad.what();
  EXPECT_NE(std::string(bad.what()).find("at least 65536"), std::string::npos) << bad.what();
  o = small();
  o.spin = std::chrono::microseconds(-1);
  expect_throw<InvalidArgumentError>([&] { StagingEngine e(pool, o); });
  StagingEngine engine(pool, small());
  auto dev = DeviceBuffer::allocate(ctx(), 16);
  std::vector<std::byte> host(17);
  const auto e = expect_throw<InvalidArgumentError>([&] { engine.copy_to_device(bytes_of(dev), host); });
  EXPECT_NE(std::string(e.what()).find("destination has 16 bytes, source 17"), std::string::npos) << e.what();
  PinnedPoolOptions po;
  po.min_block_bytes = 3000;
  expect_throw<InvalidArgumentError>([&] { PinnedPool p(ctx(), po); });
  expect_throw<InvalidArgumentError>([&] { (void)pool.acquire(0); });
}

TEST_F(Staging, PoolReusesABlockOnlyAfterItsStreamPassedTheReleasePoint) {
  PinnedPool pool(ctx());
  EXPECT_EQ(pool.size_class(1), 64u << 10);
  EXPECT_EQ(pool.size_class((1 << 20) + 1), 2u << 20);
  auto stream = Stream::create(ctx());
  auto a = pool.acquire(100000);
  EXPECT_EQ(a.capacity(), 128u << 10);
  std::byte* first = a.data();
  a.release();
  auto b = pool.acquire(128 << 10);
  EXPECT_EQ(b.data(), first) << "a plain release is reusable at once";
  drvshim_fake_stream_hold(reinterpret_cast<void*>(stream.ref().native()), 1);
  b.release_after(stream.ref());
  EXPECT_FALSE(b);
  auto c = pool.acquire(128 << 10);
  EXPECT_NE(c.data(), first) << "the stream has not passed the release point";
  EXPECT_EQ(pool.stats().waits_skipped, 1u);
  EXPECT_EQ(pool.trim(), 0u) << "trim never frees a block its stream may still use";
  drvshim_fake_stream_hold(reinterpret_cast<void*>(stream.ref().native()), 0);
  stream.ref().synchronize();
  auto d = pool.acquire(128 << 10);
  EXPECT_EQ(d.data(), first) << "reused once the stream's event completed";
  const auto s = pool.stats();
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.reuses, 2u);
  EXPECT_EQ(s.blocks_in_use, 2u);
  c.release();
  d.release();
  EXPECT_EQ(pool.stats().bytes_cached, 256u << 10);
  EXPECT_EQ(pool.trim(128 << 10), 128u << 10);
  EXPECT_EQ(pool.stats().frees, 1u);
}

// Whether this kernel lets the pool's thread cache work (it is off otherwise).
bool membarrier_available() {
  const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0;
}

// The cap bounds the free lists; a thread's hot block (thread_cache) comes on top.
TEST_F(Staging, PoolFreesWhatGoesAboveItsCap) {
  for (const bool thread_cache : {false, true}) {
    if (thread_cache && !membarrier_available()) continue;  // the cache is off: the first round covers it
    SCOPED_TRACE(thread_cache);
    PinnedPoolOptions o;
    o.max_cached_bytes = 1 << 20;
    o.thread_cache = thread_cache;
    PinnedPool pool(ctx(), o);
    pool.acquire(64 << 10).release();  // this thread's first return: from now on it may park one block
    {
      auto a = pool.acquire(1 << 20);
      auto b = pool.acquire(1 << 20);
      auto c = pool.acquire(1 << 20);
    }
    const auto s = pool.stats();
    // 64 KiB are cached; no 1 MiB block fits under the cap after them, so all
    // three are freed, except (with the thread cache) the first one back,
    // parked in this thread's slot.
    const std::size_t parked = thread_cache ? (1u << 20) : 0u;
    EXPECT_EQ(s.bytes_cached, (64u << 10) + parked);
    EXPECT_EQ(s.frees, thread_cache ? 2u : 3u);
    EXPECT_EQ(drvshim_fake_live_pinned_allocations(), thread_cache ? 2 : 1);
  }
}

// A thread gets back the block it released last without the pool's lock;
// the block counts as cached, and trim() frees it.
TEST_F(Staging, AThreadReusesTheBlockItReleasedLast) {
  PinnedPool pool(ctx());
  pool.acquire(1 << 20).release();  // first return: through the lock (and this thread gets a slot)
  auto a = pool.acquire(1 << 20);
  std::byte* const first = a.data();
  a.release();  // parked
  auto s = pool.stats();
  EXPECT_EQ(s.blocks_in_use, 0u);
  EXPECT_EQ(s.blocks_cached, 1u);
  EXPECT_EQ(s.bytes_cached, 1u << 20);
  for (int i = 0; i < 3; ++i) {
    auto b = pool.acquire((1 << 20) - 3);
    EXPECT_EQ(b.data(), first) << "the parked block, reused";
    EXPECT_EQ(pool.stats().blocks_in_use, 1u);
  }
  s = pool.stats();
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.reuses, 4u);
  EXPECT_EQ(s.acquires, 5u);
  EXPECT_EQ(pool.trim(0), 1u << 20) << "trim takes the parked block back and frees it";
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0);
  EXPECT_EQ(pool.stats().bytes_cached, 0u);
}

// A block parked by a thread that has gone is not lost: an acquire that
// would allocate takes it, and the pool's end frees it.
TEST_F(Staging, BlocksParkedByOtherThreadsAreReusedAndFreed) {
  std::byte* parked = nullptr;
  {
    PinnedPool pool(ctx());
    std::thread([&] {
      pool.acquire(1 << 20).release();
      auto b = pool.acquire(1 << 20);
      parked = b.data();
    }).join();
    EXPECT_EQ(pool.stats().blocks_cached, 1u);
    auto c = pool.acquire(1 << 20);
    EXPECT_EQ(c.data(), parked) << "taken from the other thread's slot, not allocated";
    EXPECT_EQ(pool.stats().allocations, 1u);
    c.release();
    // Parked by another thread again, and still there when the last handle goes.
    std::thread([&] {
      pool.acquire(1 << 20).release();
      pool.acquire(1 << 20).release();
    }).join();
    EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 1);
  }
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0) << "the pool's end took the parked block back";
}

// Many threads reusing, a thread trimming and reading statistics, all at
// once: every block is accounted for (the sanitizer lane checks the memory).
TEST_F(Staging, ThreadCachesUnderConcurrentTrimAndStats) {
  PinnedPool pool(ctx());
  std::atomic<bool> stop{false};
  std::atomic<unsigned> bad_stats{0};
  std::thread trimmer([&] {
    while (!stop.load()) {
      (void)pool.trim(0);
      if (pool.stats().blocks_in_use > 16u) ++bad_stats;
    }
  });
  std::vector<std::thread> users;
  for (int t = 0; t < 8; ++t) {
    users.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto b = pool.acquire((i + t) % 2 == 0 ? (64 << 10) : (1 << 20));
        b.data()[0] = std::byte{1};
        if (i % 3 == 0) {
          auto c = pool.acquire(64 << 10);
          c.data()[0] = std::byte{2};
        }
      }
    });
  }
  for (auto& u : users) u.join();
  stop = true;
  trimmer.join();
  EXPECT_EQ(bad_stats.load(), 0u) << "never more than two blocks per thread in use";
  const auto s = pool.stats();
  EXPECT_EQ(s.blocks_in_use, 0u);
  EXPECT_EQ(s.acquires, 8u * (2000u + 667u));
  EXPECT_EQ(s.reuses + s.allocations, s.acquires);
  (void)pool.trim(0);
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0);
}

// The pool's last handle going while another thread returns a block (which
// it would park): the block is never stranded in the slot, and the pool is
// freed by whichever goes last.
TEST_F(Staging, APoolDroppedWhileAThreadParksLeavesNothingBehind) {
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> go{0};
    std::optional<PinnedPool> pool(std::in_place, ctx());
    PinnedBlock block;
    std::thread user([&] {
      pool->acquire(64 << 10).release();  // this thread has a slot in the pool
      block = pool->acquire(64 << 10);
      go.fetch_add(1);
      while (go.load() < 2) {
      }
      block.release();
    });
    while (go.load() < 1) {
    }
    go.fetch_add(1);
    pool.reset();
    user.join();
    ASSERT_EQ(drvshim_fake_live_pinned_allocations(), 0) << "round " << round;
  }
}

// A block that comes back after the pool's last handle is gone is not parked:
// as the last block, it frees the pool.
TEST_F(Staging, ABlockReturnedAfterItsPoolIsNotParked) {
  PinnedBlock block;
  {
    PinnedPool pool(ctx());
    pool.acquire(1 << 20).release();  // this thread may park blocks of this pool
    block = pool.acquire(1 << 20);
  }
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 1);
  block.release();
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0);
}

// A block may outlive every handle of its pool: the pool (and the block's
// memory) stays until the block comes back, then everything is freed.
TEST_F(Staging, ABlockOutlivesItsPoolAndFreesItWhenReturned) {
  PinnedBlock block;
  {
    PinnedPool pool(ctx());
    pool.acquire(64 << 10).release();  // a cached block
    block = pool.acquire(1 << 20);
  }
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 2) << "the cached block and the one held";
  std::memset(block.data(), 7, block.size());
  block.release();
  EXPECT_FALSE(block);
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0) << "the last block back freed the pool";
}

// The stream-ordered D2H form returns its blocks from host functions, where no
// driver call may be made: when the engine and the pool are gone by then, the
// pool is freed later (at the next pool created or dropped), not inside the
// host function.
TEST_F(Staging, APoolWhoseLastBlockComesBackInAHostFunctionIsFreedLater) {
  auto stream = Stream::create(ctx());
  const std::size_t n = (3 << 20) + 5;
  const auto src = pattern(n, 9);
  auto dev = DeviceBuffer::allocate(ctx(), n);
  std::vector<std::uint8_t> back(n, 0);
  const auto native = reinterpret_cast<void*>(stream.ref().native());
  {
    PinnedPool pool(ctx());
    StagingEngine engine(pool, small());
    engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
    drvshim_fake_stream_hold(native, 1);
    engine.copy_to_host_async(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)),
                              stream.ref());
  }
  const int pinned = drvshim_fake_live_pinned_allocations();
  EXPECT_GT(pinned, 0) << "the blocks of the queued host functions keep the pool";
  drvshim_fake_stream_hold(native, 0);
  stream.ref().synchronize();
  EXPECT_EQ(back, src);
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), pinned) << "nothing freed inside a host function";
  { PinnedPool next(ctx()); }
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0) << "freed at the next pool created";
}

TEST_F(Staging, PoolOutOfPinnedMemoryFreesItsCachedBlocksAndTriesOnce) {
  PinnedPool pool(ctx());
  pool.acquire(64 << 10).release();  // one cached block of another size class
  drvshim_fake_fail_call("cuMemHostAlloc", 1, 2 /* CUDA_ERROR_OUT_OF_MEMORY */);
  auto block = pool.acquire(1 << 20);
  EXPECT_TRUE(block);
  auto s = pool.stats();
  EXPECT_EQ(s.frees, 1u) << "the cached block was freed to make room";
  EXPECT_EQ(s.bytes_cached, 0u);
  EXPECT_EQ(s.allocations, 2u);
  block.release();
  drvshim_fake_fail_call("cuMemHostAlloc", 1, 2);
  PinnedPool empty(ctx());
  const auto e = expect_throw<OutOfMemoryError>([&] { (void)empty.acquire(1 << 20); });
  EXPECT_NE(std::string(e.what()).find("cuMemHostAlloc"), std::string::npos) << e.what();
  EXPECT_EQ(empty.stats().blocks_in_use, 0u);
}

}  // namespace
