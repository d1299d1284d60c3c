// SPDX-License-Identifier: Apache-2.0
// Transfer benchmark: host-to-device and device-to-host copies of 1, 16 and
// 256 MiB from pinned, pageable, registered and mapped host memory, through
// drvshim and through the raw driver function side by side in one run.
//
// Method: random data (never zeros); 3 warm-up copies per case; then
// repetitions in which the drvshim copy and the raw copy alternate (their order
// flips every repetition); each copy is synchronous, so a steady-clock
// interval around it is its full cost; medians of the repetitions. Every driver
// result is checked, and each case's data is verified after timing.
//
// The "raw" baseline is libcuda's cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2 resolved by
// this program itself through cuGetProcAddress_v2 (the same loaded library
// drvshim uses), called with the same context current.
#include <dlfcn.h>

#include <drvshim/drvshim.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using RawHtoD = int (*)(std::uint64_t, const void*, std::size_t);
using RawDtoH = int (*)(void*, std::uint64_t, std::size_t);
using GetProc = int (*)(const char*, void**, int, std::uint64_t, int*);

struct Raw {
  RawHtoD htod = nullptr;
  RawDtoH dtoh = nullptr;
};

Raw resolve_raw() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) throw std::runtime_error(std::string("dlopen libcuda.so.1: ") + dlerror());
  auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get == nullptr) throw std::runtime_error("no cuGetProcAddress_v2");
  Raw raw;
  int status = 0;
  void* p = nullptr;
  if (get("cuMemcpyHtoD", &p, 3020, 1, &status) != 0 || status != 0 || p == nullptr) throw std::runtime_error("HtoD");
  raw.htod = reinterpret_cast<RawHtoD>(p);
  if (get("cuMemcpyDtoH", &p, 3020, 1, &status) != 0 || status != 0 || p == nullptr) throw std::runtime_error("DtoH");
  raw.dtoh = reinterpret_cast<RawDtoH>(p);
  return raw;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void fill_random(void* p, std::size_t bytes, std::uint32_t seed) {
  std::mt19937 gen(seed);
  auto* w = static_cast<std::uint32_t*>(p);
  for (std::size_t i = 0; i < bytes / 4; ++i) w[i] = static_cast<std::uint32_t>(gen()) | 1u;
}

void check(int r, const char* what) {
  if (r != 0) throw std::runtime_error(std::string(what) + " failed with CUresult " + std::to_string(r));
}

}  // namespace

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : nullptr;
  try {
    auto drv = drvshim::Driver::load();
    drv.init();
    auto dev = drv.device(0);
    auto primary = dev.retain_primary_context();
    const auto ctx = primary.ref();
    drvshim::ScopedCurrentContext current(ctx);
    const Raw raw = resolve_raw();

    const std::size_t max_bytes = std::size_t{256} << 20;
    auto device = drvshim::DeviceBuffer::allocate(ctx, max_bytes);
    auto pinned = drvshim::PinnedBuffer::allocate(ctx, max_bytes);
    auto mapped = drvshim::MappedBuffer::allocate(ctx, max_bytes);
    std::vector<std::uint8_t> pageable(max_bytes);
    std::vector<std::uint8_t> registered_storage(max_bytes);
    auto registered = drvshim::RegisteredRange::register_range(ctx, registered_storage.data(), max_bytes);
    struct Source {
      const char* name;
      std::uint8_t* data;
    } sources[] = {{"pinned", static_cast<std::uint8_t*>(pinned.data())},
                   {"pageable", pageable.data()},
                   {"registered", registered_storage.data()},
                   {"mapped", static_cast<std::uint8_t*>(mapped.data())}};
    for (auto& s : sources) fill_random(s.data, max_bytes, 7);

    std::string table =
        "| direction | host memory | size | drvshim median | raw median | drvshim GB/s | raw GB/s | drvshim vs raw |\n"
        "|---|---|---|---|---|---|---|---|\n";
    std::vector<std::uint8_t> check_buf(max_bytes);
    for (const std::size_t mib : {1u, 16u, 256u}) {
      const std::size_t bytes = mib << 20;
      const int reps = mib == 1 ? 101 : mib == 16 ? 41 : 11;
      for (const bool h2d : {true, false}) {
        for (auto& s : sources) {
          auto span_dev = device.as<std::uint8_t>().subspan(0, bytes);
          std::span<std::uint8_t> host(s.data, bytes);
          const auto via_drvshim = [&] {
            if (h2d) {
              drvshim::copy(span_dev, std::span<const std::uint8_t>(host));
            } else {
              drvshim::copy(host, drvshim::DeviceSpan<const std::uint8_t>(span_dev));
            }
          };
          const auto via_raw = [&] {
            if (h2d) {
              check(raw.htod(device.address(), s.data, bytes), "cuMemcpyHtoD_v2");
            } else {
              check(raw.dtoh(s.data, device.address(), bytes), "cuMemcpyDtoH_v2");
            }
          };
          if (!h2d) drvshim::copy(span_dev, std::span<const std::uint8_t>(host));  // device holds the data
          for (int w = 0; w < 3; ++w) {
            via_drvshim();
            via_raw();
          }
          std::vector<double> t_drvshim;
          std::vector<double> t_raw;
          for (int r = 0; r < reps; ++r) {
            if (r % 2 == 0) {
              t_drvshim.push_back(seconds(via_drvshim));
              t_raw.push_back(seconds(via_raw));
            } else {
              t_raw.push_back(seconds(via_raw));
              t_drvshim.push_back(seconds(via_drvshim));
            }
          }
          // Verify: the device holds what the host has (both directions leave them equal).
          drvshim::copy(std::span<std::uint8_t>(check_buf.data(), bytes),
                        drvshim::DeviceSpan<const std::uint8_t>(span_dev));
          if (std::memcmp(check_buf.data(), s.data, bytes) != 0) throw std::runtime_error("data mismatch");
          const double md = median(t_drvshim);
          const double mr = median(t_raw);
          char line[256];
          std::snprintf(line, sizeof line, "| %s | %s | %zu MiB | %.3f ms | %.3f ms | %.1f | %.1f | %+.2f %% |\n",
                        h2d ? "H2D" : "D2H", s.name, mib, md * 1e3, mr * 1e3, static_cast<double>(bytes) / md / 1e9,
                        static_cast<double>(bytes) / mr / 1e9, (md / mr - 1.0) * 100.0);
          table += line;
          std::fputs(line, stdout);
          std::fflush(stdout);
        }
      }
    }
    if (out_path != nullptr) {
      if (std::FILE* f = std::fopen(out_path, "w")) {
        std::fputs(table.c_str(), f);
        std::fclose(f);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_transfers: %s\n", e.what());
    return 1;
  }
  return 0;
}
