// SPDX-License-Identifier: Apache-2.0
// Failure paths outside the pool and the engine: host functions
// never make driver calls, a forked child never deadlocks and is told why
// CUDA fails there, a poisoned context can be recovered as the error message
// recommends, a sticky error blames the right context, and the environment
// variables mean what they say.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>

#include "env.hpp"
#include "fixture.hpp"
#include "in_child.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

void* native(const StreamRef& s) { return reinterpret_cast<void*>(s.native()); }

// ---- host functions ---------------------------------------------------------------------------------

class HostFunctions : public PrimaryContextTest {};

// The natural idiom: the closure owns a buffer so it stays alive until the
// callback ran. Before, the closure was destroyed inside the host function,
// so cuMemFree (and a context push and pop) ran there, which CUDA forbids.
TEST_F(HostFunctions, AClosureOwningABufferIsDestroyedOutsideTheHostFunction) {
  auto s = Stream::create(ctx());
  auto buffer = std::make_shared<DeviceBuffer>(DeviceBuffer::allocate(ctx(), 4096));
  std::atomic<bool> ran{false};
  drvshim_fake_stream_hold(native(s.ref()), 1);
  s.ref().launch_host_func([buffer = std::move(buffer), &ran] { ran = buffer->size() == 4096; });
  drvshim_fake_stream_hold(native(s.ref()), 0);  // the host function runs now
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(drvshim_fake_misuse_count(), 0u) << drvshim_fake_last_misuse();
  EXPECT_EQ(drvshim_fake_live_device_allocations(), 1) << "freed later, outside the host function";
  s.ref().synchronize();
  EXPECT_EQ(drvshim_fake_live_device_allocations(), 0) << "the closure was destroyed at the synchronize";
}

// A drvshim call inside a host function is refused before the driver sees it,
// and the callback's failure is reported at the next synchronize.
TEST_F(HostFunctions, DrvshimCallsInsideAHostFunctionAreRefusedWithoutADriverCall) {
  auto s = Stream::create(ctx());
  drvshim_fake_stream_hold(native(s.ref()), 1);
  const StreamRef ref = s.ref();
  s.ref().launch_host_func([ref] { ref.synchronize(); });
  drvshim_fake_clear_call_log();
  drvshim_fake_stream_hold(native(s.ref()), 0);
  EXPECT_TRUE(fake_calls().empty()) << "the host function reached the driver";
  EXPECT_EQ(drvshim_fake_misuse_count(), 0u) << drvshim_fake_last_misuse();
  const auto e = expect_throw<HostCallbackError>([&] { s.ref().synchronize(); });
  EXPECT_NE(std::string(e.what()).find("inside a host function"), std::string::npos) << e.what();
}

// A pinned block released inside a host function is kept (even above the
// pool's cap) instead of freed there.
TEST_F(HostFunctions, APinnedBlockReleasedInsideAHostFunctionMakesNoDriverCall) {
  PinnedPoolOptions o;
  o.max_cached_bytes = 0;
  o.thread_cache = false;
  PinnedPool pool(ctx(), o);
  auto s = Stream::create(ctx());
  auto block = std::make_shared<PinnedBlock>(pool.acquire(1 << 20));
  drvshim_fake_stream_hold(native(s.ref()), 1);
  s.ref().launch_host_func([block] { block->release(); });
  drvshim_fake_stream_hold(native(s.ref()), 0);
  EXPECT_EQ(drvshim_fake_misuse_count(), 0u) << drvshim_fake_last_misuse();
  EXPECT_EQ(pool.stats().blocks_cached, 1u) << "kept above the cap rather than freed in the host function";
  EXPECT_EQ(pool.trim(0), 1u << 20);
}

// ---- fork ----------------------------------------------------------------------------------------------

class ForkPaths : public FakeDriverTest {};

