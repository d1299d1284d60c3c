// SPDX-License-Identifier: Apache-2.0
// CPU versions of the Runtime-API corpus' kernels, registered with the fake
// driver by their PTX (mangled) names when this library is preloaded, so the
// corpus runs in CI without a GPU. Each runs the whole grid at the launch and
// writes what the GPU kernel writes (device memory of the fake is host
// memory); device printf becomes the same text on stdout; __device__,
// __constant__ and __managed__ variables are found by name in the loaded
// image (drvshim_fake_find_global). (vadd and scale, extern "C" kernels, are
// the fake's built-in ones.)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

#include <drvshim/fakecuda.h>

namespace {

using Launch = drvshim_fake_launch;

template <class T>
T arg(void** args, int i) {
  T v;
  std::memcpy(&v, args[i], sizeof(T));
  return v;
}

// Threads along x of the whole grid, and of the whole launch.
unsigned threads_x(const Launch* l) { return l->grid[0] * l->block[0]; }
unsigned long long threads_all(const Launch* l) {
  return 1ull * l->grid[0] * l->grid[1] * l->grid[2] * l->block[0] * l->block[1] * l->block[2];
}
// Elements a launch covers: every i < n for grid-stride loops, else i < min(n, threads).
int covered(const Launch* l, int n) { return std::min(n, static_cast<int>(threads_x(l))); }

template <class T>
T* global(const char* name) {
  return static_cast<T*>(drvshim_fake_find_global(name));
}

// ---- link_check.cu ------------------------------------------------------------------------------

void hello(const Launch*, void**) { std::printf("hello from the device\n"); }

void scale_add_f(const Launch* l, void** args) {
  auto* out = arg<float*>(args, 0);
  const auto* in = arg<const float*>(args, 1);
  const int n = arg<int>(args, 2);
  const float scale = global<float>("c_scale")[0];
  const int total = *global<int>("m_total");
  for (int i = 0; i < covered(l, n); ++i) out[i] = in[i] * scale + static_cast<float>(total);
  *global<int>("d_hits") += 1;
}

// ---- matrix_mul.cu: C = A * B, 32 x 32 tiles -------------------------------------------------------

void matrix_mul32(const Launch* l, void** args) {
  auto* c = arg<float*>(args, 0);
  const auto* a = arg<const float*>(args, 1);
  const auto* b = arg<const float*>(args, 2);
  const int wa = arg<int>(args, 3), wb = arg<int>(args, 4);
  const int rows = static_cast<int>(l->grid[1] * 32), cols = static_cast<int>(l->grid[0] * 32);
  for (int r = 0; r < rows; ++r) {
    for (int col = 0; col < cols; ++col) {
      float sum = 0.0f;
      for (int k = 0; k < wa; ++k) sum += a[r * wa + k] * b[k * wb + col];
      c[r * wb + col] = sum;
    }
  }
}

// ---- context_state.cu ------------------------------------------------------------------------------

void touch(const Launch* l, void** args) {
  auto* p = arg<int*>(args, 0);
  for (unsigned i = 0; i < l->block[0]; ++i) p[i] = static_cast<int>(i);
}

// ---- simple_callbacks.cu, per_thread_stream.cu, threads_per_device.cu, ... ---------------------------

void increment(const Launch* l, void** args) {
  auto* p = arg<int*>(args, 0);
  const int n = arg<int>(args, 1), by = arg<int>(args, 2);
  for (int i = 0; i < covered(l, n); ++i) p[i] += by;
}

void set_value(const Launch* l, void** args) {
  auto* p = arg<int*>(args, 0);
  const int n = arg<int>(args, 1), v = arg<int>(args, 2);
  for (int i = 0; i < covered(l, n); ++i) p[i] = v;
}

void fill_pattern(const Launch* l, void** args) {
  auto* p = arg<int*>(args, 0);
  const int n = arg<int>(args, 1), seed = arg<int>(args, 2);
  for (int i = 0; i < covered(l, n); ++i) p[i] = seed * 1000 + i % 1000;
}

// ---- async_overlap.cu (grid-stride loops) ----------------------------------------------------------

void scale_chunk(const Launch*, void** args) {
  auto* p = arg<float*>(args, 0);
  const int n = arg<int>(args, 1);
  const float by = arg<float>(args, 2);
  for (int i = 0; i < n; ++i) p[i] *= by;
}

void count_wrong(const Launch*, void** args) {
  const auto* p = arg<const float*>(args, 0);
  const int n = arg<int>(args, 1);
  const float f = arg<float>(args, 2);
  auto* wrong = arg<int*>(args, 3);
  for (int i = 0; i < n; ++i) *wrong += p[i] != static_cast<float>(i % 100) * f;
}

// ---- constant_convolution.cu, device_counter.cu, managed_variables.cu, rdc ------------------------------

void convolve(const Launch* l, void** args) {
  auto* out = arg<float*>(args, 0);
  const auto* in = arg<const float*>(args, 1);
  const int n = arg<int>(args, 2);
  const float* filter = global<float>("c_filter");
  constexpr int r = 4;
  for (int i = 0; i < covered(l, n); ++i) {
    float sum = 0.0f;
    for (int k = -r; k <= r; ++k) {
      if (i + k >= 0 && i + k < n) sum += in[i + k] * filter[k + r];
    }
    out[i] = sum;
  }
}

void count_threads(const Launch* l, void**) { *global<unsigned>("d_count") += static_cast<unsigned>(threads_all(l)); }

void fill_table(const Launch* l, void** args) {
  const int base = arg<int>(args, 0);
  int* table = global<int>("d_table");
  for (unsigned i = 0; i < 64 && i < l->block[0]; ++i) table[i] = base + static_cast<int>(i);
}

void sum_table(const Launch*, void** args) {
  const int* table = global<int>("d_table");
  int s = 0;
  for (int i = 0; i < 64; ++i) s += table[i];
  *arg<int*>(args, 0) = s;
}

void scale_and_sum(const Launch* l, void** args) {
  const int n = arg<int>(args, 0);
  float* values = global<float>("m_values");
  const int factor = *global<int>("m_factor");
  auto* sum = global<unsigned long long>("m_sum");
  for (int i = 0; i < std::min(n, static_cast<int>(l->block[0])); ++i) {
    values[i] *= static_cast<float>(factor);
    *sum += static_cast<unsigned long long>(values[i]);
  }
}

void evaluate(const Launch* l, void** args) {
  auto* out = arg<int*>(args, 0);
  const int n = arg<int>(args, 1);
  const int offset = *global<int>("d_offset");
  for (int i = 0; i < covered(l, n); ++i) out[i] = 3 * i * i + 2 * i + 1 + offset;
}

// ---- managed_memory.cu, host_register.cu, dynamic_shared.cu, events_and_memset.cu, l2_persistence.cu ----

void square(const Launch* l, void** args) {
  auto* p = arg<int*>(args, 0);
  const int n = arg<int>(args, 1);
  for (int i = 0; i < covered(l, n); ++i) p[i] = p[i] * p[i];
}

void negate(const Launch* l, void** args) {
  auto* p = arg<int*>(args, 0);
  const int n = arg<int>(args, 1);
  for (int i = 0; i < covered(l, n); ++i) p[i] = -p[i];
}

void reverse_block(const Launch*, void** args) {
  auto* p = arg<int*>(args, 0);
  const int n = arg<int>(args, 1);
  std::reverse(p, p + n);
}

void spin_add(const Launch* l, void** args) {
  auto* p = arg<int*>(args, 0);
  const int n = arg<int>(args, 1), rounds = arg<int>(args, 2);
  for (int i = 0; i < covered(l, n); ++i) {
    int v = p[i];
    for (int r = 0; r < rounds; ++r) v = (v * 3 + 1) % 1000003;
    p[i] = v;
  }
}

void touch_window(const Launch* l, void** args) {
  auto* p = arg<int*>(args, 0);
  const int n = arg<int>(args, 1), rounds = arg<int>(args, 2);
  for (int i = 0; i < covered(l, n); ++i) p[i] += rounds;
}

// ---- occupancy_launch.cu, cooperative_reduce.cu, cluster_launch.cu ----------------------------------

void saxpy(const Launch*, void** args) {
  const float a = arg<float>(args, 0);
  const auto* x = arg<const float*>(args, 1);
  auto* y = arg<float*>(args, 2);
  const int n = arg<int>(args, 3);
  for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

void grid_sum(const Launch* l, void** args) {
  const auto* in = arg<const int*>(args, 0);
  const int n = arg<int>(args, 1);
  auto* partial = arg<int*>(args, 2);
  auto* total = arg<int*>(args, 3);
  const int threads = static_cast<int>(threads_x(l));
  const int block = static_cast<int>(l->block[0]);
  int sum = 0;
  for (unsigned b = 0; b < l->grid[0]; ++b) partial[b] = 0;
  for (int t = 0; t < threads; ++t) {
    for (int i = t; i < n; i += threads) partial[t / block] += in[i];
  }
  for (unsigned b = 0; b < l->grid[0]; ++b) sum += partial[b];
  *total = sum;
}

void cluster_ranks(const Launch* l, void** args) {
  auto* ranks = arg<int*>(args, 0);
  for (unsigned b = 0; b < l->grid[0]; ++b) ranks[b] = static_cast<int>(b % l->cluster[0]);
}

// ---- kernel_printf.cu ----------------------------------------------------------------------------

void greet(const Launch*, void** args) {
  const int round = arg<int>(args, 0);
  for (int line = 0; line < 3; ++line) std::printf("round %d, line %d: %s\n", round, line, "hello from the device");
}

// ---- peer_copy.cu, pitched_2d.cu, stream_ordered_alloc.cu ---------------------------------------------

void add_peer(const Launch* l, void** args) {
  auto* mine = arg<float*>(args, 0);
  const auto* peer = arg<const float*>(args, 1);
  const int n = arg<int>(args, 2);
  for (int i = 0; i < covered(l, n); ++i) mine[i] += peer[i];
}

void add_row_index(const Launch* l, void** args) {
  auto* base = arg<char*>(args, 0);
  const auto pitch = arg<std::size_t>(args, 1);
  const int width = arg<int>(args, 2), height = arg<int>(args, 3);
  for (int y = 0; y < std::min(height, static_cast<int>(l->grid[1])); ++y) {
    auto* row = reinterpret_cast<float*>(base + static_cast<std::size_t>(y) * pitch);
    for (int x = 0; x < covered(l, width); ++x) row[x] += static_cast<float>(y);
  }
}

void iota(const Launch* l, void** args) {
  auto* p = arg<int*>(args, 0);
  const int n = arg<int>(args, 1), base = arg<int>(args, 2);
  for (int i = 0; i < covered(l, n); ++i) p[i] = base + i;
}

void sum(const Launch* l, void** args) {
  const auto* p = arg<const int*>(args, 0);
  const int n = arg<int>(args, 1);
  auto* out = arg<unsigned long long*>(args, 2);
  for (int i = 0; i < covered(l, n); ++i) *out += static_cast<unsigned long long>(p[i]);
}

// ---- producer_consumer.cu: waits (on this CPU thread) for the producer's copy ------------------------

void consume(const Launch*, void** args) {
  const auto* flag = arg<volatile int*>(args, 0);
  auto* result = arg<int*>(args, 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (*flag == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  *result = *flag != 0 ? 42 : -1;
}

// ---- template_kernels.cu ------------------------------------------------------------------------

struct Affine {
  float scale;
  float shift;
  int count;
};

template <class T>
void axpb(const Launch* l, void** args) {
  auto* data = arg<T*>(args, 0);
  const auto f = arg<Affine>(args, 1);
  for (int i = 0; i < covered(l, f.count); ++i) {
    data[i] = static_cast<T>(data[i] * static_cast<T>(f.scale) + static_cast<T>(f.shift));
  }
}

void apply_square(const Launch* l, void** args) {
  auto* data = arg<int*>(args, 0);
  const int n = arg<int>(args, 1);
  for (int i = 0; i < covered(l, n); ++i) data[i] = data[i] * data[i];
}

void noop(const Launch*, void**) {}

// ---- capture_rules.cu --------------------------------------------------------------------------------
void touch_first(const Launch*, void** args) { *arg<int*>(args, 0) = 1; }

// ---- the conformance harness (conformance/harness.cuh) ---------------------------------------------
void conf_noop(const Launch*, void** args) {
  if (auto* p = arg<int*>(args, 0); p != nullptr) p[0] += 1;
}
void conf_fault(const Launch*, void** args) { *arg<int*>(args, 0) = 1; }

struct Registration {
  const char* name;
  drvshim_fake_kernel_fn fn;
};

const Registration kKernels[] = {
    {"_Z5hellov", &hello},
    {"_Z9scale_addIfEvPT_PKS0_i", &scale_add_f},
    {"_Z10matrix_mulILi32EEvPfPKfS2_ii", &matrix_mul32},
    {"_Z9incrementPiii", &increment},
    {"_Z11touch_firstPi", &touch_first},
    {"_Z5touchPi", &touch},
    {"_Z9set_valuePiii", &set_value},
    {"_Z12fill_patternPiii", &fill_pattern},
    {"_Z11scale_chunkPfif", &scale_chunk},
    {"_Z11count_wrongPKfifPi", &count_wrong},
    {"_Z8convolvePfPKfi", &convolve},
    {"_Z13count_threadsv", &count_threads},
    {"_Z10fill_tablei", &fill_table},
    {"_Z9sum_tablePi", &sum_table},
    {"_Z13scale_and_sumi", &scale_and_sum},
    {"_Z8evaluatePii", &evaluate},
    {"_Z6squarePii", &square},
    {"_Z6negatePii", &negate},
    {"_Z13reverse_blockPii", &reverse_block},
    {"_Z8spin_addPiii", &spin_add},
    {"_Z12touch_windowPiii", &touch_window},
    {"_Z5saxpyfPKfPfi", &saxpy},
    {"_Z8grid_sumPKiiPiS1_", &grid_sum},
    {"_Z13cluster_ranksPi", &cluster_ranks},
    {"_Z5greeti", &greet},
    {"_Z8add_peerPfPKfi", &add_peer},
    {"_Z13add_row_indexPfmii", &add_row_index},
    {"_Z4iotaPiii", &iota},
    {"_Z3sumPKiiPy", &sum},
    {"_Z7consumePViPix", &consume},
    {"_Z4axpbIfEvPT_6Affine", &axpb<float>},
    {"_Z4axpbIdEvPT_6Affine", &axpb<double>},
    {"_Z4axpbIiEvPT_6Affine", &axpb<int>},
    {"_Z5applyI6SquareEvPiiT_", &apply_square},
    {"_Z4noopv", &noop},
    {"_ZN4conf9conf_noopEPi", &conf_noop},
    {"_ZN4conf10conf_faultEPi", &conf_fault},
};

struct RegisterAll {
  RegisterAll() {
    for (const auto& k : kKernels) drvshim_fake_register_kernel(k.name, k.fn);
  }
} g_register_all;

}  // namespace
