// SPDX-License-Identifier: Apache-2.0
// Core safety under fork, exit, failure and concurrency: the staging engine's
// stream-ordered copies read their source before they return and never hold
// the engine while they wait for the caller's stream; staged copies work for
// any chunk size the options accept; a forked child drops a pool, an engine
// or a background initialisation without waiting for a lock a parent thread
// held at the fork; a background task that waits for its own steps is told
// so; out of memory in no-throw code does not terminate; the CPU budget reads
// the process's own cgroups, v1 and v2; a StreamRef of a destroyed Stream
// never reaches the driver.
#include <drvshim/background.hpp>
#include <drvshim/staging.hpp>

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "fixture.hpp"
#include "in_child.hpp"
#include "staging/cpu_budget.hpp"
#include "staging_test_support.hpp"
#include "support/test_hooks.hpp"

using namespace drvshim;
using namespace drvshim_test;
namespace hooks = drvshim::detail::test_hooks;
using namespace std::chrono_literals;

namespace {

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>(test_byte(i, seed));
  return v;
}

std::vector<std::byte> read_back(const DeviceBuffer& dev) {
  std::vector<std::byte> out(dev.size());
  copy(std::span<std::byte>(out), DeviceSpan<const std::byte>(dev.as<std::byte>()));
  return out;
}

void* native(const StreamRef& s) { return reinterpret_cast<void*>(s.native()); }

