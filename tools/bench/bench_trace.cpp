// drvshim-trace's overhead in a launch-heavy loop: the same workload run
// untraced, under `drvshim-trace --mode summary` and under `--mode full`.
//
// Workloads:
//   self        this binary's own loop on the driver API, entry points obtained
//               through cuGetProcAddress_v2 as the CUDA Runtime obtains them
//   cudart:PATH bench_launch_cudart (static cudart, <<<>>> launches)
// Method (bench_launch's): per round 200 launches of an empty kernel on one
// non-blocking stream, queued behind a 3 ms spinning kernel so the loop times
// the host cost of a launch; 71 rounds, the first 10 dropped, the median per
// run; runs of the three modes interleaved, --repeat times, the median of the
// runs reported. Goals (issue 20, on the H200): summary <= 3 %, full <= 10 %
// over untraced.
//
//   bench_trace --tracer PATH [--libcuda REAL] [--workload self|cudart:PATH] [--repeat N] [--out FILE.md]
//   bench_trace worker [--rounds N]      (the loop itself; prints ns_per_launch=...)
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench_trace_kernels_ptx.hpp"

namespace {

using Gpa = int (*)(const char*, void**, int, unsigned long long, int*);

template <class F>
F resolve(Gpa gpa, const char* name, int version) {
  void* p = nullptr;
  int status = 0;
  if (gpa(name, &p, version, 0, &status) != 0 || p == nullptr) {
    std::fprintf(stderr, "bench_trace: cannot resolve %s\n", name);
    std::exit(3);
  }
  return reinterpret_cast<F>(p);
}

#define CHECK(x)                                                   \
  do {                                                             \
    const int r_ = (x);                                            \
    if (r_ != 0) {                                                 \
      std::fprintf(stderr, "bench_trace: %s failed: %d\n", #x, r_); \
      return 1;                                                    \
    }                                                              \
  } while (0)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int worker(int rounds) {
  const char* path = std::getenv("BENCH_LIBCUDA");
  void* lib = dlopen(path != nullptr && *path != '\0' ? path : "libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "bench_trace: %s\n", dlerror());
    return 3;
  }
  auto gpa = reinterpret_cast<Gpa>(dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) return 3;
  auto init = resolve<int (*)(unsigned)>(gpa, "cuInit", 2000);
  auto retain = resolve<int (*)(void**, int)>(gpa, "cuDevicePrimaryCtxRetain", 7000);
  auto release = resolve<int (*)(int)>(gpa, "cuDevicePrimaryCtxRelease", 11000);
  auto set_current = resolve<int (*)(void*)>(gpa, "cuCtxSetCurrent", 4000);
  auto load = resolve<int (*)(void**, const void*, unsigned, void*, void*)>(gpa, "cuModuleLoadDataEx", 2010);
  auto unload = resolve<int (*)(void*)>(gpa, "cuModuleUnload", 2000);
  auto function = resolve<int (*)(void**, void*, const char*)>(gpa, "cuModuleGetFunction", 2000);
  auto stream_create = resolve<int (*)(void**, unsigned, int)>(gpa, "cuStreamCreateWithPriority", 5050);
  auto stream_destroy = resolve<int (*)(void*)>(gpa, "cuStreamDestroy", 4000);
  auto stream_sync = resolve<int (*)(void*)>(gpa, "cuStreamSynchronize", 2000);
  using Launch = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                         void**);
  auto launch = resolve<Launch>(gpa, "cuLaunchKernel", 4000);
  CHECK(init(0));
  void* ctx = nullptr;
  CHECK(retain(&ctx, 0));
  CHECK(set_current(ctx));
  void* module = nullptr;
  CHECK(load(&module, kBenchTraceKernelsPtx, 0, nullptr, nullptr));
  void* empty = nullptr;
  void* spin = nullptr;
  CHECK(function(&empty, module, "empty"));
  CHECK(function(&spin, module, "spin"));
  void* stream = nullptr;
  CHECK(stream_create(&stream, 1 /* non-blocking */, 0));
  constexpr int kPerRound = 200;
  std::vector<double> per_launch;
  unsigned long long spin_ns = 3000000ull;
  void* spin_args[] = {&spin_ns};
  for (int round = 0; round < rounds + 10; ++round) {
    CHECK(launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, spin_args, nullptr));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kPerRound; ++i) CHECK(launch(empty, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr));
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    CHECK(stream_sync(stream));
    if (round >= 10) per_launch.push_back(ns / kPerRound);
  }
  CHECK(stream_destroy(stream));
  CHECK(unload(module));
  CHECK(set_current(nullptr));
  CHECK(release(0));
  std::printf("ns_per_launch=%.1f\n", median(per_launch));
  return 0;
}

