// SPDX-License-Identifier: Apache-2.0
// The driver layer's additions for runtime_compat, against the fake:
// settable kernel attributes (more than 48 KiB of dynamic shared memory,
// non-portable cluster sizes) usable by the typed launch, cooperative
// launches, occupancy with flags, library globals and managed variables,
// context limits, stream attributes, pitched and 2D memory, managed-memory
// hints, page-locked flags.
#include <array>
#include <cstring>
#include <limits>
#include <vector>

#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

constexpr const char* kPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.global .align 4 .u32 counter = 7;
.const .align 4 .b8 coeffs[16];
.global .attribute(.managed) .align 8 .u64 shared_total = 42;
.visible .entry big_shared(
    .param .u64 big_shared_param_0
)
{
    ret;
}
)";

std::span<const std::byte> bytes_of(const char* text) {
  return std::as_bytes(std::span<const char>(text, std::strlen(text)));
}

unsigned g_shared_seen = 0;
void big_shared_cpu(const drvshim_fake_launch* l, void**) { g_shared_seen = l->shared_bytes; }

class KernelAttributes : public PrimaryContextTest {
 protected:
  void SetUp() override {
    drvshim_fake_register_kernel("big_shared", &big_shared_cpu);
    PrimaryContextTest::SetUp();
    module_.emplace(Module::load(ctx(), bytes_of(kPtx)));
  }
  void TearDown() override {
    module_.reset();
    PrimaryContextTest::TearDown();
  }
  std::optional<Module> module_;
};

TEST_F(KernelAttributes, MoreThan48KiBOfDynamicSharedMemoryNeedsTheOptIn) {
  const Kernel k = module_->kernel("big_shared");
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  const unsigned bytes = 100 * 1024;
  LaunchConfig config{{1}, {128}, bytes, {}, {}};
  auto e = expect_throw<CudaError>([&] { launch(k, config, buf.address()); });
  EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE) << "without the opt-in the driver refuses it";
  EXPECT_EQ(k.attribute(FunctionAttribute::max_dynamic_shared_size_bytes), 49152);
  k.set_attribute(FunctionAttribute::max_dynamic_shared_size_bytes, static_cast<int>(bytes));
  EXPECT_EQ(k.attribute(FunctionAttribute::max_dynamic_shared_size_bytes), static_cast<int>(bytes));
  launch(k, config, buf.address());  // the typed launch, now allowed
  EXPECT_EQ(g_shared_seen, bytes);
  auto too_much =
      expect_throw<CudaError>([&] { k.set_attribute(FunctionAttribute::max_dynamic_shared_size_bytes, 300 * 1024); });
  EXPECT_EQ(too_much.code(), CUDA_ERROR_INVALID_VALUE) << "above the device's opt-in limit (227 KiB)";
  auto read_only = expect_throw<CudaError>([&] { k.set_attribute(FunctionAttribute::num_regs, 8); });
  EXPECT_EQ(read_only.code(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_NE(std::string(read_only.what()).find("cuFuncSetAttribute"), std::string::npos) << read_only.what();
}

TEST_F(KernelAttributes, NonPortableClusterSizesNeedTheirOptIn) {
  const Kernel k = module_->kernel("big_shared");
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  LaunchConfig config{{16}, {128}, 0, {}, Dim3{16, 1, 1}};
  auto e = expect_throw<CudaError>([&] { launch(k, config, buf.address()); });
  EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_CLUSTER_SIZE);
  k.set_attribute(FunctionAttribute::non_portable_cluster_size_allowed, 1);
  launch(k, config, buf.address());
}

// cuOccupancyMaxActiveClusters: the device's resident blocks in whole
// clusters of the config's size; a size is required, and one above the
// portable 8 blocks needs the kernel's opt-in.
TEST_F(KernelAttributes, ResidentClustersAreCountedForTheConfigsClusterSize) {
  const Kernel k = module_->kernel("big_shared");
  const int sms = ctx().device().sm_count();
  LaunchConfig cfg{{1}, {1024}};
  cfg.cluster = Dim3{2};
  EXPECT_EQ(max_active_clusters(k, cfg), 2 * sms / 2) << "two 1024-thread blocks per SM, two blocks per cluster";
  cfg.cluster = Dim3{2, 2};
  EXPECT_EQ(max_active_clusters(k, cfg), 2 * sms / 4);
  cfg.cluster = Dim3{16};
  try {
    (void)max_active_clusters(k, cfg);
    ADD_FAILURE() << "a non-portable cluster size without the opt-in";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    EXPECT_NE(std::string(e.what()).find("cuOccupancyMaxActiveClusters"), std::string::npos) << e.what();
  }
  k.set_attribute(FunctionAttribute::non_portable_cluster_size_allowed, 1);
  EXPECT_EQ(max_active_clusters(k, cfg), 2 * sms / 16);
  cfg.cluster.reset();
  EXPECT_THROW((void)max_active_clusters(k, cfg), CudaError) << "no cluster size: the driver refuses";
}

