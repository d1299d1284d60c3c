// SPDX-License-Identifier: Apache-2.0
// Per-device correctness on the fake's dual profile: the pinned pool, the
// staging engine, modules and libraries, and the compile cache when one
// thread works on both devices and when two threads each use another device.
#include <drvshim/drvshim.hpp>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "fixture.hpp"
#include "staging_test_support.hpp"
#include "two_devices.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

std::vector<std::uint8_t> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::uint8_t> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = test_byte(i, seed);
  return v;
}

// ---- the pinned pool ---------------------------------------------------------------------------------

using PerDevicePool = TwoDevices;

TEST_F(PerDevicePool, AThreadAlternatingDevicesGetsEachPoolsOwnBlocksAndNoPoolGrows) {
  PinnedPool pool0(c0());
  PinnedPool pool1(c1());
  for (int round = 0; round < 100; ++round) {
    for (const PinnedPool* pool : {&pool0, &pool1}) {
      PinnedBlock block = pool->acquire(64 << 10);
      const PointerInfo info = inspect_pointer(*drv_, block.data());
      ASSERT_EQ(info.context, pool->context().address())
          << "round " << round << ": a block of device " << pool->context().device().ordinal()
          << "'s pool came from another context";
    }
  }
  EXPECT_EQ(pool0.stats().allocations, 1u) << "the thread's parked block of one pool is not lost to the other";
  EXPECT_EQ(pool1.stats().allocations, 1u);
  EXPECT_EQ(pool0.stats().reuses + pool1.stats().reuses, 198u);
}

TEST_F(PerDevicePool, ABlockReleasedAfterAStreamOfTheOtherDeviceWaitsForThatStream) {
  PinnedPool pool0(c0());  // portable blocks: usable by device 1's copies too
  auto dst1 = DeviceBuffer::allocate(c1(), 64 << 10);
  auto s1 = Stream::create(c1());
  auto s0 = Stream::create(c0());
  const auto values = pattern(64 << 10, 3);
  {
    PinnedBlock block = pool0.acquire(64 << 10);
    std::memcpy(block.data(), values.data(), values.size());
    drvshim_fake_stream_hold(native(s1.ref()), 1);
    copy_async(s1.ref(), dst1.as<std::byte>(), std::span<const std::byte>(block.bytes()));
    // The release point is on device 1's stream: the event must live in device 1's context.
    block.release_after(s1.ref());
  }
  {
    PinnedBlock other = pool0.acquire(64 << 10);
    EXPECT_EQ(pool0.stats().allocations, 2u) << "the first block is still being read by device 1's stream";
    EXPECT_GE(pool0.stats().waits_skipped, 1u);
    other.release_after(s0.ref());  // and an event of device 0 for device 0's stream
  }
  drvshim_fake_stream_hold(native(s1.ref()), 0);
  s1.ref().synchronize();
  s0.ref().synchronize();
  std::vector<std::uint8_t> back(values.size());
  copy(std::span<std::uint8_t>(back), DeviceSpan<const std::uint8_t>(dst1.as<std::uint8_t>()));
  EXPECT_EQ(back, values);
  for (int i = 0; i < 4; ++i) {
    // Releases after either device's stream alternate; the spare events are all device 0's.
    PinnedBlock b = pool0.acquire(64 << 10);
    b.release_after(i % 2 == 0 ? s1.ref() : s0.ref());
    s0.ref().synchronize();
    s1.ref().synchronize();
  }
  EXPECT_EQ(pool0.stats().allocations, 2u);
}

