// SPDX-License-Identifier: Apache-2.0
// The staging engine on the real driver: the ordering cases of
// tests/unit/stream_order_cases.hpp (the fake runs the same table), with a
// kernel that spins for 20 ms on the legacy default stream before it fills a
// 64 MiB buffer. Before the fix, a synchronous staged copy right after such a
// kernel returned the buffer's old contents (every element stale, five rounds
// of five on the H200).
#include <drvshim/staging.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "gpu_env.hpp"
#include "staging_test_support.hpp"
#include "stream_order_cases.hpp"

using namespace drvshim;

namespace drvshim_gpu {
std::string kernel_dir();
}

namespace {

class GpuStaging : public drvshim_gpu::GpuContextTest {};

TEST_F(GpuStaging, SynchronousCopiesAreOrderedAfterTheLegacyStream) {
  auto module = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  const Kernel spin_then_fill = module.kernel("spin_then_fill");
  drvshim_test::BusyLegacyStream busy = [&](DeviceSpan<std::uint32_t> buffer,
                                            std::uint32_t value) -> std::function<void()> {
    LaunchConfig config;  // no stream: the legacy default stream
    config.grid = {264};
    config.block = {256};
    launch(spin_then_fill, config, static_cast<unsigned long long>(20'000'000), buffer.address(),
           static_cast<unsigned long long>(buffer.size()), static_cast<unsigned>(value));
    return [] {};
  };
  for (int round = 0; round < 3; ++round) {
    for (const auto& c : drvshim_test::run_stream_order_cases(ctx(), (64u << 20) / 4, busy)) {
      std::printf("[ order ] round %d  %-70s observed=%-12s expected=%s\n", round, c.name.c_str(), c.observed.c_str(),
                  c.expected.c_str());
      EXPECT_EQ(c.observed, c.expected) << c.name;
    }
  }
}

// Keeps `stream` busy for about `ns` nanoseconds (one spinning kernel filling a scratch buffer).
void spin_on(const Kernel& spin_then_fill, const StreamRef& stream, const DeviceBuffer& scratch,
             unsigned long long ns) {
  LaunchConfig config;
  config.grid = {1};
  config.block = {32};
  config.stream = stream;
  launch(spin_then_fill, config, ns, scratch.address(), static_cast<unsigned long long>(scratch.size() / 4), 1u);
}

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>(drvshim_test::test_byte(i, seed));
  return v;
}

// The fake's model of the driver, on the H200: a copy from page-locked memory
// queued behind 50 ms of kernel reads the source when the DMA runs, so the
// engine must have read it before it returns. The source is overwritten
// right after the call; the device must get the bytes of the call. Sizes:
// below the direct threshold, inside the ring, and larger than the ring.
TEST_F(GpuStaging, AnAsyncCopyFromPinnedMemoryHasReadItsSourceOnReturn) {
  auto module = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  const Kernel spin_then_fill = module.kernel("spin_then_fill");
  auto scratch = DeviceBuffer::allocate(ctx(), 4096);
  PinnedPool pool(ctx());
  StagingEngine engine(pool);
  auto stream = Stream::create(ctx());
  for (const std::size_t bytes : {std::size_t{64} << 10, std::size_t{16} << 20, std::size_t{48} << 20}) {
    SCOPED_TRACE(bytes);
    auto src = PinnedBuffer::allocate(ctx(), bytes);
    const auto expected = pattern(bytes, 11);
    std::memcpy(src.data(), expected.data(), bytes);
    auto dev = DeviceBuffer::allocate(ctx(), bytes);
    spin_on(spin_then_fill, stream.ref(), scratch, 50'000'000ULL);
    engine.copy_to_device_async(dev.as<std::byte>(), std::span<const std::byte>(src.as<std::byte>()), stream.ref());
    std::memset(src.data(), 0xee, bytes);
    stream.ref().synchronize();
    std::vector<std::byte> back(bytes);
    copy(std::span<std::byte>(back), DeviceSpan<const std::byte>(dev.as<std::byte>()));
    std::size_t stale = 0;
    for (std::size_t i = 0; i < bytes; ++i) stale += back[i] != expected[i] ? 1u : 0u;
    std::printf("[ pinned-async ] %zu bytes: %zu bytes differ from the source at the call\n", bytes, stale);
    EXPECT_EQ(stale, 0u);
  }
}

// A stream that waits (a host function) for what another thread does after
// its own copy on the same engine: the copy queued on that stream must not
// hold the engine while it waits, or both threads wait forever.
TEST_F(GpuStaging, AnAsyncCopyOnAWaitingStreamDoesNotStopAnotherThreadsCopy) {
  PinnedPool pool(ctx());
  StagingEngine engine(pool);
  auto stream = Stream::create(ctx());
  std::atomic<bool> b_done{false};
  stream.ref().launch_host_func([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!b_done.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  });
  const auto a_src = pattern(std::size_t{64} << 20, 1);  // larger than the default ring (32 MiB)
  auto a_dev = DeviceBuffer::allocate(ctx(), a_src.size());
  auto a = std::async(std::launch::async, [&] {
    engine.copy_to_device_async(a_dev.as<std::byte>(), std::span<const std::byte>(a_src), stream.ref());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto b_src = pattern(std::size_t{16} << 20, 2);
  auto b_dev = DeviceBuffer::allocate(ctx(), b_src.size());
  auto b = std::async(std::launch::async, [&] {
    engine.copy_to_device(b_dev.as<std::byte>(), std::span<const std::byte>(b_src));
    b_done = true;
  });
  const bool in_time = b.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  b_done = true;  // lets the host function end either way
  b.get();
  a.get();
  stream.ref().synchronize();
  EXPECT_TRUE(in_time) << "the synchronous copy waited for another thread's waiting stream";
  std::vector<std::byte> back(a_src.size());
  copy(std::span<std::byte>(back), DeviceSpan<const std::byte>(a_dev.as<std::byte>()));
  EXPECT_TRUE(back == a_src);
}

// A view of a destroyed stream is refused before the driver sees its handle.
TEST_F(GpuStaging, AStreamViewOfADestroyedStreamIsRefused) {
  std::optional<Stream> stream(Stream::create(ctx()));
  const StreamRef dead = stream->ref();
  stream.reset();
  EXPECT_THROW(dead.synchronize(), InvalidArgumentError);
  EXPECT_THROW((void)dead.query(), InvalidArgumentError);
}

}  // namespace