TEST_F(KernelAttributes, LibrariesSetKernelAttributesPerDevice) {
  auto lib = Library::load(*drv_, bytes_of(kPtx));
  lib.set_kernel_attribute("big_shared", FunctionAttribute::max_dynamic_shared_size_bytes, 65536, ctx().device());
  EXPECT_EQ(lib.kernel(ctx(), "big_shared").attribute(FunctionAttribute::max_dynamic_shared_size_bytes), 65536);
  expect_throw<InvalidArgumentError>(
      [&] { lib.set_kernel_attribute("nope", FunctionAttribute::max_dynamic_shared_size_bytes, 1, ctx().device()); });
}

TEST_F(KernelAttributes, CooperativeLaunchesMustFitOnTheDevice) {
  const Kernel k = module_->kernel("big_shared");
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  const int per_sm = k.max_active_blocks_per_sm(256, 0, 0);
  EXPECT_EQ(per_sm, 8);
  const unsigned fits = static_cast<unsigned>(per_sm * ctx().device().sm_count());
  LaunchConfig config{{fits}, {256}, 0, {}, {}, true};
  const auto before = drvshim_fake_call_count("cuLaunchCooperativeKernel");
  launch(k, config, buf.address());
  EXPECT_EQ(drvshim_fake_call_count("cuLaunchCooperativeKernel"), before + 1);
  config.grid.x = fits + 1;
  auto e = expect_throw<CudaError>([&] { launch(k, config, buf.address()); });
  EXPECT_EQ(e.code(), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_GT(k.available_dynamic_shared_bytes(2, 256), 0u);
}

// The driver's block-size suggestion is the occupancy query's best block size
// (largest of the ties), and the grid it names fills every SM at that size.
TEST_F(KernelAttributes, TheSuggestedBlockIsTheMostResidentOne) {
  const Kernel k = module_->kernel("big_shared");
  const unsigned sms = static_cast<unsigned>(ctx().device().sm_count());
  const auto check_best = [&](std::size_t shared, unsigned limit) {
    const BlockSuggestion s = k.suggested_block(shared, limit);
    ASSERT_GT(s.block_threads, 0u);
    EXPECT_EQ(s.block_threads % 32, 0u);
    if (limit != 0) {
      EXPECT_LE(s.block_threads, limit);
    }
    const int resident = k.max_active_blocks_per_sm(s.block_threads, shared);
    EXPECT_EQ(s.min_grid_blocks, static_cast<unsigned>(resident) * sms);
    for (unsigned b = 32; b <= (limit != 0 ? limit : 1024u); b += 32) {
      const auto threads = static_cast<unsigned>(k.max_active_blocks_per_sm(b, shared)) * b;
      EXPECT_LE(threads, static_cast<unsigned>(resident) * s.block_threads) << b << " threads per block";
      if (b > s.block_threads) {
        EXPECT_LT(threads, static_cast<unsigned>(resident) * s.block_threads) << b;
      }
    }
  };
  k.set_attribute(FunctionAttribute::max_dynamic_shared_size_bytes, 200 * 1024);
  check_best(0, 0);
  check_best(200 * 1024, 0);
  check_best(0, 100);
  // The fake's numbers: 2048 threads and 32 blocks per SM, 228 KiB of shared memory per SM.
  EXPECT_EQ(k.suggested_block().block_threads, 1024u);
  EXPECT_EQ(k.suggested_block().min_grid_blocks, 2 * sms);
  EXPECT_EQ(k.suggested_block(200 * 1024).min_grid_blocks, sms);
  // Under 100 threads: 32 blocks of 64 (2048 threads) beat 21 of 96 (2016) and 16 of 100 (whole warps: 4 each).
  EXPECT_EQ(k.suggested_block(0, 100).block_threads, 64u);
  EXPECT_EQ(k.suggested_block(0, 100).min_grid_blocks, 32 * sms);
  // A limit below or between warp multiples is tried itself first, as cudart's template does.
  EXPECT_EQ(k.suggested_block(0, 20).block_threads, 20u);
  EXPECT_EQ(k.suggested_block(0, 20).min_grid_blocks, 32 * sms);
  EXPECT_EQ(k.suggested_block(0, 48).block_threads, 48u) << "32 blocks of 48 (1536 threads) beat 32 of 32";
  // Threads are placed in whole warps: 200 threads take 7, so 9 blocks fit in 64 warps, not 10.
  EXPECT_EQ(k.max_active_blocks_per_sm(200), 9);
  EXPECT_EQ(k.max_active_blocks_per_sm(256, std::numeric_limits<std::size_t>::max()), 0);
  EXPECT_EQ(k.available_dynamic_shared_bytes(2, 256), 233472u / 2 - 1024);
  EXPECT_EQ(k.available_dynamic_shared_bytes(32, 1024), 0u) << "32 blocks of 1024 threads never fit";
  // No block fits with more shared memory than an SM has, or than the kernel opted in to.
  EXPECT_EQ(k.suggested_block(300 * 1024).block_threads, 0u);
  EXPECT_EQ(k.suggested_block(std::numeric_limits<std::size_t>::max()).block_threads, 0u);
  auto module2 = Module::load(ctx(), bytes_of(kPtx));
  const Kernel fresh = module2.kernel("big_shared");
  EXPECT_EQ(fresh.suggested_block(64 * 1024).block_threads, 0u) << "64 KiB without the opt-in";
  const auto opt_in = expect_throw<InvalidArgumentError>([&] { (void)LaunchConfig::covering(fresh, 1000, 64 * 1024); });
  EXPECT_NE(opt_in.hint().find("max_dynamic_shared_size_bytes"), std::string::npos) << opt_in.hint();
  auto none = expect_throw<InvalidArgumentError>([&] { (void)LaunchConfig::covering(k, 1000, 300 * 1024); });
  EXPECT_NE(std::string(none.what()).find("suggests no block size for kernel big_shared with 307200 bytes"),
            std::string::npos)
      << none.what();
  expect_throw<InvalidArgumentError>([&] { (void)LaunchConfig::grid_stride(k, 1000, 300 * 1024); });
  auto limit = expect_throw<InvalidArgumentError>([&] { (void)k.suggested_block(0, 1u << 31); });
  EXPECT_NE(std::string(limit.what()).find("a block limit of 2147483648 threads"), std::string::npos) << limit.what();
  drvshim_fake_fail_call("cuOccupancyMaxPotentialBlockSize", 1, CUDA_ERROR_INVALID_VALUE);
  auto failed = expect_throw<CudaError>([&] { (void)k.suggested_block(64); });
  EXPECT_EQ(failed.code(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_NE(std::string(failed.what()).find("kernel big_shared, 64 dynamic shared bytes"), std::string::npos)
      << failed.what();
}

// The occupancy-based launches: covering uses the suggested block for every
// element; grid_stride stops at the grid that fills the device, which a
// cooperative launch accepts, and one block more it refuses.
TEST_F(KernelAttributes, LaunchesSizedByOccupancy) {
  const Kernel k = module_->kernel("big_shared");
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  const unsigned sms = static_cast<unsigned>(ctx().device().sm_count());
  const Stream stream = Stream::create(ctx());
  const LaunchConfig c = LaunchConfig::covering(k, 1'000'000, 4096, stream);
  const BlockSuggestion s = k.suggested_block(4096);
  EXPECT_EQ(c.block.x, s.block_threads);
  EXPECT_EQ(c.grid.x, (1'000'000 + s.block_threads - 1) / s.block_threads);
  EXPECT_EQ(c.shared_bytes, 4096u);
  EXPECT_EQ(c.stream, stream.ref());
  launch(k, c, buf.address());
  EXPECT_EQ(g_shared_seen, 4096u);

  LaunchConfig g = LaunchConfig::grid_stride(k, std::size_t{1} << 40);
  EXPECT_EQ(g.block.x, 1024u);
  EXPECT_EQ(g.grid.x, 2 * sms) << "the grid that fills every SM, however many elements";
  EXPECT_FALSE(g.stream.has_value());
  EXPECT_EQ(LaunchConfig::grid_stride(k, 3000).grid.x, 3u) << "fewer blocks where fewer cover the elements";
  g.cooperative = true;
  const auto cooperative = drvshim_fake_call_count("cuLaunchCooperativeKernel");
  launch(k, g, buf.address());
  EXPECT_EQ(drvshim_fake_call_count("cuLaunchCooperativeKernel"), cooperative + 1);
  g.grid.x += 1;
  EXPECT_EQ(expect_throw<CudaError>([&] { launch(k, g, buf.address()); }).code(),
            CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  for (const auto* api : {"covering", "grid_stride"}) {
    const auto e = expect_throw<InvalidArgumentError>([&] {
      (void)(std::string(api) == "covering" ? LaunchConfig::covering(k, 0) : LaunchConfig::grid_stride(k, 0));
    });
    EXPECT_NE(std::string(e.what()).find("0 elements for kernel big_shared"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("skip the launch"), std::string::npos);
  }
}

// With cluster dimensions both go to cuLaunchKernelEx: cooperative exactly
// when asked for (a grid that cannot be resident at once is refused then,
// and only then).
TEST_F(KernelAttributes, ACooperativeClusterLaunchIsCooperativeExactlyWhenAsked) {
  const Kernel k = module_->kernel("big_shared");
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  const unsigned fits = static_cast<unsigned>(k.max_active_blocks_per_sm(256, 0, 0) * ctx().device().sm_count());
  LaunchConfig config{{fits + 2}, {256}, 0, {}, Dim3{2, 1, 1}, false};
  const auto before = drvshim_fake_call_count("cuLaunchKernelEx");
  launch(k, config, buf.address());
  config.cooperative = true;
  EXPECT_EQ(expect_throw<CudaError>([&] { launch(k, config, buf.address()); }).code(),
            CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  config.grid.x = fits;
  launch(k, config, buf.address());
  EXPECT_EQ(drvshim_fake_call_count("cuLaunchKernelEx"), before + 3);
  // The same attributes given raw as well are refused before the driver (two of one attribute).
  const int on = 1;
  const LaunchAttribute raw = LaunchAttribute::raw(2, std::as_bytes(std::span(&on, 1)));
  config.attributes = std::span(&raw, 1);
  const auto e = expect_throw<InvalidArgumentError>([&] { launch(k, config, buf.address()); });
  EXPECT_NE(std::string(e.what()).find("launch attribute cooperative (2) is LaunchConfig's own"), std::string::npos)
      << e.what();
  EXPECT_EQ(drvshim_fake_call_count("cuLaunchKernelEx"), before + 3);
  const std::array<std::byte, 65> too_long{};
  const auto long_value = expect_throw<InvalidArgumentError>([&] { (void)LaunchAttribute::raw(8, too_long); });
  EXPECT_NE(std::string(long_value.what()).find("a value of 65 bytes; at most 64 are accepted"), std::string::npos)
      << long_value.what();
}

TEST_F(KernelAttributes, LibraryGlobalsAndManagedVariables) {
  auto lib = Library::load(*drv_, bytes_of(kPtx));
  const auto counter = lib.global<unsigned>(ctx(), "counter");
  ASSERT_EQ(counter.size(), 1u);
  unsigned value = 0;
  copy(std::span<unsigned>(&value, 1), DeviceSpan<const unsigned>(counter));
  EXPECT_EQ(value, 7u) << "the PTX initializer";
  EXPECT_EQ(lib.global<float>(ctx(), "coeffs").size(), 4u);
  const auto m = lib.managed(ctx(), "shared_total");
  EXPECT_EQ(m.bytes, 8u);
  EXPECT_EQ(*reinterpret_cast<const std::uint64_t*>(m.address), 42u) << "valid on the host";
  expect_throw<InvalidArgumentError>([&] { (void)lib.global<int>(ctx(), "nope"); });
  expect_throw<InvalidArgumentError>([&] { (void)lib.managed(ctx(), "nope"); });
}

// ---- contexts and streams -------------------------------------------------------------------

using ContextLimits = PrimaryContextTest;

TEST_F(ContextLimits, SetAndReadBack) {
  EXPECT_EQ(ctx().limit(Limit::printf_fifo_size), 1048576u);
  ctx().set_limit(Limit::malloc_heap_size, 64u << 20);
  EXPECT_EQ(ctx().limit(Limit::malloc_heap_size), 64u << 20);
  auto e = expect_throw<CudaError>([&] { ctx().set_limit(Limit::max_l2_fetch_granularity, 4096); });
  EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE);
  ctx().reset_persisting_l2_cache();
  ctx().profiler_start();
  ctx().profiler_stop();
}

TEST_F(ContextLimits, StreamAttributesRoundTrip) {
  auto s = Stream::create(ctx());
  CUstreamAttrValue v{};
  v.accessPolicyWindow.num_bytes = 4096;
  v.accessPolicyWindow.hitRatio = 0.5f;
  v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
  StreamAttributeValue value;
  std::memcpy(value.bytes, &v, sizeof v);
  s.ref().set_attribute(StreamAttribute::access_policy_window, value);
  const StreamAttributeValue back = s.ref().attribute(StreamAttribute::access_policy_window);
  CUstreamAttrValue out{};
  std::memcpy(&out, back.bytes, sizeof out);
  EXPECT_EQ(out.accessPolicyWindow.num_bytes, 4096u);
  EXPECT_EQ(out.accessPolicyWindow.hitRatio, 0.5f);
  v.accessPolicyWindow.hitRatio = 2.0f;
  std::memcpy(value.bytes, &v, sizeof v);
  expect_throw<CudaError>([&] { s.ref().set_attribute(StreamAttribute::access_policy_window, value); });
}

// ---- memory ----------------------------------------------------------------------------------

using MemoryOps = PrimaryContextTest;

TEST_F(MemoryOps, PitchedAllocation2DCopiesAndFills) {
  auto a = allocate_pitched(ctx(), 100, 8);
  EXPECT_EQ(a.pitch, 512u);
  EXPECT_EQ(a.buffer.size(), 512u * 8);
  fill_2d(ctx(), a.buffer.address(), a.pitch, 0x5a, 100, 8);
  std::vector<unsigned char> host(100 * 8, 0);
  Copy2D c;
  c.src = reinterpret_cast<const void*>(a.buffer.address());
  c.src_pitch = a.pitch;
  c.src_side = MemorySide::device;
  c.dst = host.data();
  c.dst_pitch = 100;
  c.dst_side = MemorySide::host;
  c.width_bytes = 100;
  c.height = 8;
  copy_2d(ctx(), c);
  EXPECT_EQ(host[799], 0x5a);
  c.dst_pitch = 50;
  expect_throw<InvalidArgumentError>([&] { copy_2d(ctx(), c); });
  expect_throw<InvalidArgumentError>([&] { (void)allocate_pitched(ctx(), 0, 8); });
}

TEST_F(MemoryOps, ManagedMemoryHintsAndAttachment) {
  auto m = ManagedBuffer::allocate(ctx(), 4096, MemoryAttach::host);
  const auto s = StreamRef::legacy_default(ctx());
  advise(ctx(), m.address(), 4096, MemoryAdvice::set_preferred_location,
         MemoryLocation{MemoryLocation::Type::device, 0});
  prefetch_async(s, m.address(), 4096, MemoryLocation{MemoryLocation::Type::device, 0});
  s.attach_memory(m.address(), 0, MemoryAttach::global);
  auto plain = DeviceBuffer::allocate(ctx(), 4096);
  auto e = expect_throw<CudaError>(
      [&] { advise(ctx(), plain.address(), 4096, MemoryAdvice::set_read_mostly, MemoryLocation{}); });
  EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE) << "only managed memory takes advice";
  expect_throw<InvalidArgumentError>([&] { (void)ManagedBuffer::allocate(ctx(), 64, MemoryAttach::single); });
}

TEST_F(MemoryOps, PageLockedFlagsAsTheDriverReportsThem) {
  auto p = PinnedBuffer::allocate(ctx(), 256, HostAllocFlags::portable | HostAllocFlags::device_map);
  EXPECT_EQ(host_allocation_flags(ctx(), p.data()), 0x3u);
  std::vector<char> pageable(16);
  expect_throw<CudaError>([&] { (void)host_allocation_flags(ctx(), pageable.data()); });
}

}  // namespace