// A hook that stops one chosen point until released (or `limit` passed), and
// says when it got there. One at a time, process-wide.
struct Gate {
  std::atomic<int> point{-1};
  std::atomic<bool> reached{false};
  std::atomic<bool> released{false};
  std::chrono::milliseconds limit{2000};
  void arm(hooks::Point p) {
    reached = false;
    released = false;
    point = static_cast<int>(p);
  }
  bool wait_reached(std::chrono::milliseconds within = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (!reached.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(100us);
    return reached.load();
  }
  // Lets the stopped thread go, and waits until it has left the hook (a
  // later arm() must not catch it still inside).
  void release() {
    released = true;
    while (inside.load()) std::this_thread::sleep_for(50us);
  }
  std::atomic<bool> inside{false};
};
Gate g_gate;

bool gate_hook(hooks::Point p) {
  if (static_cast<int>(p) != g_gate.point.load()) return true;
  int expected = static_cast<int>(p);
  // Only the first thread to come stops; the point is disarmed for the rest.
  if (!g_gate.point.compare_exchange_strong(expected, -1)) return true;
  g_gate.inside = true;
  g_gate.reached = true;
  const auto deadline = std::chrono::steady_clock::now() + g_gate.limit;
  while (!g_gate.released.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(100us);
  g_gate.inside = false;
  return true;
}

std::atomic<bool> g_fail_noexcept_alloc{false};
bool failing_alloc_hook(hooks::Point p) { return !(p == hooks::Point::noexcept_alloc && g_fail_noexcept_alloc.load()); }

class CoreSafety : public PrimaryContextTest {
 protected:
  void TearDown() override {
    hooks::set(nullptr);
    g_gate.point = -1;
    g_gate.release();
    PrimaryContextTest::TearDown();
  }
  // Three blocks of 1 MiB: a ring of 3 MiB; two threads.
  static StagingOptions small() { return small_staging(2); }
  static DeviceSpan<std::byte> bytes_of(const DeviceBuffer& b) { return b.as<std::byte>(); }
};

}  // namespace

// ---- the stream-ordered copy to the device reads its source before it returns ----------------

// From pinned memory, at every size (below the direct threshold, staged in
// one ring, larger than the ring): the source is overwritten right after the
// call while the stream is held, and the device gets the bytes of the call.
TEST_F(CoreSafety, AnAsyncCopyFromPinnedMemoryHasReadItsSourceOnReturn) {
  PinnedPool pool(ctx());
  StagingEngine engine(pool, small());
  auto stream = Stream::create(ctx());
  for (const std::size_t bytes : {std::size_t{4096}, std::size_t{2} << 20, std::size_t{3} << 20}) {
    SCOPED_TRACE(bytes);
    auto src = PinnedBuffer::allocate(ctx(), bytes);
    const auto expected = pattern(bytes, 7);
    std::memcpy(src.data(), expected.data(), bytes);
    auto dev = DeviceBuffer::allocate(ctx(), bytes);
    drvshim_fake_stream_hold(native(stream.ref()), 1);
    engine.copy_to_device_async(bytes_of(dev), std::span<const std::byte>(src.as<std::byte>()), stream.ref());
    std::memset(src.data(), 0xee, bytes);  // the caller reuses its buffer, as the contract allows
    drvshim_fake_stream_hold(native(stream.ref()), 0);
    stream.ref().synchronize();
    EXPECT_TRUE(read_back(dev) == expected) << "the device got bytes written after the call returned";
  }
  // Larger than the ring (waits for the stream's earlier work, then copies): the same promise.
  const std::size_t big = std::size_t{8} << 20;
  auto src = PinnedBuffer::allocate(ctx(), big);
  const auto expected = pattern(big, 9);
  std::memcpy(src.data(), expected.data(), big);
  auto dev = DeviceBuffer::allocate(ctx(), big);
  engine.copy_to_device_async(bytes_of(dev), std::span<const std::byte>(src.as<std::byte>()), stream.ref());
  std::memset(src.data(), 0xee, big);
  stream.ref().synchronize();
  EXPECT_TRUE(read_back(dev) == expected);
}

// From registered memory: the registration and the memory are gone right
// after the call (unregister, free) while the stream is held; the device
// still gets the bytes (a queued DMA from the range would read freed memory).
TEST_F(CoreSafety, AnAsyncCopyFromRegisteredMemoryMayFreeItsSourceOnReturn) {
  PinnedPool pool(ctx());
  StagingEngine engine(pool, small());
  auto stream = Stream::create(ctx());
  const std::size_t bytes = std::size_t{2} << 20;
  const auto expected = pattern(bytes, 3);
  auto dev = DeviceBuffer::allocate(ctx(), bytes);
  {
    std::vector<std::byte> host(expected);
    auto range = RegisteredRange::register_range(ctx(), host.data(), host.size());
    drvshim_fake_stream_hold(native(stream.ref()), 1);
    engine.copy_to_device_async(bytes_of(dev), std::span<const std::byte>(host), stream.ref());
    range.unregister();
    std::fill(host.begin(), host.end(), std::byte{0x5a});
  }
  drvshim_fake_stream_hold(native(stream.ref()), 0);
  stream.ref().synchronize();
  EXPECT_TRUE(read_back(dev) == expected);
  EXPECT_EQ(engine.stats().direct_copies, 0u) << "page-locked memory is staged in the stream-ordered form";
}

// With two CPUs an automatic crew stages nothing to the device, but a large
// page-locked source is still staged through the ring (32 MiB at most), not
// through one block as large as the copy.
TEST_F(CoreSafety, ALargePinnedAsyncCopyWithATooSmallCrewStillUsesTheRing) {
  hooks::g_usable_cpus.store(2);
  PinnedPool pool(ctx());
  StagingEngine engine(pool);
  hooks::g_usable_cpus.store(0);
  const std::size_t n = std::size_t{64} << 20;
  auto src = PinnedBuffer::allocate(ctx(), n);
  const auto expected = pattern(n, 13);
  std::memcpy(src.data(), expected.data(), n);
  auto dev = DeviceBuffer::allocate(ctx(), n);
  auto stream = Stream::create(ctx());
  engine.copy_to_device_async(bytes_of(dev), std::span<const std::byte>(src.as<std::byte>()), stream.ref());
  std::memset(src.data(), 0xee, n);
  stream.ref().synchronize();
  EXPECT_TRUE(read_back(dev) == expected);
  const PinnedPoolStats st = pool.stats();
  EXPECT_LE(st.bytes_cached + st.bytes_in_use, std::size_t{32} << 20) << "one block as large as the copy";
  EXPECT_EQ(engine.stats().staged_copies, 1u);
}

// ---- no engine-wide lock across a wait for the caller's stream ------------------------------------

// Thread A queues a copy on a stream whose host function waits for thread
// B's copy on the same engine; B's copy must not wait for A's stream. Both
// sizes: one that fits the ring (A returns without waiting for the stream)
// and one that does not (A waits for the stream's earlier work, holding
// nothing; the fake runs a held stream's work in the thread that waits).
TEST_F(CoreSafety, AnAsyncCopyOnABlockedStreamDoesNotStopAnotherThreadsCopy) {
  PinnedPool pool(ctx());
  StagingEngine engine(pool, small());
  auto stream = Stream::create(ctx());
  for (const std::size_t a_bytes : {std::size_t{2} << 20, std::size_t{8} << 20}) {
    SCOPED_TRACE(a_bytes);
    std::atomic<bool> started{false}, b_done{false}, gave_up{false};
    drvshim_fake_stream_hold(native(stream.ref()), 1);
    stream.ref().launch_host_func([&] {
      started = true;
      const auto deadline = std::chrono::steady_clock::now() + 5s;
      while (!b_done.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(200us);
      gave_up = !b_done.load();
    });
    const auto a_src = pattern(a_bytes, 1);
    auto a_dev = DeviceBuffer::allocate(ctx(), a_bytes);
    auto a = std::async(std::launch::async, [&] {
      engine.copy_to_device_async(bytes_of(a_dev), std::span<const std::byte>(a_src), stream.ref());
    });
    const auto b_src = pattern(std::size_t{2} << 20, 2);
    auto b_dev = DeviceBuffer::allocate(ctx(), b_src.size());
    auto b = std::async(std::launch::async, [&] {
      while (!started.load()) std::this_thread::sleep_for(100us);
      engine.copy_to_device(bytes_of(b_dev), std::span<const std::byte>(b_src));
      b_done = true;
    });
    if (a_bytes <= (std::size_t{3} << 20)) {
      EXPECT_EQ(a.wait_for(10s), std::future_status::ready) << "a copy that fits the ring waited for its stream";
      drvshim_fake_stream_hold(native(stream.ref()), 0);  // the host function runs now, waiting for B
    }
    b.get();
    a.get();
    drvshim_fake_stream_hold(native(stream.ref()), 0);
    stream.ref().synchronize();
    EXPECT_FALSE(gave_up.load()) << "B's synchronous copy waited for A's blocked stream";
    EXPECT_TRUE(read_back(a_dev) == a_src);
    EXPECT_TRUE(read_back(b_dev) == b_src);
  }
}

// A block given back after a stream, with the pool over its cap (0): cached,
// not freed (freeing pinned memory makes the driver wait for the device),
// until the stream has passed it and trim() frees it.
TEST_F(CoreSafety, ABlockGivenBackAfterAStreamIsCachedOverTheCapUntilTheStreamPassesIt) {
  PinnedPoolOptions po;
  po.max_cached_bytes = 0;
  PinnedPool pool(ctx(), po);
  auto stream = Stream::create(ctx());
  drvshim_fake_stream_hold(native(stream.ref()), 1);
  const auto frees = drvshim_fake_call_count("cuMemFreeHost");
  auto block = pool.acquire(1 << 20);
  block.release_after(stream.ref());
  EXPECT_EQ(drvshim_fake_call_count("cuMemFreeHost"), frees) << "freed while its stream may still use it";
  EXPECT_EQ(pool.stats().bytes_cached, std::size_t{1} << 20);
  EXPECT_EQ(pool.trim(0), 0u) << "not ready: trim never waits";
  drvshim_fake_stream_hold(native(stream.ref()), 0);
  stream.ref().synchronize();
  EXPECT_EQ(pool.trim(0), std::size_t{1} << 20);
  EXPECT_EQ(drvshim_fake_call_count("cuMemFreeHost"), frees + 1);
}

// The same through the engine: an async copy on a held stream with a pool
// capped at 0 frees nothing during the call, so the stream's work (here a
// host function) does not run inside it.
TEST_F(CoreSafety, AnAsyncCopyWithAPoolOverItsCapDoesNotWaitForTheStream) {
  PinnedPoolOptions po;
  po.max_cached_bytes = 0;
  PinnedPool pool(ctx(), po);
  StagingEngine engine(pool, small());
  auto stream = Stream::create(ctx());
  std::atomic<bool> a_returned{false}, ran_inside_a{false};
  drvshim_fake_stream_hold(native(stream.ref()), 1);
  stream.ref().launch_host_func([&] { ran_inside_a = !a_returned.load(); });
  const auto a_src = pattern(std::size_t{2} << 20, 1);
  auto a_dev = DeviceBuffer::allocate(ctx(), a_src.size());
  engine.copy_to_device_async(bytes_of(a_dev), std::span<const std::byte>(a_src), stream.ref());
  a_returned = true;
  drvshim_fake_stream_hold(native(stream.ref()), 0);
  stream.ref().synchronize();
  EXPECT_FALSE(ran_inside_a.load()) << "the stream's work ran inside copy_to_device_async (a pinned free waited)";
  EXPECT_TRUE(read_back(a_dev) == a_src);
}

// Small async copies from pinned memory on a stream that does not move: each
// takes one block of its own size (not a 1 MiB ring block), and past the
// pool's cap the call waits for the stream's earlier work instead of pinning
// more (it holds no lock of the engine then).
TEST_F(CoreSafety, SmallPinnedAsyncCopiesTakeSmallBlocksAndStayNearThePoolsCap) {
  PinnedPoolOptions po;
  po.max_cached_bytes = std::size_t{8} << 20;
  PinnedPool pool(ctx(), po);
  StagingOptions o = small();
  StagingEngine engine(pool, o);
  auto stream = Stream::create(ctx());
  auto src = PinnedBuffer::allocate(ctx(), 4096);
  auto dev = DeviceBuffer::allocate(ctx(), 4096);
  std::memcpy(src.data(), pattern(4096, 5).data(), 4096);
  drvshim_fake_stream_hold(native(stream.ref()), 1);
  for (int i = 0; i < 100; ++i) {
    engine.copy_to_device_async(bytes_of(dev), std::span<const std::byte>(src.as<std::byte>()), stream.ref());
  }
  const PinnedPoolStats held = pool.stats();
  EXPECT_EQ(held.bytes_cached, std::size_t{100} * (64 << 10)) << "one 64 KiB block (the smallest class) per copy";
  // Past the cap (128 blocks), a copy waits for the stream's earlier work (the
  // fake runs a held stream's work when it is waited for) and trims, instead
  // of pinning more.
  const auto waits = drvshim_fake_call_count("cuEventSynchronize");
  std::size_t most = 0;
  for (int i = 0; i < 200; ++i) {
    engine.copy_to_device_async(bytes_of(dev), std::span<const std::byte>(src.as<std::byte>()), stream.ref());
    most = std::max(most, pool.stats().bytes_cached);
  }
  EXPECT_GT(drvshim_fake_call_count("cuEventSynchronize"), waits);
  EXPECT_LE(most, po.max_cached_bytes + (std::size_t{64} << 10));
  drvshim_fake_stream_hold(native(stream.ref()), 0);
  stream.ref().synchronize();
  EXPECT_TRUE(read_back(dev) == pattern(4096, 5));
  EXPECT_EQ(engine.stats().direct_copies, 0u);
}

// ---- any chunk size the options accept -----------------------------------------------------------

TEST_F(CoreSafety, StagedCopiesWorkForChunksThatAreNotPowersOfTwo) {
  PinnedPool pool(ctx());
  auto stream = Stream::create(ctx());
  for (const std::size_t chunk :
       {std::size_t{3} << 20, std::size_t{3} << 19, std::size_t{1000000}, std::size_t{(192 << 10) + 1}}) {
    for (const unsigned depth : {2u, 3u, 5u}) {
      for (const std::size_t bytes : {std::size_t{16} << 20, std::size_t{(5 << 20) + 12345}}) {
        SCOPED_TRACE(testing::Message() << "chunk " << chunk << ", depth " << depth << ", bytes " << bytes);
        StagingOptions o;
        o.chunk_bytes = chunk;
        o.depth = depth;
        o.threads = 2;
        o.spin = std::chrono::microseconds(0);
        StagingEngine engine(pool, o);
        const auto src = pattern(bytes, static_cast<unsigned>(chunk + depth));
        auto dev = DeviceBuffer::allocate(ctx(), bytes);
        engine.copy_to_device(bytes_of(dev), std::span<const std::byte>(src));
        std::vector<std::byte> back(bytes);
        engine.copy_to_host(std::span<std::byte>(back), DeviceSpan<const std::byte>(bytes_of(dev)));
        ASSERT_TRUE(back == src);
        std::vector<std::byte> back_async(bytes);
        engine.copy_to_host_async(std::span<std::byte>(back_async), DeviceSpan<const std::byte>(bytes_of(dev)),
                                  stream.ref());
        stream.ref().synchronize();
        ASSERT_TRUE(back_async == src);
        EXPECT_GT(engine.stats().staged_copies, 0u);
      }
    }
  }
}

// ---- forked children never wait for a parent thread's lock -----------------------------------------

// The parent's other thread holds the pool's lock at the fork (stopped there
// by a hook); the child drops the last handle of the pool. It must return.
TEST_F(CoreSafety, AForkedChildDropsAPoolWhoseLockAnotherThreadHeld) {
  PinnedPoolOptions po;
  po.thread_cache = false;  // every return goes through the lock
  std::optional<PinnedPool> pool(std::in_place, ctx(), po);
  hooks::set(&gate_hook);
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load()) {
      auto b = pool->acquire(4096);
      b.release();
    }
  });
  int hung = 0;
  for (int i = 0; i < 10; ++i) {
    g_gate.arm(hooks::Point::pool_locked);
    ASSERT_TRUE(g_gate.wait_reached());
    const int code = in_child([&] {
      pool.reset();
      return 0;
    });
    g_gate.release();
    hung += code != 0 ? 1 : 0;
  }
  stop = true;
  busy.join();
  EXPECT_EQ(hung, 0) << "children hung (or failed) dropping the pool";
}