// The pool keeps no event of another context: once device 1's context has
// ended, the block released after its stream is reused, trimmed and freed
// with the pool, and no call touches a dead event (the fixture counts misuse).
TEST_F(PerDevicePool, ABlockReleasedAfterAnotherDevicesStreamOutlivesThatDevicesContext) {
  for (const bool pending_at_end : {false, true}) {
    SCOPED_TRACE(pending_at_end ? "device 1's work still queued when its context ends" : "device 1 idle");
    if (!p1_) p1_.emplace(drv_->device(1).retain_primary_context());
    PinnedPool pool0(c0());
    {
      auto dst1 = DeviceBuffer::allocate(c1(), 64 << 10);
      auto s1 = Stream::create(c1());
      PinnedBlock block = pool0.acquire(64 << 10);
      drvshim_fake_stream_hold(native(s1.ref()), 1);
      copy_async(s1.ref(), dst1.as<std::byte>(), std::span<const std::byte>(block.bytes()));
      block.release_after(s1.ref());
      {
        PinnedBlock other = pool0.acquire(64 << 10);
        EXPECT_EQ(pool0.stats().allocations, 2u) << "reused while device 1's stream still reads it";
      }
      if (!pending_at_end) {
        drvshim_fake_stream_hold(native(s1.ref()), 0);
        s1.ref().synchronize();
      } else {
        // Left to the context's end, held: destroying them would run the queued work first.
        (void)s1.detach();
        (void)dst1.detach();
      }
    }
    p1_.reset();  // the last retain: device 1's context ends, with its events
    ASSERT_FALSE(drv_->device(1).primary_context_state().active);
    for (int round = 0; round < 4; ++round) {
      std::vector<PinnedBlock> blocks;
      blocks.push_back(pool0.acquire(64 << 10));
      blocks.push_back(pool0.acquire(64 << 10));
    }
    EXPECT_EQ(pool0.stats().allocations, 2u) << "the block waiting for device 1 was never reused";
    EXPECT_EQ(pool0.trim(0), std::size_t{2} * (64 << 10));
    EXPECT_EQ(drvshim_fake_misuse_count(), 0u) << drvshim_fake_last_misuse();
  }
}

// A stream of device 1 that never gets past its release point holds back the
// block released after it, and only that one: a block released after another
// stream of device 1 that finished is reused (each pending wait has its own
// relay stream; one shared relay would chain every later block behind it).
TEST_F(PerDevicePool, AStuckStreamOfAnotherDeviceHoldsBackOnlyItsOwnBlock) {
  PinnedPool pool0(c0());
  auto stuck = Stream::create(c1());
  auto moving = Stream::create(c1());
  drvshim_fake_stream_hold(native(stuck.ref()), 1);
  {
    PinnedBlock a = pool0.acquire(64 << 10);
    a.release_after(stuck.ref());
  }
  for (int round = 0; round < 20; ++round) {
    PinnedBlock b = pool0.acquire(64 << 10);
    b.release_after(moving.ref());
    moving.ref().synchronize();
  }
  EXPECT_EQ(pool0.stats().allocations, 2u) << "the block released after the finished stream is reused";
  EXPECT_EQ(pool0.trim(0), std::size_t{64} << 10) << "the finished block is trimmed, the stuck one kept";
  drvshim_fake_stream_hold(native(stuck.ref()), 0);
  stuck.ref().synchronize();
  EXPECT_EQ(pool0.trim(0), std::size_t{64} << 10);
}

TEST_F(PerDevicePool, TwoThreadsEachWithItsDevicesPool) {
  constexpr int kRounds = 200;
  auto work = [&](const ContextRef& ctx, unsigned seed) {
    PinnedPool pool(ctx);
    auto dev = DeviceBuffer::allocate(ctx, 256 << 10);
    auto s = Stream::create(ctx);
    for (int r = 0; r < kRounds; ++r) {
      PinnedBlock b = pool.acquire(256 << 10);
      const auto values = pattern(256 << 10, seed + static_cast<unsigned>(r));
      std::memcpy(b.data(), values.data(), values.size());
      copy_async(s.ref(), dev.as<std::byte>(), std::span<const std::byte>(b.bytes()));
      b.release_after(s.ref());
      PinnedBlock back = pool.acquire(256 << 10);
      copy_async(s.ref(), back.bytes(), DeviceSpan<const std::byte>(dev.as<std::byte>()));
      s.ref().synchronize();
      if (std::memcmp(back.data(), values.data(), values.size()) != 0) ADD_FAILURE() << "round " << r << ": wrong data";
      if (inspect_pointer(*drv_, back.data()).context != ctx.address()) ADD_FAILURE() << "a block of another context";
    }
    if (pool.stats().allocations > 3) ADD_FAILURE() << pool.stats().allocations << " allocations: the pool grew";
    if (drvshim_fake_ctx_stack_depth() != 0) ADD_FAILURE() << "a call left a context current";
  };
  std::thread t0([&] { work(c0(), 1); });
  std::thread t1([&] { work(c1(), 2); });
  t0.join();
  t1.join();
}

