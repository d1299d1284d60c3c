// SPDX-License-Identifier: Apache-2.0
// Compile-cache benchmark: one templated kernel, up to a launchable
// kernel on device 0, timed
//   cold  : cache cleared, NVRTC compile + load + kernel lookup (NVRTC already mapped)
//   memory: the in-process tier + load + lookup
//   disk  : a fresh process (this binary, mode "disk-hit") with a warm disk
//           cache: cache open (NVRTC not loaded) + lookup + load + kernel lookup
// Each result is checked by launching the kernel once (not timed).
//   bench_compile OUTPUT.md CACHE_DIR        (the table; spawns itself for "disk")
//   bench_compile --disk-hit CACHE_DIR       (one fresh-process hit; prints ms)
#include <drvshim/drvshim.hpp>

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

drvshim::KernelSource program() {
  drvshim::KernelSource p;
  p.name = "saxpy.cu";
  p.source = R"(
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";
  p.options.standard = "c++17";
  p.name_expressions = {"saxpy<float>"};
  return p;
}

// Loads the image, finds the kernel, launches it once and checks the result.
void check_launchable(const drvshim::ContextRef& ctx, const drvshim::CachedCompile& r) {
  auto m = drvshim::Module::load(ctx, r.result.image);
  auto k = m.kernel(r.result.lowered_names.at("saxpy<float>"));
  constexpr unsigned n = 1024;
  std::vector<float> x(n, 1.0f), y(n, 2.0f);
  auto dx = drvshim::DeviceBuffer::allocate(ctx, n * 4);
  auto dy = drvshim::DeviceBuffer::allocate(ctx, n * 4);
  drvshim::copy(dx.as<float>(), std::span<const float>(x));
  drvshim::copy(dy.as<float>(), std::span<const float>(y));
  drvshim::launch(k, drvshim::LaunchConfig{{n / 256}, {256}, 0, {}, {}}, 3.0f, dx.address(), dy.address(), n);
  drvshim::copy(std::span<float>(y), drvshim::DeviceSpan<const float>(dy.as<float>()));
  if (y[0] != 5.0f || y[n - 1] != 5.0f) throw std::runtime_error("the compiled kernel computed the wrong values");
}

drvshim::CacheOptions in(const std::string& dir) {
  drvshim::CacheOptions o;
  o.directory = dir;
  return o;
}

// One fresh process: driver and primary context first (not timed), then cache
// open, lookup (or compile), module load and kernel lookup, each timed.
int fresh_process(const std::string& dir, drvshim::CacheOutcome expected) {
  auto drv = drvshim::Driver::load();
  drv.init();
  auto primary = drv.device(0).retain_primary_context();
  const auto t0 = Clock::now();
  drvshim::CompileCache cache(drvshim::NvrtcLoadOptions{}, in(dir));
  const double open_ms = ms_since(t0);
  const auto t1 = Clock::now();
  const auto r = cache.compile_for(primary.ref(), program());
  const double lookup_ms = ms_since(t1);
  const auto t2 = Clock::now();
  auto m = drvshim::Module::load(primary.ref(), r.result.image);
  (void)m.kernel(r.result.lowered_names.at("saxpy<float>"));
  const double load_ms = ms_since(t2);
  const double ms = ms_since(t0);
  if (r.outcome != expected) {
    std::fprintf(stderr, "expected %s, got %s (%s)\n", drvshim::to_string(expected), drvshim::to_string(r.outcome),
                 r.miss_reason.c_str());
    return 1;
  }
  check_launchable(primary.ref(), r);
  std::printf("%.4f %d %.4f %.4f %.4f\n", ms, cache.nvrtc_loaded() ? 1 : 0, open_ms, lookup_ms, load_ms);
  return 0;
}

struct Fresh {
  double total = 0, open = 0, lookup = 0, load = 0;
  bool nvrtc_loaded = false;
};