// Natural timing: a thread copies through an engine (its pool busy) while
// the parent forks; each child drops the engine and the pool. None may hang.
TEST_F(CoreSafety, ForkedChildrenDropABusyEngineAndItsPool) {
  std::optional<PinnedPool> pool(std::in_place, ctx());
  std::optional<StagingEngine> engine(std::in_place, *pool, small());
  std::atomic<bool> stop{false};
  const auto src = pattern(std::size_t{2} << 20, 4);
  auto dev = DeviceBuffer::allocate(ctx(), src.size());
  ForkQuiescer quiet;  // under TSan only: see in_child.hpp
  std::thread busy([&] {
    while (!stop.load()) {
      quiet.checkpoint();
      engine->copy_to_device(bytes_of(dev), std::span<const std::byte>(src));
      auto b = pool->acquire(1 << 16);
    }
  });
  const int bad = failed_children(quiet, 1, 30, [&] {
    engine.reset();
    pool.reset();
    return 0;
  });
  stop = true;
  busy.join();
  EXPECT_EQ(bad, 0);
}

namespace {

BackgroundInitOptions fake_background() {
  BackgroundInitOptions o;
  o.load.path = DRVSHIM_TEST_FAKE_PATH;
  return o;
}

}  // namespace

// The helper thread holds a step's gate at the fork (writing its outcome,
// stopped there by a hook): the child's queries answer without waiting.
TEST_F(CoreSafety, AForkedChildQueriesABackgroundInitWhoseGateWasHeld) {
  hooks::set(&gate_hook);
  std::atomic<bool> go{false};
  auto o = fake_background();
  o.tasks.push_back({"slow", [&] {
                       while (!go.load()) std::this_thread::sleep_for(100us);
                     }});
  for (int i = 0; i < 5; ++i) {
    go = false;
    g_gate.arm(hooks::Point::background_settle);
    auto bg = BackgroundInit::start(o);
    ASSERT_TRUE(g_gate.wait_reached()) << "no step settled";
    const int code = in_child([&] {
      if (bg.finished()) return 2;  // a step was being written: not every step had settled
      if (bg.wait_for(10ms)) return 3;
      (void)bg.error();
      bool said = false;
      for (std::size_t s = 0; s < bg.step_count(); ++s) {
        const InitStepReport r = bg.step(s);
        said = said || std::string(r.error).find("forked") != std::string::npos;
      }
      const std::string text = bg.summary();
      if (!said || text.find("forked") == std::string::npos) return 4;
      try {
        bg.wait();
        return 5;
      } catch (const UsedAfterForkError&) {
      }
      return 0;
    });
    g_gate.release();
    go = true;
    bg.wait();
    EXPECT_EQ(code, 0) << "child " << i << " (142: hung)";
  }
}