// CUDA cannot be initialised again in a child of a process that initialised
// it: the driver's cuInit answers CUDA_ERROR_NOT_INITIALIZED there. Before,
// drvshim turned that into "call Driver::init() first".
TEST_F(ForkPaths, AChildOfAnInitialisedParentIsToldWhyCuInitFails) {
  Driver parent = load_and_init();
  const int code = in_child([]() -> int {
    Driver fresh = load_fake();
    try {
      fresh.init();
      return 1;
    } catch (const CudaError& e) {
      const std::string what = e.what();
      if (e.code() != CUDA_ERROR_NOT_INITIALIZED) return 2;
      if (what.find("forked") == std::string::npos || what.find("exec") == std::string::npos) return 3;
      return 0;
    } catch (const Error&) {
      return 4;
    }
  });
  EXPECT_EQ(code, 0) << "1: init worked, 2: code lost, 3: message, 4: another error kind";
}

// The throwing forms of release and destroy refuse in a child (the no-throw
// twins skip silently, as destructors must).
TEST_F(ForkPaths, ThrowingReleasesInAChildSayWhy) {
  Driver drv = load_and_init();
  PrimaryContext primary = drv.device(0).retain_primary_context();
  auto buffer = DeviceBuffer::allocate(primary.ref(), 64);
  auto stream = Stream::create(primary.ref());
  const int code = in_child([&]() -> int {
    try {
      buffer.free();
      return 1;
    } catch (const UsedAfterForkError&) {
    }
    try {
      stream.destroy();
      return 2;
    } catch (const UsedAfterForkError&) {
    }
    try {
      primary.release();
      return 3;
    } catch (const UsedAfterForkError&) {
    }
    return 0;
  });
  EXPECT_EQ(code, 0) << "1: DeviceBuffer::free, 2: Stream::destroy, 3: PrimaryContext::release did not throw";
}

// fork() while other threads hold drvshim's locks (the pool's, the log's, the
// trace's): the child never deadlocks, and each use fails with the fork error.
TEST_F(ForkPaths, AChildNeverDeadlocksOnLocksHeldByOtherThreadsAtFork) {
  Driver drv = load_and_init();
  PrimaryContext primary = drv.device(0).retain_primary_context();
  PinnedPool pool(primary.ref());
  log::set_sink([](log::Level, std::string_view) {});
  log::set_level(log::Level::trace);  // every driver call is logged: the log's lock is busy
  trace::enable(true);
  std::atomic<bool> stop{false};
  ForkQuiescer quiet;  // under TSan only: see in_child.hpp
  std::vector<std::thread> busy;
  for (int t = 0; t < 2; ++t) {
    busy.emplace_back([&] {
      while (!stop.load()) {
        quiet.checkpoint();
        auto b = pool.acquire(64 << 10);
        (void)pool.stats();
        trace::mark("busy", "x");
        if (trace::records().size() > 1000) trace::clear();  // keeps the process (and each fork) small
        (void)primary.ref().memory_info();                   // driver calls, each logged at trace level
      }
    });
  }
  int bad = 0;
  std::string codes;
  for (int child = 0; child < 40; ++child) {
    quiet.stop(2);
    const int code = in_child([&]() -> int {
      try {
        (void)pool.acquire(64 << 10);
        return 1;
      } catch (const UsedAfterForkError&) {
      }
      try {
        (void)pool.stats();
        return 2;
      } catch (const UsedAfterForkError&) {
      }
      trace::mark("child", "after fork");
      (void)trace::records();
      try {
        (void)drv.device_count();  // logs (trace level) and is refused
        return 3;
      } catch (const UsedAfterForkError&) {
      }
      PinnedPool fresh(primary.ref());
      try {
        (void)fresh.acquire(64 << 10);  // the context is the parent's
        return 4;
      } catch (const UsedAfterForkError&) {
      }
      return 0;
    });
    quiet.go();
    if (code != 0) {
      ++bad;
      codes += std::to_string(code) + " ";
    }
  }
  stop = true;
  for (auto& t : busy) t.join();
  trace::enable(false);
  log::set_level(log::Level::warn);
  EXPECT_EQ(bad, 0) << "children that failed (142: deadlocked, SIGALRM): " << codes;
}

