// SPDX-License-Identifier: Apache-2.0
// Streams and events on the real driver, checked by data (no kernels needed):
// ordering across streams through an event wait, callback order, event timing,
// callback exceptions, destruction with pending work.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "gpu_env.hpp"

using namespace drvshim;

namespace {

class GpuStreams : public drvshim_gpu::GpuContextTest {};

void fill_random(std::span<std::uint32_t> v, std::uint32_t seed) {
  std::mt19937 gen(seed);
  for (auto& x : v) x = static_cast<std::uint32_t>(gen()) | 1u;
}

TEST_F(GpuStreams, AnEventWaitOrdersWorkAcrossStreams) {
  const std::size_t n = (256u << 20) / 4;
  auto src = PinnedBuffer::allocate(ctx(), n * 4);
  auto dst = PinnedBuffer::allocate(ctx(), n * 4);
  fill_random(src.as<std::uint32_t>(), 11);
  std::fill(dst.as<std::uint32_t>().begin(), dst.as<std::uint32_t>().end(), 0u);
  auto a = DeviceBuffer::allocate(ctx(), n * 4);
  auto b = DeviceBuffer::allocate(ctx(), n * 4);
  fill(a.as<std::uint32_t>(), 0u);
  auto producer = Stream::create(ctx());
  auto consumer = Stream::create(ctx());
  auto done = Event::create(ctx(), EventFlags::disable_timing);
  // Producer: a 256 MiB upload (about 5 ms). Consumer: waits for it, then reads what it wrote.
  copy_async(producer.ref(), a.as<std::uint32_t>(), std::span<const std::uint32_t>(src.as<std::uint32_t>()));
  done.ref().record(producer.ref());
  consumer.ref().wait(done.ref());
  copy_async(consumer.ref(), b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
  copy_async(consumer.ref(), dst.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
  consumer.ref().synchronize();
  EXPECT_TRUE(
      std::equal(src.as<std::uint32_t>().begin(), src.as<std::uint32_t>().end(), dst.as<std::uint32_t>().begin()))
      << "the consumer read before the producer's copy completed";
  producer.ref().synchronize();
}

TEST_F(GpuStreams, CallbacksRunInStreamOrderAfterEarlierCopies) {
  const std::size_t n = (64u << 20) / 4;
  auto host = PinnedBuffer::allocate(ctx(), n * 4);
  fill_random(host.as<std::uint32_t>(), 12);
  auto dev = DeviceBuffer::allocate(ctx(), n * 4);
  auto back = PinnedBuffer::allocate(ctx(), n * 4);
  auto s = Stream::create(ctx());
  auto order = std::make_shared<std::vector<std::string>>();
  auto m = std::make_shared<std::mutex>();
  const auto note = [order, m](std::string what) {
    return [order, m, what] {
      std::lock_guard<std::mutex> lock(*m);
      order->push_back(what);
    };
  };
  std::uint32_t seen_last = 0;
  copy_async(s.ref(), dev.as<std::uint32_t>(), std::span<const std::uint32_t>(host.as<std::uint32_t>()));
  s.ref().launch_host_func(note("after upload"));
  copy_async(s.ref(), back.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(dev.as<std::uint32_t>()));
  s.ref().launch_host_func([&seen_last, &back, n] { seen_last = back.as<std::uint32_t>()[n - 1]; });
  s.ref().launch_host_func(note("after download"));
  s.ref().synchronize();
  EXPECT_EQ(*order, (std::vector<std::string>{"after upload", "after download"}));
  EXPECT_EQ(seen_last, host.as<std::uint32_t>()[n - 1]) << "the callback ran after the download completed";
  // `order` itself and the `note` helper hold two references; the queued closures are gone.
  EXPECT_EQ(order.use_count(), 2) << "closures freed after they ran";
}

TEST_F(GpuStreams, ElapsedTimeOfAKnownCopyIsSane) {
  const std::size_t bytes = std::size_t{64} << 20;
  auto host = PinnedBuffer::allocate(ctx(), bytes);
  fill_random(host.as<std::uint32_t>(), 13);
  auto dev = DeviceBuffer::allocate(ctx(), bytes);
  auto s = Stream::create(ctx());
  copy_async(s.ref(), dev.as<std::uint8_t>(), std::span<const std::uint8_t>(host.as<std::uint8_t>()));  // warm-up
  EventTimer timer(s.ref());
  copy_async(s.ref(), dev.as<std::uint8_t>(), std::span<const std::uint8_t>(host.as<std::uint8_t>()));
  const Milliseconds t = timer.stop();
  const double gbps = static_cast<double>(bytes) / (t.count() / 1e3) / 1e9;
  std::printf("[ info     ] 64 MiB pinned H2D between events: %.3f ms (%.1f GB/s)\n", t.count(), gbps);
  EXPECT_GT(t.count(), 0.3) << "faster than 200 GB/s over PCIe is not a real measurement";
  EXPECT_LT(t.count(), 100.0) << "slower than 0.7 GB/s means the events did not bracket the copy";
}

TEST_F(GpuStreams, ACallbackExceptionIsReportedAtTheNextSynchronize) {
  auto s = Stream::create(ctx());
  s.ref().launch_host_func([] { throw std::runtime_error("thrown on a driver thread"); });
  try {
    s.ref().synchronize();
    FAIL() << "the callback's exception was lost";
  } catch (const HostCallbackError& e) {
    std::printf("[ info     ] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("thrown on a driver thread"), std::string::npos);
  }
  s.ref().synchronize();
}

TEST_F(GpuStreams, DestroyingAStreamAndEventWithPendingWorkReturnsWithoutError) {
  const std::size_t bytes = std::size_t{256} << 20;
  auto host = PinnedBuffer::allocate(ctx(), bytes);
  auto dev = DeviceBuffer::allocate(ctx(), bytes);
  {
    auto s = Stream::create(ctx());
    auto ev = Event::create(ctx());
    for (int i = 0; i < 4; ++i) {
      copy_async(s.ref(), dev.as<std::uint8_t>(), std::span<const std::uint8_t>(host.as<std::uint8_t>()));
    }
    ev.ref().record(s.ref());
    EXPECT_EQ(s.ref().query(), StreamStatus::not_ready) << "about 20 ms of copies are still queued";
    ev.destroy();
    s.destroy();
  }
  ctx().synchronize();  // the queued copies complete; no error surfaces
}

}  // namespace
