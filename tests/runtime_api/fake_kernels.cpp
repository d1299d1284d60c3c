// CPU versions of the Runtime-API corpus' kernels, registered with the fake
// driver by their PTX (mangled) names when this library is preloaded, so the
// corpus runs in CI without a GPU. Each runs the whole grid at the launch and
// writes what the GPU kernel writes (device memory of the fake is host
// memory); device printf becomes the same text on stdout.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "fake_control.h"

namespace {

using Launch = drvshim_fake_launch;

template <class T>
T arg(void** args, int i) {
  T v;
  std::memcpy(&v, args[i], sizeof(T));
  return v;
}

unsigned threads_x(const Launch* l) { return l->grid[0] * l->block[0]; }
[[maybe_unused]] unsigned total_threads(const Launch* l) {
  return l->grid[0] * l->grid[1] * l->grid[2] * l->block[0] * l->block[1] * l->block[2];
}

template <class T>
T* global(const char* name) {
  return static_cast<T*>(drvshim_fake_find_global(name));
}

// ---- link_check.cu ----------------------------------------------------------------------------

void hello(const Launch*, void**) { std::printf("hello from the device\n"); }

void scale_add_f(const Launch* l, void** args) {
  auto* out = arg<float*>(args, 0);
  const auto* in = arg<const float*>(args, 1);
  const int n = arg<int>(args, 2);
  const float scale = global<float>("c_scale")[0];
  const int total = *global<int>("m_total");
  for (int i = 0; i < n && i < static_cast<int>(threads_x(l)); ++i) out[i] = in[i] * scale + static_cast<float>(total);
  *global<int>("d_hits") += 1;
}

struct Registration {
  const char* name;
  drvshim_fake_kernel_fn fn;
};

const Registration kKernels[] = {
    {"_Z5hellov", &hello},
    {"_Z9scale_addIfEvPT_PKS0_i", &scale_add_f},
};

struct RegisterAll {
  RegisterAll() {
    for (const auto& k : kKernels) drvshim_fake_register_kernel(k.name, k.fn);
  }
} g_register_all;

}  // namespace
