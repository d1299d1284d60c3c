// SPDX-License-Identifier: Apache-2.0
// Two GPUs on the real driver (two H200s on NVLink when measured): the peer contract cases
// (tests/unit/peer_contract_cases.hpp, also run against the fake), peer copies
// of real sizes, a kernel reading the other device's memory after peer access
// is enabled, a stream waiting for an event of the other device, and pools,
// staging engines, modules and the compile cache per device on two threads.
// Every test is in a MultiGpu* suite and skips, with the reason, where there
// are fewer than two devices (tools/gpu/run-gpu-suite.sh runs them only when
// it finds two).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "gpu_env.hpp"
#include "peer_contract_cases.hpp"

using namespace drvshim;

namespace drvshim_gpu {
std::string kernel_dir();
}

namespace {

// The real driver with at least two devices, or a skip saying why not.
#define DRVSHIM_REQUIRE_TWO_GPUS(var) \
  DRVSHIM_REQUIRE_GPU(var);           \
  if (var.device_count() < 2) GTEST_SKIP() << "needs two devices; the driver reports " << var.device_count()

std::vector<std::uint32_t> random_words(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint32_t> v(n);
  for (auto& x : v) x = static_cast<std::uint32_t>(gen()) | 1u;
  return v;
}

std::vector<std::uint32_t> read(const DeviceBuffer& b) {
  std::vector<std::uint32_t> v(b.size() / 4);
  copy(std::span<std::uint32_t>(v), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
  return v;
}

TEST(MultiGpuContract, RealDriverAgreesWithTheFake) {
  DRVSHIM_REQUIRE_TWO_GPUS(drv);
  for (const auto& c : drvshim_test::run_peer_contract_cases(drv)) {
    std::printf("[ contract ] %-75s observed=%-28s expected=%s\n", c.name.c_str(), c.observed.c_str(),
                c.expected.c_str());
    EXPECT_EQ(c.observed, c.expected) << c.name;
  }
}

TEST(MultiGpu, TheLinkAsTheDriverDescribesIt) {
  DRVSHIM_REQUIRE_TWO_GPUS(drv);
  for (int a = 0; a < drv.device_count(); ++a) {
    for (int b = 0; b < drv.device_count(); ++b) {
      if (a != b) std::printf("[ link     ] %s\n", peer_link(drv.device(a), drv.device(b)).to_string().c_str());
    }
  }
  EXPECT_TRUE(drv.device(0).can_access_peer(drv.device(1)));
}

TEST(MultiGpu, PeerCopiesOfRealSizesWithAndWithoutPeerAccess) {
  DRVSHIM_REQUIRE_TWO_GPUS(drv);
  auto p0 = drv.device(0).retain_primary_context();
  auto p1 = drv.device(1).retain_primary_context();
  const std::size_t n = (64u << 20) / 4;
  const auto values = random_words(n, 22);
  auto a = DeviceBuffer::allocate(p0.ref(), n * 4);
  auto b = DeviceBuffer::allocate(p1.ref(), n * 4);
  copy(a.as<std::uint32_t>(), std::span<const std::uint32_t>(values));
  for (const bool with_access : {false, true}) {
    std::optional<PeerAccess> there, back;
    if (with_access) {
      there.emplace(PeerAccess::enable(p0.ref(), p1.ref()));
      back.emplace(PeerAccess::enable(p1.ref(), p0.ref()));
    }
    fill(b.as<std::uint32_t>(), 0u);
    copy_peer(b.as<std::uint32_t>(), a.as<std::uint32_t>());
    p1.ref().synchronize();
    EXPECT_EQ(read(b), values) << "copy_peer, peer access " << with_access;
    fill(b.as<std::uint32_t>(), 0u);
    auto s0 = Stream::create(p0.ref());
    copy_peer_async(s0.ref(), b.as<std::uint32_t>(), a.as<std::uint32_t>());
    s0.ref().synchronize();
    EXPECT_EQ(read(b), values) << "copy_peer_async on the source's stream, peer access " << with_access;
    fill(b.as<std::uint32_t>(), 0u);
    copy(b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
    p1.ref().synchronize();
    EXPECT_EQ(read(b), values) << "unified-address copy, peer access " << with_access;
    // And back, into the second half of a, on device 1's stream.
    auto s1 = Stream::create(p1.ref());
    copy_async(s1.ref(), a.as<std::uint32_t>().subspan(n / 2, n / 2),
               DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>().subspan(0, n / 2)));
    s1.ref().synchronize();
    const auto back_values = read(a);
    EXPECT_TRUE(std::equal(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n / 2),
                           back_values.begin() + static_cast<std::ptrdiff_t>(n / 2)))
        << "unified-address copy_async back, peer access " << with_access;
    copy(a.as<std::uint32_t>(), std::span<const std::uint32_t>(values));
  }
}

TEST(MultiGpu, AKernelReadsTheOtherDevicesMemoryOnceAccessIsEnabled) {
  DRVSHIM_REQUIRE_TWO_GPUS(drv);
  auto p0 = drv.device(0).retain_primary_context();
  auto p1 = drv.device(1).retain_primary_context();
  auto module = Module::load_file(p0.ref(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  const unsigned n = 1u << 20;
  std::vector<float> x(n), y(n);
  for (unsigned i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 0.5f * static_cast<float>(i);
  }
  auto a = DeviceBuffer::allocate(p0.ref(), n * 4);
  auto remote = DeviceBuffer::allocate(p1.ref(), n * 4);  // on device 1
  auto c = DeviceBuffer::allocate(p0.ref(), n * 4);
  copy(a.as<float>(), std::span<const float>(x));
  copy(remote.as<float>(), std::span<const float>(y));
  PeerAccess access = PeerAccess::enable(p0.ref(), p1.ref());
  auto s0 = Stream::create(p0.ref());
  launch(module.kernel("vadd"), LaunchConfig{{(n + 255) / 256}, {256}, 0, s0.ref(), {}}, a.address(), remote.address(),
         c.address(), n);
  s0.ref().synchronize();
  std::vector<float> out(n);
  copy(std::span<float>(out), DeviceSpan<const float>(c.as<float>()));
  for (unsigned i = 0; i < n; i += 4099) ASSERT_EQ(out[i], 1.5f * static_cast<float>(i)) << i;
}

TEST(MultiGpu, AStreamOfOneDeviceWaitsForAnEventOfTheOther) {
  DRVSHIM_REQUIRE_TWO_GPUS(drv);
  auto p0 = drv.device(0).retain_primary_context();
  auto p1 = drv.device(1).retain_primary_context();
  auto module = Module::load_file(p0.ref(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  const std::size_t n = (16u << 20) / 4;
  auto a = DeviceBuffer::allocate(p0.ref(), n * 4);
  auto b = DeviceBuffer::allocate(p1.ref(), n * 4);
  fill(a.as<std::uint32_t>(), 1u);
  fill(b.as<std::uint32_t>(), 0u);
  auto s0 = Stream::create(p0.ref());
  auto s1 = Stream::create(p1.ref());
  auto done = Event::create(p0.ref(), EventFlags::disable_timing);
  for (int round = 0; round < 3; ++round) {
    const unsigned value = 100u + static_cast<unsigned>(round);
    // 30 ms of work on device 0 that ends by writing `value` everywhere.
    launch(module.kernel("spin_then_fill"), LaunchConfig{{264}, {256}, 0, s0.ref(), {}},
           static_cast<unsigned long long>(30'000'000), a.address(), static_cast<unsigned long long>(n), value);
    done.ref().record(s0.ref());
    s1.ref().wait(done.ref());
    copy_peer_async(s1.ref(), b.as<std::uint32_t>(), a.as<std::uint32_t>());
    s1.ref().synchronize();
    const auto v = read(b);
    std::size_t stale = 0;
    for (const auto x : v) stale += x != value ? 1 : 0;
    EXPECT_EQ(stale, 0u) << "round " << round << ": device 1's copy did not wait for device 0's kernel";
  }
}

TEST(MultiGpu, PoolsEnginesModulesAndCachesPerDeviceOnTwoThreads) {
  DRVSHIM_REQUIRE_TWO_GPUS(drv);
  auto p0 = drv.device(0).retain_primary_context();
  auto p1 = drv.device(1).retain_primary_context();
  const auto nvrtc = Nvrtc::load();
  char dir_template[] = "/tmp/drvshim-gpu-peer-cache-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  CacheOptions options;
  options.directory = std::string(dir_template) + "/c";
  CompileCache cache(nvrtc, options);
  KernelSource program;
  program.source =
      "extern \"C\" __global__ void add_one(unsigned* p, unsigned n) {\n"
      "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] += 1u; }\n";
  program.name = "add_one.cu";
  auto work = [&](const ContextRef& ctx, std::uint32_t seed) {
    PinnedPool pool(ctx);
    StagingEngine engine(pool);
    auto module = Module::load_file(ctx, drvshim_gpu::kernel_dir() + "kernels.cubin");
    const auto compiled = cache.compile_for(ctx, program);
    auto jit = Module::load(ctx, compiled.result.image);
    const std::size_t bytes = 32u << 20;
    auto dev = DeviceBuffer::allocate(ctx, bytes);
    auto s = Stream::create(ctx);
    for (std::uint32_t r = 0; r < 4; ++r) {
      const auto src = random_words(bytes / 4, seed + r);
      engine.copy_to_device(dev.as<std::byte>(), std::as_bytes(std::span<const std::uint32_t>(src)));
      launch(jit.kernel("add_one"), LaunchConfig{{static_cast<unsigned>(bytes / 4 / 256)}, {256}, 0, s.ref(), {}},
             dev.address(), static_cast<unsigned>(bytes / 4));
      s.ref().synchronize();
      std::vector<std::uint32_t> back(bytes / 4);
      engine.copy_to_host(std::as_writable_bytes(std::span<std::uint32_t>(back)), dev.as<std::byte>());
      for (std::size_t i = 0; i < back.size(); i += 1021) {
        if (back[i] != src[i] + 1u) {
          ADD_FAILURE() << "device " << ctx.device().ordinal() << " round " << r << ": wrong data at " << i;
          break;
        }
      }
      // A pooled block released after this device's stream, used for a DMA there.
      PinnedBlock block = pool.acquire(1 << 20);
      copy_async(s.ref(), block.bytes(), DeviceSpan<const std::byte>(dev.as<std::byte>().subspan(0, 1 << 20)));
      block.release_after(s.ref());
    }
    s.ref().synchronize();
    (void)module;
  };
  // An exception must not escape a thread (std::terminate would end the whole run).
  auto guarded = [&](const ContextRef& ctx, std::uint32_t seed) {
    try {
      work(ctx, seed);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "device " << ctx.device().ordinal() << ": " << e.what();
    }
  };
  std::thread t0([&] { guarded(p0.ref(), 1); });
  std::thread t1([&] { guarded(p1.ref(), 1000); });
  t0.join();
  t1.join();
  EXPECT_EQ(cache.stats().compiles, 1u) << "two H200s share an architecture: one compile, one hit";
  std::filesystem::remove_all(dir_template);
}

TEST(MultiGpu, APoolOfOneDeviceServesTheOthersStream) {
  DRVSHIM_REQUIRE_TWO_GPUS(drv);
  auto p0 = drv.device(0).retain_primary_context();
  auto p1 = drv.device(1).retain_primary_context();
  PinnedPool pool0(p0.ref());  // portable blocks
  auto on1 = DeviceBuffer::allocate(p1.ref(), 8 << 20);
  auto s1 = Stream::create(p1.ref());
  const auto values = random_words((8 << 20) / 4, 5);
  for (int r = 0; r < 8; ++r) {
    PinnedBlock block = pool0.acquire(8 << 20);
    std::memcpy(block.data(), values.data(), 8 << 20);
    copy_async(s1.ref(), on1.as<std::byte>(), std::span<const std::byte>(block.bytes()));
    block.release_after(s1.ref());  // the pool's relay stream waits for device 1's stream
  }
  s1.ref().synchronize();
  EXPECT_EQ(read(on1), values);
  EXPECT_LE(pool0.stats().allocations, 8u);
}

TEST(MultiGpu, AKernelOfOneDeviceIsRefusedOnTheOthersStream) {
  DRVSHIM_REQUIRE_TWO_GPUS(drv);
  auto p0 = drv.device(0).retain_primary_context();
  auto p1 = drv.device(1).retain_primary_context();
  auto m0 = Module::load_file(p0.ref(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  auto s1 = Stream::create(p1.ref());
  EXPECT_THROW(launch(m0.kernel("empty"), LaunchConfig{{1}, {1}, 0, s1.ref(), {}}), InvalidArgumentError);
  auto lib = Library::load_file(drv, drvshim_gpu::kernel_dir() + "kernels.cubin");
  launch(lib.kernel(p1.ref(), "empty"), LaunchConfig{{1}, {1}, 0, s1.ref(), {}});
  s1.ref().synchronize();
}

}  // namespace