// Natural timing: many forks while the helper runs its steps. Not under
// TSan, whose runtime may deadlock a child forked while the helper allocates
// (in_child.hpp); the test above stops the helper inside a gate instead.
TEST_F(CoreSafety, ForkedChildrenQueryARunningBackgroundInit) {
  if (kTsan) GTEST_SKIP() << "TSan's runtime is not fork-safe while another thread allocates (in_child.hpp)";
  auto o = fake_background();
  std::atomic<bool> go{false};
  for (int t = 0; t < 8; ++t) {
    o.tasks.push_back({"t" + std::to_string(t), [&] { std::this_thread::sleep_for(1ms); }});
  }
  int bad = 0;
  for (int round = 0; round < 6; ++round) {
    auto bg = BackgroundInit::start(o);
    for (int i = 0; i < 5; ++i) {
      bad += in_child([&] {
               (void)bg.finished();
               (void)bg.wait_for(1ms);
               (void)bg.error();
               (void)bg.summary();
               return 0;
             }) != 0
                 ? 1
                 : 0;
    }
    bg.wait();
  }
  (void)go;
  EXPECT_EQ(bad, 0);
}

// ---- a background task waiting for its own steps ----------------------------------------------------

TEST_F(CoreSafety, ABackgroundTaskWaitingForItsOwnOrALaterStepIsRefused) {
  std::promise<const BackgroundInit*> handle;
  auto ready = handle.get_future().share();
  std::vector<std::string> outcomes;
  auto o = fake_background();
  o.tasks.push_back({"first", [&] {
                       const BackgroundInit& bg = *ready.get();
                       auto attempt = [&](const char* what, auto&& call) {
                         try {
                           call();
                           outcomes.push_back(std::string(what) + ": returned");
                         } catch (const NotPermittedError& e) {
                           const bool named = std::string(e.what()).find("helper thread") != std::string::npos;
                           outcomes.push_back(std::string(what) +
                                              (named ? ": refused" : ": refused without saying why"));
                         }
                       };
                       attempt("own step", [&] { bg.wait("task first"); });
                       attempt("later step", [&] { bg.wait("task second"); });
                       attempt("every step", [&] { bg.wait(); });
                       attempt("earlier step", [&] { bg.wait("init"); });
                       attempt("driver", [&] { (void)bg.driver(); });
                       const auto t0 = std::chrono::steady_clock::now();
                       const bool all = bg.wait_for(5s);
                       outcomes.push_back(std::string("wait_for: ") + (all ? "true" : "false") +
                                          (std::chrono::steady_clock::now() - t0 < 1s ? ", at once" : ", waited"));
                     }});
  o.tasks.push_back({"second", [] {}});
  auto bg = BackgroundInit::start(o);
  handle.set_value(&bg);
  ASSERT_TRUE(bg.wait_for(20s)) << "the task waited for itself";
  bg.wait();
  EXPECT_EQ(outcomes,
            (std::vector<std::string>{"own step: refused", "later step: refused", "every step: refused",
                                      "earlier step: returned", "driver: returned", "wait_for: false, at once"}));
}