// ---- the staging engine -------------------------------------------------------------------------------

class PerDeviceStaging : public TwoDevices {
 protected:
  static StagingOptions options() { return small_staging(2); }
};

TEST_F(PerDeviceStaging, AnEngineRefusesMemoryAndStreamsOfAnotherDevice) {
  PinnedPool pool0(c0());
  StagingEngine engine0(pool0, options());
  auto on1 = DeviceBuffer::allocate(c1(), 4 << 20);
  auto on0 = DeviceBuffer::allocate(c0(), 4 << 20);
  auto s1 = Stream::create(c1());
  std::vector<std::byte> host(4 << 20);
  drvshim_fake_clear_call_log();
  auto e = expect_throw<InvalidArgumentError>([&] { engine0.copy_to_device(on1.as<std::byte>(), host); });
  EXPECT_NE(std::string(e.what()).find("device memory is in context"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("on device 1; this engine's pool serves context"), std::string::npos)
      << e.what();
  EXPECT_NE(e.hint().find("one PinnedPool and StagingEngine per context"), std::string::npos) << e.hint();
  expect_throw<InvalidArgumentError>([&] { engine0.copy_to_host(host, on1.as<std::byte>()); });
  auto s =
      expect_throw<InvalidArgumentError>([&] { engine0.copy_to_device_async(on0.as<std::byte>(), host, s1.ref()); });
  EXPECT_NE(std::string(s.what()).find("the stream is in context"), std::string::npos) << s.what();
  expect_throw<InvalidArgumentError>([&] { engine0.copy_to_host_async(host, on0.as<std::byte>(), s1.ref()); });
  EXPECT_TRUE(fake_calls().empty()) << "refused before any driver call";
}

TEST_F(PerDeviceStaging, OneEnginePerDeviceOnTwoThreads) {
  constexpr std::size_t bytes = (3 << 20) + 12345;
  auto work = [&](const ContextRef& ctx, unsigned seed) {
    PinnedPool pool(ctx);
    StagingEngine engine(pool, options());
    auto dev = DeviceBuffer::allocate(ctx, bytes);
    auto s = Stream::create(ctx);
    for (unsigned r = 0; r < 6; ++r) {
      const auto src = pattern(bytes, seed * 100 + r);
      std::vector<std::uint8_t> back(bytes);
      if (r % 2 == 0) {
        engine.copy_to_device(dev.as<std::byte>(), std::as_bytes(std::span<const std::uint8_t>(src)));
        engine.copy_to_host(std::as_writable_bytes(std::span<std::uint8_t>(back)), dev.as<std::byte>());
      } else {
        engine.copy_to_device_async(dev.as<std::byte>(), std::as_bytes(std::span<const std::uint8_t>(src)), s.ref());
        engine.copy_to_host_async(std::as_writable_bytes(std::span<std::uint8_t>(back)), dev.as<std::byte>(), s.ref());
        s.ref().synchronize();
      }
      if (back != src) ADD_FAILURE() << "device " << ctx.device().ordinal() << " round " << r << ": wrong data";
    }
    if (engine.stats().staged_copies == 0) ADD_FAILURE() << "nothing was staged: the test would prove nothing";
    if (drvshim_fake_ctx_stack_depth() != 0) ADD_FAILURE() << "a call left a context current";
  };
  std::thread t0([&] { work(c0(), 1); });
  std::thread t1([&] { work(c1(), 2); });
  t0.join();
  t1.join();
}

// ---- modules and libraries --------------------------------------------------------------------------------

constexpr const char* kPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry fill_u32(
    .param .u64 fill_u32_param_0,
    .param .u32 fill_u32_param_1,
    .param .u32 fill_u32_param_2
)
{
    ret;
}
)";

std::span<const std::byte> ptx_bytes() { return std::as_bytes(std::span<const char>(kPtx, std::strlen(kPtx))); }

void fill_u32_cpu(const drvshim_fake_launch* l, void** args) {
  auto* p = *static_cast<std::uint32_t* const*>(args[0]);
  const std::uint32_t v = *static_cast<const std::uint32_t*>(args[1]);
  const std::uint32_t n = *static_cast<const std::uint32_t*>(args[2]);
  for (std::uint32_t i = 0; i < n && i < l->grid[0] * l->block[0]; ++i) p[i] = v;
}