Fresh spawn_fresh(const char* self, const char* mode, const std::string& dir) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::string a0 = self, a1 = mode, a2 = dir;
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, self, &actions, nullptr, argv, environ) != 0) throw std::runtime_error("posix_spawn");
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  char buf[128] = {};
  const ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(std::string(mode) + " process failed");
  int loaded = 0;
  Fresh f;
  if (std::sscanf(buf, "%lf %d %lf %lf %lf", &f.total, &loaded, &f.open, &f.lookup, &f.load) != 5) {
    throw std::runtime_error("unreadable output from the " + std::string(mode) + " process");
  }
  f.nvrtc_loaded = loaded != 0;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "--disk-hit")
      return fresh_process(argv[2], drvshim::CacheOutcome::disk_hit);
    if (argc == 3 && std::string(argv[1]) == "--cold") return fresh_process(argv[2], drvshim::CacheOutcome::compiled);
    if (argc != 3) {
      std::fprintf(stderr, "usage: %s OUTPUT.md CACHE_DIR\n", argv[0]);
      return 2;
    }
    const std::string out_path = argv[1], dir = argv[2];
    auto drv = drvshim::Driver::load();
    drv.init();
    auto primary = drv.device(0).retain_primary_context();
    const auto ctx = primary.ref();
    const auto nv = drvshim::Nvrtc::load();
    std::vector<double> cold, memory, disk, fresh_cold, open, lookup, load;
    std::string target;
    bool any_loaded = false;
    for (int round = 0; round < 7; ++round) {
      // Interleaved: one cold, several memory hits, one fresh-process disk hit per round.
      drvshim::CompileCache cache(nv, in(dir));
      cache.clear();
      auto t0 = Clock::now();
      auto r = cache.compile_for(ctx, program());
      {
        auto m = drvshim::Module::load(ctx, r.result.image);
        (void)m.kernel(r.result.lowered_names.at("saxpy<float>"));
      }
      const double c = ms_since(t0);
      if (r.outcome != drvshim::CacheOutcome::compiled) throw std::runtime_error("cold run was not a compile");
      check_launchable(ctx, r);
      target = r.result.options.front();
      if (round > 0) cold.push_back(c);  // round 0 warms NVRTC's own first-use costs
      for (int i = 0; i < 9; ++i) {
        t0 = Clock::now();
        auto h = cache.compile_for(ctx, program());
        auto m = drvshim::Module::load(ctx, h.result.image);
        (void)m.kernel(h.result.lowered_names.at("saxpy<float>"));
        const double t = ms_since(t0);
        if (h.outcome != drvshim::CacheOutcome::memory_hit) throw std::runtime_error("expected a memory hit");
        memory.push_back(t);
      }
      const Fresh hit = spawn_fresh(argv[0], "--disk-hit", dir);
      disk.push_back(hit.total);
      open.push_back(hit.open);
      lookup.push_back(hit.lookup);
      load.push_back(hit.load);
      any_loaded = any_loaded || hit.nvrtc_loaded;
      cache.clear();
      fresh_cold.push_back(spawn_fresh(argv[0], "--cold", dir).total);
    }
    const double c = median(cold), m = median(memory), d = median(disk), fc = median(fresh_cold);
    std::string table = fmt::format(
        "| drvshim CompileCache ({}) | median ms | vs cold (fresh process) | vs cold (in-process) |\n"
        "|---|---:|---:|---:|\n"
        "| cold, fresh process: cache open, NVRTC load + compile, load, lookup | {:.3f} | 1x | |\n"
        "| cold, in-process (NVRTC loaded and used before) | {:.3f} | | 1x |\n"
        "| warm, in-process hit + load + lookup | {:.4f} | {:.0f}x | {:.0f}x |\n"
        "| warm, on-disk hit in a fresh process (NVRTC {}) | {:.4f} | {:.0f}x | {:.0f}x |\n"
        "| ... of which cache open / hit / module load + kernel lookup | {:.4f} / {:.4f} / {:.4f} | | |\n"
        "(cold: {} fresh processes and {} in-process runs; in-process hits: {}; fresh-process hits: {}; "
        "every result launched and checked)\n",
        target, fc, c, m, fc / m, c / m, any_loaded ? "loaded" : "not loaded", d, fc / d, c / d, median(open),
        median(lookup), median(load), fresh_cold.size(), cold.size(), memory.size(), disk.size());
    std::fputs(table.c_str(), stdout);
    std::ofstream(out_path, std::ios::app) << table;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_compile: %s\n", e.what());
    return 1;
  }
}