// A parent thread makes and destroys streams while the parent forks; each
// child destroys a Stream of its own (an engine's, say): the slot table's lock
// is never inherited held.
TEST_F(CoreSafety, AForkedChildDestroysAStreamWhileAParentThreadMakesStreams) {
  std::optional<Stream> mine(Stream::create(ctx()));
  std::atomic<bool> stop{false};
  ForkQuiescer quiet;  // under TSan only: see in_child.hpp
  std::thread busy([&] {
    while (!stop.load()) {
      quiet.checkpoint();
      auto s = Stream::create(ctx());
    }
  });
  const int bad = failed_children(quiet, 1, 60, [&] {
    mine.reset();
    return 0;
  });
  stop = true;
  busy.join();
  EXPECT_EQ(bad, 0) << "children hung destroying a stream";
}

// A copy of 128 MiB with an automatic crew of 12 (16 CPUs forced): nine take
// part, the other helpers leave the job alone, and the data is right both ways.
TEST_F(CoreSafety, ALargeCopyWithAFullAutomaticCrewIsRight) {
  hooks::g_usable_cpus.store(16);
  PinnedPool pool(ctx());
  StagingOptions o;
  o.spin = std::chrono::microseconds(0);
  StagingEngine engine(pool, o);
  hooks::g_usable_cpus.store(0);
  ASSERT_EQ(engine.options().threads, 12u);
  const std::size_t n = std::size_t{128} << 20;
  const auto src = pattern(n, 21);
  auto dev = DeviceBuffer::allocate(ctx(), n);
  engine.copy_to_device(bytes_of(dev), std::span<const std::byte>(src));
  std::vector<std::byte> back(n);
  engine.copy_to_host(std::span<std::byte>(back), DeviceSpan<const std::byte>(bytes_of(dev)));
  EXPECT_TRUE(back == src);
  EXPECT_EQ(engine.stats().staged_copies, 2u);
}