// ---- poisoned contexts ---------------------------------------------------------------------------------

class Poisoning : public FakeDriverTest {};

// The recovery the error message recommends: drop the objects, release every
// retain (or reset), retain again. The driver hands back the same address
// (the fake does too, as the H200 does); before, drvshim kept that address
// poisoned for good.
TEST_F(Poisoning, ReleasingThePoisonedPrimaryContextRecoversIt) {
  Driver drv = load_and_init();
  std::uintptr_t first = 0;
  {
    PrimaryContext p = drv.device(0).retain_primary_context();
    first = p.ref().address();
    auto s = Stream::create(p.ref());
    auto leaked = DeviceBuffer::allocate(p.ref(), 64);
    drvshim_fake_stream_fail(native(s.ref()), CUDA_ERROR_ILLEGAL_ADDRESS);
    expect_throw<CudaError>([&] { s.ref().synchronize(); });
    expect_throw<ContextPoisonedError>([&] { (void)DeviceBuffer::allocate(p.ref(), 64); });
  }  // objects dropped (their driver calls skipped), the retain released: the context is gone
  EXPECT_EQ(drvshim_fake_primary_active(0), 0);
  PrimaryContext again = drv.device(0).retain_primary_context();
  EXPECT_EQ(again.ref().address(), first) << "the fake hands back the same address, as the H200 does";
  auto buffer = DeviceBuffer::allocate(again.ref(), 64);
  fill(buffer.as<std::uint8_t>(), std::uint8_t{7});
  std::uint8_t back[64] = {};
  copy(std::span<std::uint8_t>(back), DeviceSpan<const std::uint8_t>(buffer.as<std::uint8_t>()));
  EXPECT_EQ(back[63], 7);
  buffer.free();
  drvshim_fake_drop_allocations();  // what the poisoned context leaked
}

// A stream-ordered buffer freed in a poisoned context: like every owner, its
// memory is left to the driver (no cuMemFreeAsync into the poisoned context),
// the free does not throw, and the buffer is empty after it.
TEST_F(Poisoning, AnAsyncDeviceBufferFreedInAPoisonedContextIsLeftToTheDriver) {
  Driver drv = load_and_init();
  {
    PrimaryContext p = drv.device(0).retain_primary_context();
    auto s = Stream::create(p.ref());
    auto pooled = AsyncDeviceBuffer::allocate(s.ref(), 64);
    drvshim_fake_stream_fail(native(s.ref()), CUDA_ERROR_ILLEGAL_ADDRESS);
    expect_throw<CudaError>([&] { s.ref().synchronize(); });
    const auto frees_before = drvshim_fake_call_count("cuMemFreeAsync");
    pooled.free();
    EXPECT_FALSE(pooled);
    EXPECT_EQ(drvshim_fake_call_count("cuMemFreeAsync"), frees_before) << "no call into the poisoned context";
  }
  drvshim_fake_drop_allocations();  // what the poisoned context leaked
}

// With another component still holding the primary context, releasing
// drvshim's retains does not end it: Device::reset_primary_context() does.
TEST_F(Poisoning, ResettingThePrimaryContextRecoversItWhileOthersHoldIt) {
  activate_externally(0, 0);
  Driver drv = load_and_init();
  const Device dev = drv.device(0);
  {
    PrimaryContext p = dev.retain_primary_context();
    auto s = Stream::create(p.ref());
    drvshim_fake_stream_fail(native(s.ref()), CUDA_ERROR_LAUNCH_FAILED);
    expect_throw<CudaError>([&] { s.ref().synchronize(); });
  }
  {
    PrimaryContext still = dev.retain_primary_context();
    expect_throw<ContextPoisonedError>([&] { (void)DeviceBuffer::allocate(still.ref(), 64); });
  }
  dev.reset_primary_context();
  PrimaryContext fresh = dev.retain_primary_context();
  EXPECT_NO_THROW((void)DeviceBuffer::allocate(fresh.ref(), 64));
}