// Runs `cmd` and returns the launch cost it printed, in ns (-1 on failure).
double run_once(const std::string& cmd) {
  std::FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) return -1;
  char line[512];
  double ns = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "ns_per_launch=", 14) == 0) ns = std::atof(line + 14);
    double us = 0;
    if (std::sscanf(line, "| cudart <<<>>> | %lf us |", &us) == 1) ns = us * 1000.0;
  }
  const int status = ::pclose(f);
  return status == 0 ? ns : -1;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("bench_trace");
}

}  // namespace

int main(int argc, char** argv) {
  std::string tracer, libcuda, workload = "self", out;
  int repeat = 5;
  int rounds = 61;
  if (argc > 1 && std::strcmp(argv[1], "worker") == 0) {
    if (argc > 3 && std::strcmp(argv[2], "--rounds") == 0) rounds = std::atoi(argv[3]);
    return worker(rounds);
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--tracer") tracer = argv[i + 1];
    else if (k == "--libcuda") libcuda = argv[i + 1];
    else if (k == "--workload") workload = argv[i + 1];
    else if (k == "--repeat") repeat = std::atoi(argv[i + 1]);
    else if (k == "--rounds") rounds = std::atoi(argv[i + 1]);
    else if (k == "--out") out = argv[i + 1];
    else {
      std::fprintf(stderr, "bench_trace: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (tracer.empty() || repeat < 1 || rounds < 1) {
    std::fprintf(stderr,
                 "usage: bench_trace --tracer PATH [--libcuda REAL] [--workload self|cudart:PATH] [--repeat N] "
                 "[--rounds N] [--out FILE.md]\n");
    return 2;
  }
  std::string program;
  if (workload == "self") {
    program = self_path() + " worker --rounds " + std::to_string(rounds);
  } else if (workload.rfind("cudart:", 0) == 0) {
    program = workload.substr(7);
  } else {
    std::fprintf(stderr, "bench_trace: --workload is self or cudart:PATH, not \"%s\"\n", workload.c_str());
    return 2;
  }
  const std::string lib_opt = libcuda.empty() ? "" : " --libcuda " + libcuda;
  const std::map<std::string, std::string> commands = {
      {"untraced", (libcuda.empty() ? "" : "BENCH_LIBCUDA=" + libcuda + " ") + program},
      {"summary", tracer + " -q --mode summary" + lib_opt + " -- " + program},
      {"full", tracer + " -q --mode full" + lib_opt + " -- " + program},
  };
  const std::vector<std::string> modes = {"untraced", "summary", "full"};
  std::map<std::string, std::vector<double>> results;
  for (int r = 0; r < repeat; ++r) {
    for (std::size_t k = 0; k < modes.size(); ++k) {
      const std::string& mode = modes[(k + static_cast<std::size_t>(r)) % modes.size()];  // rotate the order
      const double ns = run_once(commands.at(mode));
      if (ns < 0) {
        std::fprintf(stderr, "bench_trace: %s run failed: %s\n", mode.c_str(), commands.at(mode).c_str());
        return 1;
      }
      results[mode].push_back(ns);
    }
  }
  const double base = median(results["untraced"]);
  std::string table = "| workload | mode | ns per launch (median of " + std::to_string(repeat) +
                      " runs) | overhead | goal |\n|---|---|---|---|---|\n";
  for (const auto& mode : modes) {
    const double m = median(results[mode]);
    const double overhead = base > 0 ? (m - base) / base * 100.0 : 0;
    const char* goal = mode == "summary" ? "<= 3 %" : mode == "full" ? "<= 10 %" : "";
    char pct[32] = "-";
    if (mode != "untraced") std::snprintf(pct, sizeof pct, "%+.1f %%", overhead);
    char row[256];
    std::snprintf(row, sizeof row, "| %s | %s | %.1f | %s | %s |\n",
                  workload.rfind("cudart:", 0) == 0 ? "cudart <<<>>>" : "driver API", mode.c_str(), m, pct, goal);
    table += row;
  }
  std::fputs(table.c_str(), stdout);
  if (!out.empty()) {
    if (std::FILE* f = std::fopen(out.c_str(), "a")) {
      std::fputs(table.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