// ---- BackgroundInit::start failing after its thread could have started ------------------------------

TEST_F(CoreSafety, ABackgroundStartThatFailsRunsNoStepAndLeavesNoThread) {
  hooks::set([](hooks::Point p) { return p != hooks::Point::background_register; });
  std::atomic<int> ran{0};
  auto o = fake_background();
  o.tasks.push_back({"count", [&] { ran.fetch_add(1); }});
  for (int i = 0; i < 20; ++i) {
    EXPECT_THROW((void)BackgroundInit::start(o), std::bad_alloc);
  }
  hooks::set(nullptr);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ran.load(), 0) << "a step ran on a thread whose start had failed";
  auto bg = BackgroundInit::start(o);  // a later start works
  bg.wait();
  EXPECT_EQ(ran.load(), 1);
}

// The helper thread cannot be started: a SystemError, and the state (listed
// already) is unlisted again; an exit handler finding it would not wait.
TEST_F(CoreSafety, ABackgroundStartWhoseThreadCannotStartThrowsAndLeavesNothingListed) {
  hooks::set([](hooks::Point p) { return p != hooks::Point::thread_start; });
  std::atomic<int> ran{0};
  auto o = fake_background();
  o.tasks.push_back({"count", [&] { ran.fetch_add(1); }});
  for (int i = 0; i < 5; ++i) EXPECT_THROW((void)BackgroundInit::start(o), SystemError);
  hooks::set(nullptr);
  EXPECT_EQ(ran.load(), 0);
  auto bg = BackgroundInit::start(o);
  bg.wait();
  EXPECT_EQ(ran.load(), 1);
}

// ---- out of memory in no-throw code ----------------------------------------------------------------

// A block returned with an event when the pool is over its cap: the event
// is kept as a spare unless memory runs out, when it is destroyed instead.
TEST_F(CoreSafety, OutOfMemoryReturningABlockWithAnEventDoesNotTerminate) {
  PinnedPoolOptions po;
  po.max_cached_bytes = 0;  // every block returned is freed, its event kept as a spare
  PinnedPool pool(ctx(), po);
  auto stream = Stream::create(ctx());
  hooks::set(&failing_alloc_hook);
  g_fail_noexcept_alloc = true;
  for (int i = 0; i < 4; ++i) {
    auto block = pool.acquire(1 << 16);
    block.release_after(stream.ref());
    (void)pool.acquire(1 << 16);  // finds the freed block's slot empty: allocates
  }
  g_fail_noexcept_alloc = false;
  stream.ref().synchronize();
  EXPECT_EQ(pool.stats().blocks_in_use, 0u);
}

TEST_F(CoreSafety, OutOfMemoryForThePrimaryContextReleaseMarkDoesNotTerminate) {
  trace::enable(true);
  hooks::set(&failing_alloc_hook);
  {
    auto extra = drv_->device(0).retain_primary_context();
    g_fail_noexcept_alloc = true;
  }  // released here: its trace mark cannot be made
  g_fail_noexcept_alloc = false;
  trace::enable(false);
  EXPECT_EQ(drvshim_fake_primary_refcount(0), 1) << "the release happened";
}

// ---- a StreamRef of a destroyed Stream -----------------------------------------------------------

