// SPDX-License-Identifier: Apache-2.0
// Launch cost: an empty kernel launched through drvshim's checked typed launch
// and through the raw cuLaunchKernel (resolved here through cuGetProcAddress_v2
// from the same loaded libcuda), interleaved in one process.
//
// Method: warm-up rounds; then 61 rounds; in each, 200 launches of each
// variant (order flipped every round) on one non-blocking stream, queued behind
// a 3 ms spinning kernel so that the submission loop measures the host cost of
// a launch and not the rate at which the GPU drains the queue; the loop is
// timed with a steady clock and the stream synchronised (untimed) after it;
// per-launch cost = loop time / 200; medians of the rounds.
//   bench_launch KERNELS.cubin [OUT.md]
#include <dlfcn.h>

#include <drvshim/drvshim.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

using RawLaunch = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                          void**);
using GetProc = int (*)(const char*, void**, int, std::uint64_t, int*);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_launch KERNELS.cubin [OUT.md]\n");
    return 1;
  }
  try {
    auto drv = drvshim::Driver::load();
    drv.init();
    auto primary = drv.device(0).retain_primary_context();
    drvshim::ScopedCurrentContext current(primary.ref());
    auto module = drvshim::Module::load_file(primary.ref(), argv[1]);
    const auto kernel = module.kernel("empty");
    const auto spin = module.kernel("spin_then_write");
    auto sink = drvshim::DeviceBuffer::allocate(primary.ref(), 4);
    auto stream = drvshim::Stream::create(primary.ref());
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
    void* p = nullptr;
    int status = 0;
    if (get == nullptr || get("cuLaunchKernel", &p, 4000, 1, &status) != 0 || p == nullptr) {
      throw std::runtime_error("cannot resolve cuLaunchKernel");
    }
    const auto raw = reinterpret_cast<RawLaunch>(p);
    using RawGetCurrent = int (*)(void**);
    if (get("cuCtxGetCurrent", &p, 4000, 1, &status) != 0 || p == nullptr) throw std::runtime_error("cuCtxGetCurrent");
    const auto raw_get_current = reinterpret_cast<RawGetCurrent>(p);
    const drvshim::LaunchConfig config{{1}, {32}, 0, stream.ref(), {}};
    void* fn = reinterpret_cast<void*>(kernel.native());
    void* cu_stream = reinterpret_cast<void*>(stream.ref().native());
    constexpr int kPerRound = 200;
    const auto via_drvshim = [&] {
      for (int i = 0; i < kPerRound; ++i) drvshim::launch(kernel, config);
    };
    const auto via_raw = [&] {
      for (int i = 0; i < kPerRound; ++i) {
        if (raw(fn, 1, 1, 1, 32, 1, 1, 0, cu_stream, nullptr, nullptr) != 0)
          throw std::runtime_error("raw launch failed");
      }
    };
    // Attribution: the raw launch plus the one cuCtxGetCurrent drvshim's context policy adds.
    const auto via_raw_plus_get_current = [&] {
      for (int i = 0; i < kPerRound; ++i) {
        void* now_current = nullptr;
        if (raw_get_current(&now_current) != 0) throw std::runtime_error("cuCtxGetCurrent failed");
        if (raw(fn, 1, 1, 1, 32, 1, 1, 0, cu_stream, nullptr, nullptr) != 0)
          throw std::runtime_error("raw launch failed");
      }
    };
    // Contract probe: does a CUfunction launch on an explicit stream need its context current?
    {
      int result = -1;
      std::thread fresh([&] { result = raw(fn, 1, 1, 1, 32, 1, 1, 0, cu_stream, nullptr, nullptr); });
      fresh.join();
      stream.ref().synchronize();
      std::printf("launch from a thread with no current context on an explicit stream: CUresult %d\n", result);
    }
    const auto time_us = [&](auto&& f) {
      drvshim::launch(spin, config, std::uint64_t{3'000'000}, sink.address(), 1u);  // keeps the GPU busy, untimed
      const auto t0 = std::chrono::steady_clock::now();
      f();
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      stream.ref().synchronize();
      return us / kPerRound;
    };
    for (int w = 0; w < 10; ++w) {
      (void)time_us(via_drvshim);
      (void)time_us(via_raw);
    }
    std::vector<double> d, r, g;
    for (int round = 0; round < 61; ++round) {
      if (round % 2 == 0) {
        d.push_back(time_us(via_drvshim));
        r.push_back(time_us(via_raw));
        g.push_back(time_us(via_raw_plus_get_current));
      } else {
        g.push_back(time_us(via_raw_plus_get_current));
        r.push_back(time_us(via_raw));
        d.push_back(time_us(via_drvshim));
      }
    }
    const double md = median(d);
    const double mr = median(r);
    const double mg = median(g);
    char text[512];
    std::snprintf(text, sizeof text,
                  "| drvshim checked typed launch | %.3f us |\n| raw cuLaunchKernel | %.3f us |\n"
                  "| raw cuCtxGetCurrent + cuLaunchKernel | %.3f us |\n"
                  "drvshim vs raw: %+.2f %%\n",
                  md, mr, mg, (md / mr - 1.0) * 100.0);
    std::fputs(text, stdout);
    if (argc > 2) {
      if (std::FILE* f = std::fopen(argv[2], "a")) {
        std::fputs(text, f);
        std::fclose(f);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_launch: %s\n", e.what());
    return 1;
  }
  return 0;
}
