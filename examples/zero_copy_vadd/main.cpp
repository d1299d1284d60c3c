// SPDX-License-Identifier: Apache-2.0
// zero_copy_vadd: when does zero-copy beat copying?
//
// Vector addition (and two other access patterns: each thread reading three
// blocks away, and a three-point stencil) three ways:
//   device     : inputs copied to device memory, the kernel, the result copied back
//   mapped     : the kernel reads and writes mapped pinned host memory over the bus
//   registered : ordinary host memory registered with the driver and mapped; where
//                registration is unsupported (a Jetson TX1), a mapped pinned
//                allocation instead, with the reason printed
// For sizes 2^10 .. 2^26 elements it prints the kernel time (events) and the
// end-to-end time (host clock, including the copies), and checks every result.
//
//   ./zero_copy_vadd [MAX_LOG2]      (default 26)
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "../common/example.hpp"

using namespace drvshim;
using Clock = std::chrono::steady_clock;

namespace {

struct Timing {
  double kernel_ms;
  double total_ms;
};

float expected(const char* kernel, unsigned i, unsigned n, unsigned block) {
  auto a = [](unsigned k) { return static_cast<float>(k % 1000); };
  auto b = [](unsigned k) { return 0.5f * static_cast<float>(k % 7); };
  if (std::strcmp(kernel, "vadd") == 0) return a(i) + b(i);
  if (std::strcmp(kernel, "vadd_stride3") == 0) {
    const unsigned j = static_cast<unsigned>((static_cast<unsigned long long>(i) + 3ull * block) % n);
    return a(j) + b(j);
  }
  return (i > 0 ? a(i - 1) : 0.0f) + a(i) + (i + 1 < n ? a(i + 1) : 0.0f) + b(i);
}

void fill_inputs(float* a, float* b, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000);
    b[i] = 0.5f * static_cast<float>(i % 7);
  }
}

void verify(const char* kernel, const char* mode, const float* c, unsigned n) {
  const unsigned step = n > 4096 ? n / 4096 : 1;
  for (unsigned i = 0; i < n; i += step) {
    example::check(c[i] == expected(kernel, i, n, 256), std::string(mode) + " " + kernel + " at " + std::to_string(i));
  }
  example::check(c[n - 1] == expected(kernel, n - 1, n, 256), std::string(mode) + " " + kernel + " last element");
}

// Runs `kernel` on (a, b) -> c (device addresses), `reps` times; medians.
template <class Before, class After>
Timing run(const Kernel& k, const StreamRef& stream, DevicePtr a, DevicePtr b, DevicePtr c, unsigned n, Before&& before,
           After&& after) {
  auto start = Event::create(stream.context());
  auto stop = Event::create(stream.context());
  std::vector<double> kernel_ms, total_ms;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = Clock::now();
    before();
    start.ref().record(stream);
    launch(k, example::grid_for(n, stream), a, b, c, n);
    stop.ref().record(stream);
    after();
    stream.synchronize();
    const double total = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (rep == 0) continue;  // warm-up: first touch of memory, lazy module loading
    kernel_ms.push_back(elapsed(start.ref(), stop.ref()).count());
    total_ms.push_back(total);
  }
  return {example::median(kernel_ms), example::median(total_ms)};
}

}  // namespace

int main(int argc, char** argv) {
  const int max_log2 = argc > 1 ? std::atoi(argv[1]) : 26;
  try {
    auto drv = Driver::load();
    drv.init();
    const auto dev = drv.device(0);
    auto primary = dev.retain_primary_context();
    const auto ctx = primary.ref();
    const auto verdict = dev.host_mapping();
    std::printf("device 0: %s; %s\n", dev.name().c_str(), verdict.verdict().c_str());
    auto module = example::load_kernels(ctx);
    auto stream = Stream::create(ctx);
    const StreamRef s = stream.ref();

    std::printf("\n%-10s %-13s %-11s %12s %12s\n", "elements", "pattern", "memory", "kernel ms", "end-to-end ms");
    for (int lg = 10; lg <= max_log2; lg += 2) {
      const unsigned n = 1u << lg;
      const std::size_t bytes = std::size_t{n} * sizeof(float);
      for (const char* name : {"vadd", "vadd_stride3", "stencil3"}) {
        const Kernel k = module.kernel(name);
        // device memory with explicit copies, from pageable host vectors
        {
          std::vector<float> ha(n), hb(n), hc(n);
          fill_inputs(ha.data(), hb.data(), n);
          auto da = DeviceBuffer::allocate(ctx, bytes), db = DeviceBuffer::allocate(ctx, bytes),
               dc = DeviceBuffer::allocate(ctx, bytes);
          const auto t = run(
              k, s, da.address(), db.address(), dc.address(), n,
              [&] {
                copy_async(s, da.as<float>(), std::span<const float>(ha));
                copy_async(s, db.as<float>(), std::span<const float>(hb));
              },
              [&] { copy_async(s, std::span<float>(hc), DeviceSpan<const float>(dc.as<float>())); });
          verify(name, "device", hc.data(), n);
          std::printf("%-10u %-13s %-11s %12.4f %12.4f\n", n, name, "device", t.kernel_ms, t.total_ms);
        }
        // mapped pinned host memory: no copies, the kernel crosses the bus
        {
          auto ma = MappedBuffer::allocate(ctx, bytes), mb = MappedBuffer::allocate(ctx, bytes),
               mc = MappedBuffer::allocate(ctx, bytes);
          fill_inputs(ma.as<float>().data(), mb.as<float>().data(), n);
          const auto t = run(
              k, s, ma.device_address(), mb.device_address(), mc.device_address(), n, [] {}, [] {});
          verify(name, "mapped", mc.as<float>().data(), n);
          std::printf("%-10u %-13s %-11s %12.4f %12.4f\n", n, name, "mapped", t.kernel_ms, t.total_ms);
        }
        // registered ordinary memory (or a mapped pinned allocation where that is unsupported)
        {
          std::vector<float> ha(n), hb(n), hc(n);
          fill_inputs(ha.data(), hb.data(), n);
          std::vector<RegisteredRange> ranges;
          std::vector<MappedBuffer> fallback;
          const char* label = "registered";
          DevicePtr pa = 0, pb = 0, pc = 0;
          try {
            for (auto* v : {&ha, &hb, &hc}) {
              ranges.push_back(RegisteredRange::register_range(ctx, v->data(), bytes, HostRegisterFlags::device_map));
            }
            pa = ranges[0].device_address();
            pb = ranges[1].device_address();
            pc = ranges[2].device_address();
          } catch (const UnsupportedError& e) {
            ranges.clear();
            if (lg == 10 && std::strcmp(name, "vadd") == 0) std::printf("registration unsupported: %s\n", e.what());
            label = "mapped*";
            for (int i = 0; i < 3; ++i) fallback.push_back(MappedBuffer::allocate(ctx, bytes));
            fill_inputs(fallback[0].as<float>().data(), fallback[1].as<float>().data(), n);
            pa = fallback[0].device_address();
            pb = fallback[1].device_address();
            pc = fallback[2].device_address();
          }
          const auto t = run(
              k, s, pa, pb, pc, n, [] {}, [] {});
          verify(name, label, fallback.empty() ? hc.data() : fallback[2].as<float>().data(), n);
          std::printf("%-10u %-13s %-11s %12.4f %12.4f\n", n, name, label, t.kernel_ms, t.total_ms);
        }
      }
    }
    std::printf("\nall results checked: correct\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "zero_copy_vadd: %s\n", e.what());
    return 1;
  }
  return 0;
}