// In every build (not only with DRVSHIM_CHECK_VIEWS): refused before the
// driver is called, also when a new stream has taken the dead one's handle.
TEST_F(CoreSafety, AStreamViewOfADestroyedStreamNeverReachesTheDriver) {
  drvshim_fake_recycle_handles(1);
  std::optional<Stream> stream(Stream::create(ctx()));
  const StreamRef dead = stream->ref();
  stream.reset();
  auto other = Stream::create(ctx());
  ASSERT_EQ(other.ref().native(), dead.native()) << "the fake did not recycle the handle";
  const auto before = drvshim_fake_call_count("cuStreamSynchronize");
  const auto e = expect_throw<InvalidArgumentError>([&] { dead.synchronize(); });
  EXPECT_NE(std::string(e.what()).find("after its Stream was destroyed"), std::string::npos) << e.what();
  EXPECT_EQ(drvshim_fake_call_count("cuStreamSynchronize"), before);
  EXPECT_THROW((void)dead.query(), InvalidArgumentError);
  EXPECT_THROW(dead.launch_host_func([] {}), InvalidArgumentError);
  auto dev = DeviceBuffer::allocate(ctx(), 64);
  std::vector<std::byte> host(64);
  EXPECT_THROW(copy_async(dead, bytes_of(dev), std::span<const std::byte>(host)), InvalidArgumentError);
  other.ref().synchronize();  // the live stream is unaffected
  drvshim_fake_recycle_handles(0);
}

