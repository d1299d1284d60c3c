// SPDX-License-Identifier: Apache-2.0
// Memory on the real driver: every allocation kind with real transfers
// checked by value (random data, never zeros), and the registration cases.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include <drvshim/staging.hpp>

#include "gpu_env.hpp"
#include "register_cases.hpp"

using namespace drvshim;

namespace {

std::vector<std::uint32_t> random_words(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint32_t> v(n);
  for (auto& x : v) x = static_cast<std::uint32_t>(gen()) | 1u;  // never zero
  return v;
}

class GpuMemory : public drvshim_gpu::GpuContextTest {};

TEST_F(GpuMemory, DeviceBufferRoundTripSyncAndAsync) {
  const std::size_t n = (16u << 20) / 4;
  const auto in = random_words(n, 1);
  auto a = DeviceBuffer::allocate(ctx(), n * 4);
  auto b = DeviceBuffer::allocate(ctx(), n * 4);
  copy(a.as<std::uint32_t>(), std::span<const std::uint32_t>(in));
  copy(b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
  std::vector<std::uint32_t> out(n, 0);
  copy(std::span<std::uint32_t>(out), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
  EXPECT_EQ(out, in);
  auto stream = Stream::create(ctx());
  std::vector<std::uint32_t> out2(n, 0);
  fill_async(stream.ref(), b.as<std::uint32_t>(), 0x01020304u);
  copy_async(stream.ref(), std::span<std::uint32_t>(out2), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
  stream.ref().synchronize();
  EXPECT_TRUE(std::all_of(out2.begin(), out2.end(), [](auto w) { return w == 0x01020304u; }));
  fill(a.as<std::uint16_t>(), std::uint16_t{0xbeef});
  fill(b.as<std::uint8_t>(), std::uint8_t{0x7f});
  std::vector<std::uint16_t> halves(8);
  copy(std::span<std::uint16_t>(halves), DeviceSpan<const std::uint16_t>(a.as<std::uint16_t>().subspan(100, 8)));
  EXPECT_EQ(halves[7], 0xbeef);
}

TEST_F(GpuMemory, PinnedMappedRegisteredManagedAndPooledMemory) {
  const std::size_t n = 1u << 20;
  const auto in = random_words(n, 2);
  auto dev = DeviceBuffer::allocate(ctx(), n * 4);

  auto pinned = PinnedBuffer::allocate(ctx(), n * 4, HostAllocFlags::portable);
  std::copy(in.begin(), in.end(), pinned.as<std::uint32_t>().begin());
  copy(dev.as<std::uint32_t>(), std::span<const std::uint32_t>(pinned.as<std::uint32_t>()));

  auto mapped = MappedBuffer::allocate(ctx(), n * 4);
  std::printf("[ info     ] mapped buffer: host %p, device 0x%llx, identical %d\n", mapped.data(),
              static_cast<unsigned long long>(mapped.device_address()), mapped.pointers_identical() ? 1 : 0);
  EXPECT_TRUE(mapped.pointers_identical()) << "the H200 has unified addressing";
  copy(mapped.device_as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(dev.as<std::uint32_t>()));
  EXPECT_TRUE(std::equal(in.begin(), in.end(), mapped.as<std::uint32_t>().begin())) << "device-to-mapped copy";

  std::vector<std::uint32_t> pageable(n, 0);
  {
    auto reg = RegisteredRange::register_range(ctx(), pageable.data(), n * 4, HostRegisterFlags::device_map);
    EXPECT_EQ(reg.device_address(), reinterpret_cast<std::uintptr_t>(pageable.data()));
    EXPECT_EQ(inspect_pointer(*drv_, pageable.data()).kind, MemoryKind::page_locked_host);
    copy(std::span<std::uint32_t>(pageable), DeviceSpan<const std::uint32_t>(dev.as<std::uint32_t>()));
  }
  EXPECT_EQ(pageable, in);
  EXPECT_EQ(inspect_pointer(*drv_, pageable.data()).kind, MemoryKind::pageable_host);

  auto managed = ManagedBuffer::allocate(ctx(), n * 4);
  copy(managed.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(dev.as<std::uint32_t>()));
  ctx().synchronize();
  EXPECT_EQ(static_cast<const std::uint32_t*>(managed.data())[n - 1], in[n - 1]);
  EXPECT_EQ(inspect_pointer(*drv_, managed.data()).kind, MemoryKind::managed);

  auto stream = Stream::create(ctx());
  {
    auto pooled = AsyncDeviceBuffer::allocate(stream.ref(), n * 4);
    copy_async(stream.ref(), pooled.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(dev.as<std::uint32_t>()));
    std::vector<std::uint32_t> out(n, 0);
    copy_async(stream.ref(), std::span<std::uint32_t>(out),
               DeviceSpan<const std::uint32_t>(pooled.as<std::uint32_t>()));
    stream.ref().synchronize();
    EXPECT_EQ(out, in);
  }
  stream.ref().synchronize();
  const auto info = inspect_pointer(*drv_, dev.address() + 12);
  std::printf("[ info     ] %s\n", info.to_string().c_str());
  EXPECT_EQ(info.kind, MemoryKind::device);
  EXPECT_EQ(info.range_start, dev.address());
  EXPECT_EQ(info.range_size, n * 4);
  EXPECT_EQ(info.context, ctx().address());
  EXPECT_EQ(info.device_address, dev.address() + 12);
  EXPECT_EQ(inspect_pointer(*drv_, pinned.data()).kind, MemoryKind::page_locked_host);
}

TEST_F(GpuMemory, OutOfMemoryCarriesTheNumbers) {
  try {
    (void)DeviceBuffer::allocate(ctx(), std::size_t{1} << 40);
    FAIL() << "a 1 TiB allocation succeeded";
  } catch (const OutOfMemoryError& e) {
    std::printf("[ info     ] %s\n", e.what());
    // The device's own numbers (an H100 has 80 GB, an H200 141 GB), not a guess.
    const MemoryInfo info = ctx().memory_info();
    EXPECT_EQ(e.total_bytes(), info.total);
    EXPECT_GT(e.free_bytes(), 0u);
    EXPECT_LE(e.free_bytes(), e.total_bytes());
  }
}

// The same table as the fake runs (tests/unit/register_cases.hpp).
TEST_F(GpuMemory, RegistrationContractCases) {
  using drvshim_test::outcome;
  for (const auto& c : drvshim_test::register_cases()) {
    const std::string got = drvshim_test::run_register_case(ctx(), c);
    std::printf("[ contract ] register: %-28s observed=%-42s expected=%s\n", c.name, got.c_str(), c.expected);
    EXPECT_EQ(got, c.expected) << c.name;
  }
  std::vector<std::uint8_t> block(8192);
  { auto r = RegisteredRange::register_range(ctx(), block.data(), block.size()); }
  const Status twice = unregister_host_range(ctx(), block.data());
  std::printf("[ contract ] unregister an unregistered range: %s\n", twice.to_string().c_str());
  EXPECT_EQ(twice.code(), 713);
  auto pinned = PinnedBuffer::allocate(ctx(), 8192);
  const std::string again = outcome([&] { (void)RegisteredRange::register_range(ctx(), pinned.data(), 4096); });
  std::printf("[ contract ] register pinned memory: %s\n", again.c_str());
  EXPECT_EQ(again, "CUDA_ERROR_INVALID_VALUE");
}

// The staging engine and the pinned pool on the real driver: staged round
// trips (sync and stream-ordered) of an odd size from an unaligned address,
// and a pooled block reused only after its stream's event completed.
TEST_F(GpuMemory, StagedCopiesAndThePinnedPool) {
  PinnedPool pool(ctx());
  StagingEngine engine(pool);
  const std::size_t n = (37u << 20) + 13;
  std::vector<std::uint8_t> src(n + 1), back(n + 3, 0);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 3);
  auto dev = DeviceBuffer::allocate(ctx(), n);
  const auto dspan = dev.as<std::byte>();
  engine.copy_to_device(dspan, std::as_bytes(std::span(src)).subspan(1, n));
  engine.copy_to_host(std::as_writable_bytes(std::span(back)).subspan(3, n), DeviceSpan<const std::byte>(dspan));
  EXPECT_TRUE(std::equal(src.begin() + 1, src.end(), back.begin() + 3));
  EXPECT_EQ(engine.stats().staged_copies, 2u);

  auto stream = Stream::create(ctx());
  std::fill(back.begin(), back.end(), 0);
  engine.copy_to_device_async(dspan, std::as_bytes(std::span(src)).subspan(1, n), stream.ref());
  engine.copy_to_host_async(std::as_writable_bytes(std::span(back)).subspan(3, n), DeviceSpan<const std::byte>(dspan),
                            stream.ref());
  stream.ref().synchronize();
  EXPECT_TRUE(std::equal(src.begin() + 1, src.end(), back.begin() + 3));
  EXPECT_EQ(pool.stats().blocks_in_use, 0u);

  auto block = pool.acquire(1 << 20);
  std::byte* first = block.data();
  block.release_after(stream.ref());
  stream.ref().synchronize();
  auto again = pool.acquire(1 << 20);
  EXPECT_EQ(again.data(), first) << "reused after the stream passed its release point";
}

}  // namespace
