// SPDX-License-Identifier: Apache-2.0
// CPU versions of the examples' kernels (examples/), of drvshim-probe's and of
// the contract cases', so they run in CI against the fake with drvshim's
// public API only. Device pointers of the fake are host addresses.
// A kernel registered with drvshim_fake_register_kernel takes precedence (fake_launch.cpp).
#include <algorithm>
#include <cstring>

#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

unsigned thread_count(const drvshim_fake_launch* l) { return l->grid[0] * l->block[0]; }
template <class T>
T arg(void** args, int i) {
  T v;
  std::memcpy(&v, args[i], sizeof(T));
  return v;
}
void cpu_vadd(const drvshim_fake_launch* l, void** args) {
  const auto* a = arg<const float*>(args, 0);
  const auto* b = arg<const float*>(args, 1);
  auto* c = arg<float*>(args, 2);
  const unsigned n = arg<unsigned>(args, 3);
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) c[i] = a[i] + b[i];
}
void cpu_vadd_stride3(const drvshim_fake_launch* l, void** args) {
  const auto* a = arg<const float*>(args, 0);
  const auto* b = arg<const float*>(args, 1);
  auto* c = arg<float*>(args, 2);
  const unsigned n = arg<unsigned>(args, 3);
  const unsigned far = 3 * l->block[0];
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) {
    const unsigned j = static_cast<unsigned>((static_cast<unsigned long long>(i) + far) % n);
    c[i] = a[j] + b[j];
  }
}
void cpu_stencil3(const drvshim_fake_launch* l, void** args) {
  const auto* a = arg<const float*>(args, 0);
  const auto* b = arg<const float*>(args, 1);
  auto* c = arg<float*>(args, 2);
  const unsigned n = arg<unsigned>(args, 3);
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) {
    c[i] = (i > 0 ? a[i - 1] : 0.0f) + a[i] + (i + 1 < n ? a[i + 1] : 0.0f) + b[i];
  }
}
void cpu_scale(const drvshim_fake_launch* l, void** args) {
  auto* p = arg<float*>(args, 0);
  const float f = arg<float>(args, 1);
  const unsigned n = arg<unsigned>(args, 2);
  const unsigned repeat = arg<unsigned>(args, 3);
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) {
    for (unsigned r = 0; r < repeat; ++r) p[i] = p[i] * f;
  }
}
void cpu_saxpy(const drvshim_fake_launch* l, void** args) {
  const float a = arg<float>(args, 0);
  const auto* x = arg<const float*>(args, 1);
  auto* y = arg<float*>(args, 2);
  const unsigned n = arg<unsigned>(args, 3);
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) y[i] = a * x[i] + y[i];
}

// drvshim-probe's: read_sum reads zero-copy memory for a bandwidth figure and
// stores nothing (the GPU version stores only for an improbable sum), and
// wait_flag latches a stream until the host sets a flag, which a launch that
// runs at once has no reason to wait for.
void cpu_no_effect(const drvshim_fake_launch*, void**) {}
// The contract cases' kernel: p[0] *= f.
void cpu_contract_scale(const drvshim_fake_launch*, void** args) {
  auto* p = arg<float*>(args, 0);
  *p *= arg<float>(args, 1);
}

}  // namespace

drvshim_fake_kernel_fn builtin_kernel(const std::string& name, size_t parameters) {
  struct Builtin {
    const char* name;
    size_t parameters;
    drvshim_fake_kernel_fn fn;
  };
  static const Builtin table[] = {{"vadd", 4, &cpu_vadd},
                                  {"vadd_stride3", 4, &cpu_vadd_stride3},
                                  {"stencil3", 4, &cpu_stencil3},
                                  {"scale", 4, &cpu_scale},
                                  {"read_sum", 3, &cpu_no_effect},
                                  {"wait_flag", 2, &cpu_no_effect},
                                  {"drvshim_contract_scale", 2, &cpu_contract_scale}};
  // A user's kernel of the same name but another parameter count is not this one:
  // it would read arguments that are not there. (An image without a parameter
  // layout, SASS only, gets no built-in.)
  for (const auto& b : table) {
    if (name == b.name) return parameters == b.parameters ? b.fn : nullptr;
  }
  // saxpy<float> by its mangled name (a name expression of examples/nvrtc_kernel).
  if (name.rfind("_Z5saxpyIfE", 0) == 0 && parameters == 4) return &cpu_saxpy;
  return nullptr;
}

}  // namespace drvshim::fake