// Many streams made and destroyed on several threads: every live view works,
// every dead one is refused (slots reused across generations).
TEST_F(CoreSafety, StreamViewChecksHoldAcrossReusedSlots) {
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        std::optional<Stream> s(Stream::create(ctx()));
        const StreamRef r = s->ref();
        try {
          r.synchronize();
        } catch (...) {
          ++wrong;
        }
        s.reset();
        try {
          r.synchronize();
          ++wrong;
        } catch (const InvalidArgumentError&) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// ---- the CPU budget: the process's own cgroups, v1 and v2 --------------------------------------

namespace {

class FakeCgroups {
 public:
  FakeCgroups() {
    char dir[] = "/tmp/drvshim_cgroups_XXXXXX";
    root_ = mkdtemp(dir);
  }
  ~FakeCgroups() {
    hooks::set_cgroup_root(nullptr);
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  FakeCgroups(const FakeCgroups&) = delete;
  FakeCgroups& operator=(const FakeCgroups&) = delete;
  void write(const std::string& path, const std::string& text) {
    const std::filesystem::path full = root_ + path;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full) << text;
  }
  // A cgroup v1 directory's quota files (a quota of "-1": none).
  void v1(const std::string& dir, const std::string& quota, const std::string& period = "100000") {
    write(dir + "/cpu.cfs_quota_us", quota + "\n");
    write(dir + "/cpu.cfs_period_us", period + "\n");
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

}  // namespace

TEST(CpuBudgetCgroups, AHybridHostsV1QuotaCountsBesideAnUnlimitedV2Group) {
  FakeCgroups fs;
  fs.write("/proc/self/cgroup", "12:memory:/docker/c1\n4:cpu,cpuacct:/docker/c1\n0::/user.slice\n");
  fs.write("/sys/fs/cgroup/user.slice/cpu.max", "max 100000\n");
  fs.v1("/sys/fs/cgroup/cpu,cpuacct", "-1");
  fs.v1("/sys/fs/cgroup/cpu,cpuacct/docker/c1", "50000");
  EXPECT_EQ(drvshim::detail::cgroup_quota(fs.root()), 0.5);
  hooks::set_cgroup_root(fs.root().c_str());
  EXPECT_EQ(drvshim::detail::usable_cpus(), 1u) << "half a CPU is one thread";
}

TEST(CpuBudgetCgroups, V1ReadsTheProcesssOwnGroupAndThoseAboveIt) {
  FakeCgroups fs;
  fs.write("/proc/self/cgroup", "3:cpuacct,cpu:/a/b\n");
  fs.v1("/sys/fs/cgroup/cpu", "-1");
  fs.v1("/sys/fs/cgroup/cpu/a", "300000");
  fs.v1("/sys/fs/cgroup/cpu/a/b", "-1");
  EXPECT_EQ(drvshim::detail::cgroup_quota(fs.root()), 3.0);
}

TEST(CpuBudgetCgroups, AContainersMountIsItsGroupWhenThePathIsNotUnderIt) {
  FakeCgroups fs;
  fs.write("/proc/self/cgroup", "4:cpu,cpuacct:/kubepods/pod1/c2\n");
  fs.v1("/sys/fs/cgroup/cpu,cpuacct", "150000");
  EXPECT_EQ(drvshim::detail::cgroup_quota(fs.root()), 1.5);
}

TEST(CpuBudgetCgroups, V2TakesTheTightestGroupOnTheWayUpAndTheSmallerOfV1AndV2) {
  FakeCgroups fs;
  fs.write("/proc/self/cgroup", "0::/a/b\n");
  fs.write("/sys/fs/cgroup/a/cpu.max", "250000 100000\n");
  fs.write("/sys/fs/cgroup/a/b/cpu.max", "max 100000\n");
  EXPECT_EQ(drvshim::detail::cgroup_quota(fs.root()), 2.5);
  fs.write("/proc/self/cgroup", "0::/a/b\n5:cpu:/\n");
  fs.v1("/sys/fs/cgroup/cpu", "200000");
  EXPECT_EQ(drvshim::detail::cgroup_quota(fs.root()), 2.0);
  FakeCgroups none;
  none.write("/proc/self/cgroup", "0::/\n");
  EXPECT_FALSE(drvshim::detail::cgroup_quota(none.root()).has_value());
}

// Where the hierarchies really are (/proc/self/mountinfo): a hybrid host's v2
// at /sys/fs/cgroup/unified, v1's cpu sharing a mount with cpuset.
TEST(CpuBudgetCgroups, TheMountsComeFromMountinfo) {
  FakeCgroups fs;
  fs.write("/proc/self/mountinfo",
           "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
           "35 25 0:31 / /sys/fs/cgroup/cpuset,cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpuset,cpu,cpuacct\n"
           "36 25 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
  fs.write("/proc/self/cgroup", "5:cpuset,cpu,cpuacct:/job\n6:memory:/job\n0::/job\n");
  fs.write("/sys/fs/cgroup/unified/job/cpu.max", "max 100000\n");
  fs.v1("/sys/fs/cgroup/cpuset,cpu,cpuacct/job", "250000");
  EXPECT_EQ(drvshim::detail::cgroup_quota(fs.root()), 2.5);
  fs.write("/sys/fs/cgroup/unified/job/cpu.max", "150000 100000\n");
  EXPECT_EQ(drvshim::detail::cgroup_quota(fs.root()), 1.5);
}

// A container's mount whose root is its own group (no cgroup namespace), at
// a mount point with a blank (escaped as \040 in mountinfo).
TEST(CpuBudgetCgroups, AMountRootedAtTheContainersGroupIsReadBelowThatRoot) {
  FakeCgroups fs;
  fs.write("/proc/self/mountinfo",
           "40 30 0:33 /docker/c1 /sys/fs/cgroup/my\\040cpu ro master:10 - cgroup cgroup ro,cpu\n");
  fs.write("/proc/self/cgroup", "4:cpu:/docker/c1/sub\n");
  fs.v1("/sys/fs/cgroup/my cpu", "50000");
  fs.v1("/sys/fs/cgroup/my cpu/sub", "-1");
  EXPECT_EQ(drvshim::detail::cgroup_quota(fs.root()), 0.5);
  const auto mounts = drvshim::detail::cgroup_mounts(
      "40 30 0:33 /docker/c1 /sys/fs/cgroup/my\\040cpu ro master:10 - cgroup cgroup ro,cpu\n"
      "41 30 0:34 / /sys/fs/cgroup/memory ro - cgroup cgroup ro,memory\n"
      "42 30 0:35 / /sys/fs/cgroup/unified ro - cgroup2 cgroup2 ro\ngarbage\n");
  ASSERT_EQ(mounts.size(), 2u);
  EXPECT_FALSE(mounts[0].v2);
  EXPECT_EQ(mounts[0].root, "/docker/c1");
  EXPECT_EQ(mounts[0].mount_point, "/sys/fs/cgroup/my cpu");
  EXPECT_TRUE(mounts[1].v2);
}

TEST(CpuBudgetCgroups, TheV1CpuLineIsFoundAmongTheControllers) {
  using drvshim::detail::cgroup_v1_cpu_path;
  EXPECT_EQ(cgroup_v1_cpu_path("4:cpu,cpuacct:/docker/1\n0::/\n"), "/docker/1");
  EXPECT_EQ(cgroup_v1_cpu_path("7:cpuacct,cpu:/x\n"), "/x");
  EXPECT_EQ(cgroup_v1_cpu_path("2:cpuset:/y\n3:cpuacct:/z\n"), "");
  EXPECT_EQ(cgroup_v1_cpu_path("0::/only-v2\n"), "");
  EXPECT_EQ(cgroup_v1_cpu_path("garbage"), "");
}

// An engine made inside such a container stages with one thread (it goes straight to the driver).
TEST_F(CoreSafety, AnEngineInAHalfCpuContainerUsesOneThread) {
  FakeCgroups fs;
  fs.write("/proc/self/cgroup", "4:cpu,cpuacct:/\n0::/\n");
  fs.v1("/sys/fs/cgroup/cpu,cpuacct", "50000");
  hooks::set_cgroup_root(fs.root().c_str());
  PinnedPool pool(ctx());
  StagingEngine engine(pool);
  EXPECT_EQ(engine.options().threads, 1u);
}
