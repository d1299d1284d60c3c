// SPDX-License-Identifier: Apache-2.0
// pinned_stream_copy: what pinned memory and streams buy.
//   1. pageable vs pinned host-to-device and device-to-host copies on a
//      non-blocking stream, timed with events, for several sizes;
//   2. copies overlapping a kernel on two streams (versus the same work on one
//      stream), timed with events;
//   3. an event wait between streams: stream B waits for the copy on stream A
//      before its kernel uses the data, and the result is checked.
//
//   ./pinned_stream_copy [MAX_MIB [KERNEL_REPEAT]]     (defaults 256 and 200)
#include <cstring>

#include "../common/example.hpp"

using namespace drvshim;

namespace {

double event_ms(const Stream& s, const std::function<void()>& work) {
  auto start = Event::create(s.context());
  auto stop = Event::create(s.context());
  std::vector<double> ms;
  for (int rep = 0; rep < 6; ++rep) {
    start.record(s);
    work();
    stop.record(s);
    stop.synchronize();
    if (rep > 0) ms.push_back(elapsed(start, stop).count());
  }
  return example::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t max_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
  const unsigned repeat = argc > 2 ? static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)) : 200;
  try {
    auto drv = Driver::load();
    drv.init();
    auto primary = drv.device(0).retain_primary_context();
    const auto ctx = primary.ref();
    auto module = example::load_kernels(ctx);
    const Kernel scale = module.kernel("scale");
    auto a = Stream::create(ctx, StreamFlags::non_blocking);
    auto b = Stream::create(ctx, StreamFlags::non_blocking);

    std::printf("\n1. copies on a non-blocking stream (GB/s, event-timed medians)\n");
    std::printf("%10s %14s %14s %14s %14s\n", "MiB", "pageable H2D", "pinned H2D", "pageable D2H", "pinned D2H");
    for (std::size_t mib = 1; mib <= max_mib; mib *= 4) {
      const std::size_t bytes = mib << 20;
      std::vector<std::byte> pageable(bytes, std::byte{7});
      auto pinned = PinnedBuffer::allocate(ctx, bytes);
      std::memset(pinned.data(), 7, bytes);
      auto dev = DeviceBuffer::allocate(ctx, bytes);
      const auto d = dev.as<std::byte>();
      const std::span<std::byte> p(static_cast<std::byte*>(pinned.data()), bytes);
      auto gbs = [&](double ms) { return static_cast<double>(bytes) / ms / 1e6; };
      const double ph = event_ms(a, [&] { copy_async(a, d, pageable); });
      const double nh = event_ms(a, [&] { copy_async(a, d, p); });
      const double pd = event_ms(a, [&] { copy_async(a, pageable, d); });
      const double nd = event_ms(a, [&] { copy_async(a, p, d); });
      std::printf("%10zu %14.1f %14.1f %14.1f %14.1f\n", mib, gbs(ph), gbs(nh), gbs(pd), gbs(nd));
    }

    std::printf("\n2. a copy overlapping a kernel on two streams (%zu MiB, kernel repeat %u)\n",
                std::min<std::size_t>(max_mib, 64), repeat);
    const unsigned n = static_cast<unsigned>(std::min<std::size_t>(std::size_t{1} << 24, (max_mib << 20) / 4));
    const std::size_t bytes = std::size_t{n} * 4;
    auto host = PinnedBuffer::allocate(ctx, bytes);
    for (unsigned i = 0; i < n; ++i) host.as<float>()[i] = 1.0f;
    auto copy_dst = DeviceBuffer::allocate(ctx, bytes);
    auto work = DeviceBuffer::allocate(ctx, bytes);
    copy(work.as<float>(), host.as<float>());
    auto start = Event::create(ctx);
    auto stop_a = Event::create(ctx);
    auto stop_b = Event::create(ctx);
    std::vector<double> copy_ms, kernel_ms, both_ms;
    for (int rep = 0; rep < 6; ++rep) {
      start.record(a);
      b.wait(start);
      copy_async(a, copy_dst.as<float>(), host.as<float>());
      stop_a.record(a);
      launch(scale, example::grid_for(n, b.ref()), work.address(), 1.0f, n, repeat);
      stop_b.record(b);
      stop_a.synchronize();
      stop_b.synchronize();
      if (rep == 0) continue;
      copy_ms.push_back(elapsed(start, stop_a).count());
      kernel_ms.push_back(elapsed(start, stop_b).count());
      both_ms.push_back(std::max(copy_ms.back(), kernel_ms.back()));
    }
    std::printf("   copy alone (stream A)      %8.3f ms\n", example::median(copy_ms));
    std::printf("   kernel alone (stream B)    %8.3f ms\n", example::median(kernel_ms));
    std::printf("   both, two streams          %8.3f ms (overlapped: the longer of the two)\n",
                example::median(both_ms));
    const double serial = event_ms(a, [&] {
      copy_async(a, copy_dst.as<float>(), host.as<float>());
      launch(scale, example::grid_for(n, a.ref()), work.address(), 1.0f, n, repeat);
    });
    std::printf("   both, one stream           %8.3f ms (serialised)\n", serial);

    std::printf("\n3. an event wait between streams\n");
    for (unsigned i = 0; i < n; ++i) host.as<float>()[i] = static_cast<float>(i % 100);
    auto copied = Event::create(ctx);
    copy_async(a, copy_dst.as<float>(), host.as<float>());
    copied.ref().record(a.ref());
    b.ref().wait(copied.ref());  // B's kernel must not start before A's copy is done
    launch(scale, example::grid_for(n, b.ref()), copy_dst.address(), 2.0f, n, 1u);
    std::vector<float> result(n);
    copy_async(b.ref(), std::span<float>(result), DeviceSpan<const float>(copy_dst.as<float>()));
    b.ref().synchronize();
    for (unsigned i = 0; i < n; i += 997) {
      example::check(result[i] == 2.0f * static_cast<float>(i % 100), "scaled value at " + std::to_string(i));
    }
    std::printf("   stream B waited for stream A's copy: every checked value doubled, correct\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "pinned_stream_copy: %s\n", e.what());
    return 1;
  }
  return 0;
}