class PerDeviceModules : public TwoDevices {
 protected:
  void SetUp() override {
    drvshim_fake_register_kernel("fill_u32", &fill_u32_cpu);
    TwoDevices::SetUp();
  }
  std::vector<std::uint32_t> read(const DeviceBuffer& b) {
    std::vector<std::uint32_t> v(b.size() / 4);
    copy(std::span<std::uint32_t>(v), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
    return v;
  }
};

TEST_F(PerDeviceModules, EachDeviceRunsItsOwnModulesKernelAndAForeignStreamIsRefused) {
  auto m0 = Module::load(c0(), ptx_bytes());
  auto m1 = Module::load(c1(), ptx_bytes());
  const Kernel k0 = m0.kernel("fill_u32");
  const Kernel k1 = m1.kernel("fill_u32");
  EXPECT_NE(k0.native(), k1.native()) << "one function per context";
  auto b0 = DeviceBuffer::allocate(c0(), 256 * 4);
  auto b1 = DeviceBuffer::allocate(c1(), 256 * 4);
  auto s0 = Stream::create(c0());
  auto s1 = Stream::create(c1());
  launch(k0, LaunchConfig{{1}, {256}, 0, s0.ref(), {}}, b0.address(), 10u, 256u);
  launch(k1, LaunchConfig{{1}, {256}, 0, s1.ref(), {}}, b1.address(), 11u, 256u);
  s0.ref().synchronize();
  s1.ref().synchronize();
  EXPECT_EQ(read(b0), std::vector<std::uint32_t>(256, 10u));
  EXPECT_EQ(read(b1), std::vector<std::uint32_t>(256, 11u));

  const auto launches = drvshim_fake_launch_count();
  auto e = expect_throw<InvalidArgumentError>([&] {
    launch(k0, LaunchConfig{{1}, {256}, 0, s1.ref(), {}}, b0.address(), 12u, 256u);
  });
  EXPECT_NE(std::string(e.what()).find("kernel fill_u32 belongs to context"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("on device 0;"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("on device 1"), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("Library::kernel(context, name)"), std::string::npos) << e.hint();
  EXPECT_EQ(drvshim_fake_launch_count(), launches) << "refused before the driver";
}

TEST_F(PerDeviceModules, OneLibraryServesBothDevices) {
  auto lib = Library::load(*drv_, ptx_bytes());
  const Kernel k0 = lib.kernel(c0(), "fill_u32");
  const Kernel k1 = lib.kernel(c1(), "fill_u32");
  EXPECT_EQ(k0.context().address(), c0().address());
  EXPECT_EQ(k1.context().address(), c1().address());
  auto b0 = DeviceBuffer::allocate(c0(), 64 * 4);
  auto b1 = DeviceBuffer::allocate(c1(), 64 * 4);
  auto s1 = Stream::create(c1());
  launch(k0, LaunchConfig{{1}, {64}, 0, {}, {}}, b0.address(), 20u, 64u);
  launch(k1, LaunchConfig{{1}, {64}, 0, s1.ref(), {}}, b1.address(), 21u, 64u);
  s1.ref().synchronize();
  EXPECT_EQ(read(b0), std::vector<std::uint32_t>(64, 20u));
  EXPECT_EQ(read(b1), std::vector<std::uint32_t>(64, 21u));
  expect_throw<InvalidArgumentError>([&] {
    launch(k0, LaunchConfig{{1}, {64}, 0, s1.ref(), {}}, b0.address(), 1u, 64u);
  });
}

TEST_F(PerDeviceModules, TwoThreadsLoadLaunchAndUnloadOnTheirOwnDevice) {
  auto work = [&](const ContextRef& ctx, std::uint32_t value) {
    for (int r = 0; r < 40; ++r) {
      auto m = Module::load(ctx, ptx_bytes());
      auto b = DeviceBuffer::allocate(ctx, 128 * 4);
      auto s = Stream::create(ctx);
      launch(m.kernel("fill_u32"), LaunchConfig{{1}, {128}, 0, s.ref(), {}}, b.address(),
             value + static_cast<std::uint32_t>(r), 128u);
      s.ref().synchronize();
      std::vector<std::uint32_t> v(128);
      copy(std::span<std::uint32_t>(v), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
      if (v != std::vector<std::uint32_t>(128, value + static_cast<std::uint32_t>(r))) ADD_FAILURE() << "wrong data";
    }
    if (drvshim_fake_ctx_stack_depth() != 0) ADD_FAILURE() << "a call left a context current";
  };
  std::thread t0([&] { work(c0(), 1000); });
  std::thread t1([&] { work(c1(), 2000); });
  t0.join();
  t1.join();
}

// ---- the compile cache: the architecture of each device ---------------------------------------------------

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "drvshim-perdevice-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

KernelSource add_program() {
  KernelSource p;
  p.source = "extern \"C\" __global__ void add(int* p) { p[threadIdx.x] += 1; }\n";
  p.name = "add.cu";
  return p;  // no architecture: compile_for picks the device's
}

bool has_option(const CachedCompile& c, const std::string& option) {
  return std::find(c.result.options.begin(), c.result.options.end(), option) != c.result.options.end();
}

using PerDeviceCompileCache = TwoDevices;

TEST_F(PerDeviceCompileCache, EachDeviceGetsItsOwnArchitectureAndNeverTheOthersImage) {
  // Device 0 is an H200 (sm_90, a CUBIN from NVRTC); device 1 reports 10.1, newer than NVRTC's
  // targets (PTX linked to SASS by the driver), then 8.0.
  drvshim_fake_set_attribute(1, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 10);
  drvshim_fake_set_attribute(1, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1);
  TempDir dir;
  CacheOptions o;
  o.directory = (dir.path / "c").string();
  CompileCache cache(load_nvrtc(), o);
  const CachedCompile a0 = cache.compile_for(c0(), add_program());
  EXPECT_EQ(a0.outcome, CacheOutcome::compiled);
  EXPECT_FALSE(a0.linked);
  EXPECT_TRUE(has_option(a0, "--gpu-architecture=sm_90"));
  const CachedCompile a1 = cache.compile_for(c1(), add_program());
  EXPECT_EQ(a1.outcome, CacheOutcome::compiled) << "device 0's entry must not serve device 1";
  EXPECT_TRUE(a1.linked);
  EXPECT_TRUE(has_option(a1, "--gpu-architecture=compute_100"));
  EXPECT_NE(a0.key, a1.key);
  const CachedCompile b0 = cache.compile_for(c0(), add_program());
  const CachedCompile b1 = cache.compile_for(c1(), add_program());
  EXPECT_EQ(b0.outcome, CacheOutcome::memory_hit);
  EXPECT_EQ(b1.outcome, CacheOutcome::memory_hit);
  EXPECT_EQ(b0.result.image, a0.result.image);
  EXPECT_EQ(b1.result.image, a1.result.image);
  EXPECT_FALSE(b0.linked);
  EXPECT_TRUE(b1.linked);

  drvshim_fake_set_attribute(1, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 8);
  drvshim_fake_set_attribute(1, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
  const CachedCompile c1_80 = cache.compile_for(c1(), add_program());
  EXPECT_EQ(c1_80.outcome, CacheOutcome::compiled);
  EXPECT_TRUE(has_option(c1_80, "--gpu-architecture=sm_80"));
  EXPECT_NE(c1_80.key, a0.key);
}

TEST_F(PerDeviceCompileCache, TwoThreadsCompilingForTheirOwnDevicesGetTheirOwnArchitecture) {
  drvshim_fake_set_attribute(1, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 8);
  drvshim_fake_set_attribute(1, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 6);
  TempDir dir;
  CacheOptions o;
  o.directory = (dir.path / "c").string();
  CompileCache cache(load_nvrtc(), o);
  auto work = [&](const ContextRef& ctx, const std::string& arch) {
    for (int r = 0; r < 5; ++r) {
      const CachedCompile c = cache.compile_for(ctx, add_program());
      if (!has_option(c, "--gpu-architecture=" + arch)) ADD_FAILURE() << "round " << r << ": not " << arch;
    }
  };
  std::thread t0([&] { work(c0(), "sm_90"); });
  std::thread t1([&] { work(c1(), "sm_86"); });
  t0.join();
  t1.join();
  EXPECT_EQ(cache.stats().compiles, 2u) << "one compile per architecture, the rest hits";
}

}  // namespace
