// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the examples share: the driver set-up, their kernels compiled at run
// time through the compile cache, event timing, and a median.
#include <drvshim/drvshim.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace example {

// The examples' kernels, one NVRTC program.
inline const char* kKernels = R"(
extern "C" __global__ void vadd(const float* a, const float* b, float* c, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
// Each thread reads three blocks away from its own element.
extern "C" __global__ void vadd_stride3(const float* a, const float* b, float* c, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned j = (unsigned)(((unsigned long long)i + 3u * blockDim.x) % n);
  c[i] = a[j] + b[j];
}
// A three-point stencil: every input element is read three times.
extern "C" __global__ void stencil3(const float* a, const float* b, float* c, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  c[i] = (i > 0 ? a[i - 1] : 0.0f) + a[i] + (i + 1 < n ? a[i + 1] : 0.0f) + b[i];
}
// Multiplies p by f, `repeat` times (a kernel that takes as long as asked).
extern "C" __global__ void scale(float* p, float f, unsigned n, unsigned repeat) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = p[i];
  for (unsigned r = 0; r < repeat; ++r) v = v * f;
  p[i] = v;
}
)";

// The cache directory: DRVSHIM_CACHE_DIR or the per-user default.
inline drvshim::Module load_kernels(const drvshim::ContextRef& ctx) {
  drvshim::CompileCache cache(drvshim::NvrtcLoadOptions{});
  drvshim::KernelSource program;
  program.source = kKernels;
  program.name = "examples.cu";
  const auto compiled = cache.compile_for(ctx, program);
  std::printf("kernels: %s for %s in %.1f ms%s\n", drvshim::to_string(compiled.outcome),
              compiled.result.options.front().c_str(), compiled.wall_ms,
              cache.disk_enabled() ? "" : (" (" + cache.disabled_reason() + ")").c_str());
  return drvshim::Module::load(ctx, compiled.result.image);
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline drvshim::LaunchConfig grid_for(unsigned n, const drvshim::StreamRef& stream) {
  return drvshim::LaunchConfig::covering(n, 256, stream);
}

// Fails the program with a message when `ok` is false.
inline void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "WRONG RESULT: %s\n", what.c_str());
    std::exit(1);
  }
}

}  // namespace example