// A sticky error reported by a call made outside any context scope (a
// throwing free) poisons the object's context, not the thread's current one.
TEST_F(Poisoning, AStickyErrorBlamesTheObjectsContextNotTheCurrentOne) {
  ASSERT_EQ(drvshim_fake_set_profile("dual"), 0);
  Driver drv = load_and_init();
  PrimaryContext p0 = drv.device(0).retain_primary_context();
  PrimaryContext p1 = drv.device(1).retain_primary_context();
  auto on_one = DeviceBuffer::allocate(p1.ref(), 64);
  {
    ScopedCurrentContext current(p0.ref());
    drvshim_fake_fail_call("cuMemFree", 1, CUDA_ERROR_ILLEGAL_ADDRESS);
    expect_throw<CudaError>([&] { on_one.free(); });
  }
  EXPECT_NO_THROW((void)DeviceBuffer::allocate(p0.ref(), 64)) << "device 0's healthy context was blamed";
  expect_throw<ContextPoisonedError>([&] { (void)DeviceBuffer::allocate(p1.ref(), 64); });
  drvshim_fake_drop_allocations();
}

// ---- environment variables -------------------------------------------------------------------------------

TEST(Environment, SwitchesAndSizesAreParsedOneWay) {
  namespace env = drvshim::detail::env;
  for (const char* yes : {"1", "true", "TRUE", "Yes", "on", "ON"}) EXPECT_EQ(env::parse_flag(yes), true) << yes;
  for (const char* no : {"0", "false", "False", "no", "off", "OFF"}) EXPECT_EQ(env::parse_flag(no), false) << no;
  for (const char* bad : {"", "2", "maybe", "enable", " 1"}) EXPECT_FALSE(env::parse_flag(bad).has_value()) << bad;
  EXPECT_EQ(env::parse_bytes("1073741824"), 1073741824u);
  EXPECT_EQ(env::parse_bytes("512M"), 512u << 20);
  EXPECT_EQ(env::parse_bytes("2G"), 2ull << 30);
  EXPECT_EQ(env::parse_bytes("2GiB"), 2ull << 30);
  EXPECT_EQ(env::parse_bytes("64k"), 64u << 10);
  for (const char* bad : {"-1", "", "1.5G", "12 M", "1X", "G", "99999999999999999999", "17179869184T"}) {
    EXPECT_FALSE(env::parse_bytes(bad).has_value()) << bad;
  }
}

std::string stderr_of(const std::string& env_and_command) {
  std::string out;
  std::FILE* p = popen((env_and_command + " 2>&1 >/dev/null").c_str(), "r");
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  return out;
}

#ifdef DRVSHIM_TEST_PROBE
TEST(Environment, BadValuesAndUnknownNamesAreReportedWithWhatIsAccepted) {
  const std::string err =
      stderr_of(std::string("DRVSHIM_LIBCUDA=" DRVSHIM_TEST_FAKE_PATH
                            " DRVSHIM_SYNC_EACH_OP=maybe DRVSHIM_CACHE_DISABLED=1 " DRVSHIM_TEST_PROBE));
  EXPECT_NE(err.find("DRVSHIM_SYNC_EACH_OP=\"maybe\" is not a switch"), std::string::npos) << err;
  EXPECT_NE(err.find("1/true/yes/on or 0/false/no/off"), std::string::npos) << err;
  EXPECT_NE(err.find("DRVSHIM_CACHE_DISABLED is not a drvshim variable"), std::string::npos) << err;
  EXPECT_NE(err.find("did you mean DRVSHIM_CACHE_DISABLE?"), std::string::npos) << err;
  const std::string quiet =
      stderr_of(std::string("DRVSHIM_LIBCUDA=" DRVSHIM_TEST_FAKE_PATH " DRVSHIM_SYNC_EACH_OP=off " DRVSHIM_TEST_PROBE));
  EXPECT_EQ(quiet.find("DRVSHIM_SYNC_EACH_OP"), std::string::npos) << "\"off\" means off: " << quiet;
}
#endif

}  // namespace
