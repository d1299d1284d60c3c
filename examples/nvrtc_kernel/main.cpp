// SPDX-License-Identifier: Apache-2.0
// nvrtc_kernel: compile a templated kernel at run time and let the second
// run pay nothing for it.
//   - compiles saxpy<float> with NVRTC through drvshim's compile cache (the
//     name expression gives its mangled name), for the device's own
//     architecture (or PTX linked to SASS by the driver where NVRTC is older
//     than the device);
//   - asks again in a fresh cache object, as a second run of the program
//     would: a disk hit, with NVRTC not even loaded;
//   - loads, launches and checks the result.
//
//   ./nvrtc_kernel          (cache: DRVSHIM_CACHE_DIR, else ~/.cache/drvshim)
#include <chrono>

#include "../common/example.hpp"

using namespace drvshim;

int main() {
  try {
    auto drv = Driver::load();
    drv.init();
    auto primary = drv.device(0).retain_primary_context();
    const auto ctx = primary.ref();

    KernelSource program;
    program.name = "saxpy.cu";
    program.source = R"(
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";
    program.name_expressions = {"saxpy<float>"};

    CachedCompile result;
    for (int run = 1; run <= 2; ++run) {
      // A fresh cache object each time: the second behaves like a second run of the program.
      CompileCache cache(NvrtcLoadOptions{});
      result = cache.compile_for(ctx, program);
      std::printf("run %d: %-10s %8.3f ms  target %s%s  NVRTC %s  key %.16s\n", run, to_string(result.outcome),
                  result.wall_ms, result.result.options.front().c_str(), result.linked ? " (linked by the driver)" : "",
                  cache.nvrtc_loaded() ? "loaded" : "not loaded", result.key.c_str());
      if (!result.miss_reason.empty()) std::printf("       miss because: %s\n", result.miss_reason.c_str());
      if (run == 2) {
        example::check(result.outcome == CacheOutcome::disk_hit || !cache.disk_enabled(),
                       "the second run should hit the cache");
        example::check(!cache.disk_enabled() || !cache.nvrtc_loaded(), "a cache hit should not load NVRTC");
        if (!cache.disk_enabled()) std::printf("       (disk cache off: %s)\n", cache.disabled_reason().c_str());
      }
    }
    const std::string& mangled = result.result.lowered_names.at("saxpy<float>");
    std::printf("saxpy<float> is %s\n", mangled.c_str());

    auto module = Module::load(ctx, result.result.image);
    const Kernel saxpy = module.kernel(mangled);
    const unsigned n = 1u << 20;
    std::vector<float> x(n), y(n);
    for (unsigned i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i % 10);
      y[i] = 1.0f;
    }
    auto dx = DeviceBuffer::allocate(ctx, n * 4);
    auto dy = DeviceBuffer::allocate(ctx, n * 4);
    copy(dx.as<float>(), x);
    copy(dy.as<float>(), y);
    launch(saxpy, LaunchConfig{{n / 256}, {256}, 0, {}, {}}, 2.0f, dx.address(), dy.address(), n);
    copy(y, dy.as<float>());
    for (unsigned i = 0; i < n; i += 4099) {
      example::check(y[i] == 2.0f * static_cast<float>(i % 10) + 1.0f, "y at " + std::to_string(i));
    }
    std::printf("launched saxpy<float> on %u elements: correct\n", n);
  } catch (const Error& e) {
    std::fprintf(stderr, "nvrtc_kernel: %s\n", e.what());
    return 1;
  }
  return 0;
}
