// SPDX-License-Identifier: Apache-2.0
// drvshim-trace's overhead in a launch-heavy loop: untraced, summary mode and
// full recording, measured so that a decision at +3 % is not noise.
//
// Workloads:
//   self        this binary's own loop on the driver API, entry points obtained
//               through cuGetProcAddress_v2 as the CUDA Runtime obtains them
//   cudart:PATH bench_launch_cudart (static cudart, <<<>>> launches)
// A round (bench_launch's method): 200 launches of an empty kernel on one
// non-blocking stream, queued behind a 3 ms spinning kernel so the loop times
// the host cost of a launch; ns per launch = the round's time / 200.
//
// Two methods, both reported with their spread:
//  - rounds interleaved in one process (self only; the default decision): the
//    worker runs under drvshim-trace and calls the kernel launch once through
//    the real driver's own entry point (untraced) and through the interposer
//    with its mode switched per round (drvshim_trace_set_mode: summary, full);
//    each group of three rounds (order rotated from group to group) gives a
//    paired overhead, summary/untraced - 1 and full/untraced - 1, so drifts of
//    the machine (clocks, other load) and differences between processes cancel.
//    --processes processes of --rounds groups each; the median overhead over all
//    groups, its 95 % confidence interval (distribution-free, from order
//    statistics) and the quartiles; the verdict against the goal uses the
//    interval: "meets" when its upper end is at or below the goal, "misses" when
//    its lower end is above it, else "undecided".
//  - whole processes interleaved: untraced, --mode summary and --mode full
//    processes in rotating order, --repeat times; the median per process, the
//    paired overhead per repetition (same repetition's untraced process), its
//    median and range. This one also sees costs outside the call (the audit
//    module, the writer thread); it is the only method for cudart:PATH.
// Goals (on the H200): summary <= 3 %, full <= 10 % over untraced.
//
// --instructions (self only; valgrind's callgrind, for the fake driver): the
// instructions executed per launch inside the timed loop, untraced / summary /
// full, each in its own process; deterministic where timings on a shared
// machine are not. The difference to untraced is the interposer's work per call.
//
//   bench_trace --tracer PATH [--libcuda REAL] [--workload self|cudart:PATH] [--processes N] [--rounds N]
//               [--repeat N] [--instructions] [--out FILE.md]
//   bench_trace worker [--rounds N] [--interleave]   (the loop itself)
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_trace_kernels_ptx.hpp"

namespace {

using Gpa = int (*)(const char*, void**, int, unsigned long long, int*);
using Launch = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                       void**);
using SetMode = int (*)(int);

constexpr int kPerRound = 200;
constexpr int kWarmup = 10;  // rounds (or groups) not counted
const char* const kModes[] = {"untraced", "summary", "full"};
constexpr int kInterposerMode[] = {0, 1, 2};  // drvshim_trace_set_mode's values

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

#define CHECK(x)                                                    \
  do {                                                              \
    const int r_ = (x);                                             \
    if (r_ != 0) {                                                  \
      std::fprintf(stderr, "bench_trace: %s failed: %d\n", #x, r_); \
      return 1;                                                     \
    }                                                               \
  } while (0)

// ---- statistics ------------------------------------------------------------------------

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double median(const std::vector<double>& v) { return quantile(v, 0.5); }

// A distribution-free 95 % confidence interval of the median: the order statistics
// n/2 -+ 0.98 sqrt(n) (normal approximation of the binomial; 1-based ranks).
std::pair<double, double> median_ci(std::vector<double> v) {
  if (v.empty()) return {0, 0};
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  const double half = 0.98 * std::sqrt(n);
  const auto rank = [&](double r) {
    const long k = std::lround(std::clamp(r, 1.0, n)) - 1;
    return v[static_cast<std::size_t>(k)];
  };
  return {rank(n / 2 - half), rank(n / 2 + 1 + half)};
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f %%", x * 100.0);
  return buf;
}

const char* verdict(double lo, double hi, double goal) {
  if (hi <= goal) return "meets";
  if (lo > goal) return "misses";
  return "undecided";
}

// ---- the worker --------------------------------------------------------------------------

// The timed part of a round (callgrind counts instructions inside this function only).
[[gnu::noinline]] double timed_launches(Launch launch, void* fn, void* stream, int& failed) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kPerRound; ++i) failed |= launch(fn, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kPerRound;
}

struct Api {
  Launch launch = nullptr;
  int (*stream_sync)(void*) = nullptr;
};

Api resolve_api(Gpa gpa) {
  return {resolve<Launch>(gpa, "cuLaunchKernel", 4000), resolve<int (*)(void*)>(gpa, "cuStreamSynchronize", 2000)};
}

// One round: the spinning kernel, then the timed launches, then wait. -1 on failure.
double round_with(const Api& api, void* spin, void* empty, void* stream) {
  unsigned long long spin_ns = 3000000ull;
  void* spin_args[] = {&spin_ns};
  if (api.launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, spin_args, nullptr) != 0) return -1;
  int failed = 0;
  const double ns = timed_launches(api.launch, empty, stream, failed);
  if (api.stream_sync(stream) != 0 || failed != 0) return -1;
  return ns;
}

int worker(int rounds, bool interleave) {
  const char* path = std::getenv("BENCH_LIBCUDA");
  void* lib = dlopen(path != nullptr && *path != '\0' ? path : "libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "bench_trace: %s\n", dlerror());
    return 3;
  }
  auto gpa = reinterpret_cast<Gpa>(dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) return 3;
  // Interleaving: the real driver's own entry points (the interposer loaded it already:
  // RTLD_NOLOAD finds it without a search the audit module would redirect) and the switch.
  Api direct;
  SetMode set_mode = nullptr;
  if (interleave) {
    const char* real = std::getenv("DRVSHIM_TRACE_REAL_LIBCUDA");
    void* real_lib = real != nullptr && *real != '\0' ? dlopen(real, RTLD_NOW | RTLD_NOLOAD) : nullptr;
    set_mode = reinterpret_cast<SetMode>(dlsym(lib, "drvshim_trace_set_mode"));
    auto real_gpa = real_lib != nullptr ? reinterpret_cast<Gpa>(dlsym(real_lib, "cuGetProcAddress_v2")) : nullptr;
    if (set_mode == nullptr || real_gpa == nullptr || set_mode(kInterposerMode[2]) < 0) {
      std::fprintf(stderr,
                   "bench_trace: --interleave needs to run under drvshim-trace (an interposer with "
                   "drvshim_trace_set_mode, the real driver already loaded: %s)\n",
                   real != nullptr ? real : "DRVSHIM_TRACE_REAL_LIBCUDA unset");
      return 3;
    }
    direct = resolve_api(real_gpa);
  }
  const Api traced = resolve_api(gpa);
  auto init = resolve<int (*)(unsigned)>(gpa, "cuInit", 2000);
  auto retain = resolve<int (*)(void**, int)>(gpa, "cuDevicePrimaryCtxRetain", 7000);
  auto release = resolve<int (*)(int)>(gpa, "cuDevicePrimaryCtxRelease", 11000);
  auto set_current = resolve<int (*)(void*)>(gpa, "cuCtxSetCurrent", 4000);
  auto load = resolve<int (*)(void**, const void*, unsigned, void*, void*)>(gpa, "cuModuleLoadDataEx", 2010);
  auto unload = resolve<int (*)(void*)>(gpa, "cuModuleUnload", 2000);
  auto function = resolve<int (*)(void**, void*, const char*)>(gpa, "cuModuleGetFunction", 2000);
  auto stream_create = resolve<int (*)(void**, unsigned, int)>(gpa, "cuStreamCreateWithPriority", 5050);
  auto stream_destroy = resolve<int (*)(void*)>(gpa, "cuStreamDestroy", 4000);
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
  if (!interleave) {
    std::vector<double> per_launch;
    for (int round = 0; round < rounds + kWarmup; ++round) {
      const double ns = round_with(traced, spin, empty, stream);
      if (ns < 0) return 1;
      if (round >= kWarmup) per_launch.push_back(ns);
    }
    std::printf("ns_per_launch=%.1f\nlaunches_timed=%d\n", median(per_launch), (rounds + kWarmup) * kPerRound);
  } else {
    // Groups of three rounds, one per mode, the order rotated from group to group.
    for (int group = 0; group < rounds + kWarmup; ++group) {
      double ns[3] = {};
      for (int k = 0; k < 3; ++k) {
        const int m = (group + k) % 3;
        if (m != 0) set_mode(kInterposerMode[m]);
        ns[m] = round_with(m == 0 ? direct : traced, spin, empty, stream);
        if (ns[m] < 0) return 1;
      }
      if (group >= kWarmup) std::printf("group %.1f %.1f %.1f\n", ns[0], ns[1], ns[2]);
    }
    set_mode(kInterposerMode[2]);
  }
  CHECK(stream_destroy(stream));
  CHECK(unload(module));
  CHECK(set_current(nullptr));
  CHECK(release(0));
  return 0;
}

// ---- the driver ----------------------------------------------------------------------------

// Runs `cmd` and returns its standard output; ok is false when it failed.
std::string run(const std::string& cmd, bool& ok) {
  std::string out;
  std::FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) {
    ok = false;
    return out;
  }
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ok = ::pclose(f) == 0;
  return out;
}

// The launch cost a process printed, in ns (-1 when none).
double launch_cost(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  double ns = -1;
  while (std::getline(in, line)) {
    if (line.rfind("ns_per_launch=", 0) == 0) ns = std::atof(line.c_str() + 14);
    double us = 0;
    if (std::sscanf(line.c_str(), "| cudart <<<>>> | %lf us |", &us) == 1) ns = us * 1000.0;
  }
  return ns;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("bench_trace");
}

struct Options {
  std::string tracer, libcuda, workload = "self", out;
  int repeat = 7;
  int rounds = 60;
  int processes = 5;
  bool instructions = false;
};

std::string traced_prefix(const Options& o, const char* mode) {
  return o.tracer + " -q --mode " + mode + (o.libcuda.empty() ? "" : " --libcuda " + o.libcuda) + " -- ";
}
std::string untraced_prefix(const Options& o) { return o.libcuda.empty() ? "" : "BENCH_LIBCUDA=" + o.libcuda + " "; }

const char* goal_text(int m) { return m == 1 ? "<= 3 %" : m == 2 ? "<= 10 %" : ""; }
double goal_of(int m) { return m == 1 ? 0.03 : 0.10; }

// Rounds interleaved in one process: returns the table rows, or "" on failure.
std::string interleaved(const Options& o, const std::string& worker_cmd, bool& ok) {
  std::vector<double> ns[3];
  std::vector<double> overhead[3];
  std::vector<double> per_process[3];  // each process's median overhead
  for (int p = 0; p < o.processes; ++p) {
    bool ran = false;
    const std::string out = run(traced_prefix(o, "full") + worker_cmd + " --interleave", ran);
    std::istringstream in(out);
    std::string line;
    std::vector<double> mine[3];
    while (std::getline(in, line)) {
      double v[3];
      if (std::sscanf(line.c_str(), "group %lf %lf %lf", &v[0], &v[1], &v[2]) != 3) continue;
      for (int m = 0; m < 3; ++m) ns[m].push_back(v[m]);
      for (int m = 1; m < 3; ++m) {
        overhead[m].push_back(v[m] / v[0] - 1);
        mine[m].push_back(v[m] / v[0] - 1);
      }
    }
    if (!ran || mine[1].empty()) {
      std::fprintf(stderr, "bench_trace: interleaved process %d failed:\n%s\n", p, out.c_str());
      ok = false;
      return {};
    }
    for (int m = 1; m < 3; ++m) per_process[m].push_back(median(mine[m]));
  }
  std::string rows;
  char row[512];
  for (int m = 0; m < 3; ++m) {
    if (m == 0) {
      std::snprintf(row, sizeof row, "| driver API | %s | rounds interleaved | %.1f | - | - | - | %zu | | |\n",
                    kModes[m], median(ns[m]), ns[m].size());
    } else {
      const auto [lo, hi] = median_ci(overhead[m]);
      const auto [pmin, pmax] = std::minmax_element(per_process[m].begin(), per_process[m].end());
      std::snprintf(row, sizeof row,
                    "| driver API | %s | rounds interleaved | %.1f | %s | %s .. %s | quartiles %s .. %s; process "
                    "medians %s .. %s | %zu | "
                    "%s | %s |\n",
                    kModes[m], median(ns[m]), pct(median(overhead[m])).c_str(), pct(lo).c_str(), pct(hi).c_str(),
                    pct(quantile(overhead[m], 0.25)).c_str(), pct(quantile(overhead[m], 0.75)).c_str(),
                    pct(*pmin).c_str(), pct(*pmax).c_str(), overhead[m].size(), goal_text(m),
                    verdict(lo, hi, goal_of(m)));
    }
    rows += row;
  }
  return rows;
}

// Whole processes interleaved (rotating order), --repeat times.
std::string whole_processes(const Options& o, const std::string& program, const std::string& label, bool& ok) {
  const std::string commands[3] = {untraced_prefix(o) + program, traced_prefix(o, "summary") + program,
                                   traced_prefix(o, "full") + program};
  std::vector<double> ns[3];
  std::vector<double> overhead[3];
  for (int r = 0; r < o.repeat; ++r) {
    double v[3] = {};
    for (int k = 0; k < 3; ++k) {
      const int m = (k + r) % 3;
      bool ran = false;
      v[m] = launch_cost(run(commands[m], ran));
      if (!ran || v[m] < 0) {
        std::fprintf(stderr, "bench_trace: %s run failed: %s\n", kModes[m], commands[m].c_str());
        ok = false;
        return {};
      }
      ns[m].push_back(v[m]);
    }
    for (int m = 1; m < 3; ++m) overhead[m].push_back(v[m] / v[0] - 1);
  }
  std::string rows;
  char row[512];
  for (int m = 0; m < 3; ++m) {
    if (m == 0) {
      std::snprintf(row, sizeof row, "| %s | %s | whole processes | %.1f | - | - | - | %zu | | |\n", label.c_str(),
                    kModes[m], median(ns[m]), ns[m].size());
    } else {
      const auto [lo, hi] = median_ci(overhead[m]);
      const auto [mn, mx] = std::minmax_element(overhead[m].begin(), overhead[m].end());
      std::snprintf(
          row, sizeof row, "| %s | %s | whole processes | %.1f | %s | %s .. %s | range %s .. %s | %zu | %s | %s |\n",
          label.c_str(), kModes[m], median(ns[m]), pct(median(overhead[m])).c_str(), pct(lo).c_str(), pct(hi).c_str(),
          pct(*mn).c_str(), pct(*mx).c_str(), overhead[m].size(), goal_text(m), verdict(lo, hi, goal_of(m)));
    }
    rows += row;
  }
  return rows;
}

// Instructions per launch inside timed_launches, one callgrind process per mode.
std::string instructions(const Options& o, const std::string& self, bool& ok) {
  const std::string dir = "/tmp/bench_trace_cg." + std::to_string(::getpid());
  const std::string valgrind =
      "valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*timed_launches*' "
      "--separate-threads=yes --callgrind-out-file=";
  double per_launch[3] = {};
  for (int m = 0; m < 3; ++m) {
    const std::string file = dir + "." + kModes[m];
    const std::string prefix = m == 0 ? untraced_prefix(o) : traced_prefix(o, kModes[m]);
    bool ran = false;
    const std::string out = run(
        prefix + valgrind + file + " " + self + " worker --rounds " + std::to_string(o.rounds) + " 2>/dev/null", ran);
    // The main thread's part (-01): the timed loop runs there only.
    std::ifstream in(file + "-01");
    std::string line;
    double ir = -1;
    while (std::getline(in, line)) {
      if (line.rfind("summary: ", 0) == 0 || line.rfind("totals: ", 0) == 0)
        ir = std::atof(line.c_str() + line.find(' '));
    }
    const auto at = out.find("launches_timed=");
    const double launches = at == std::string::npos ? 0 : std::atof(out.c_str() + at + 15);
    for (const char* suffix : {"-01", "-02", "-03", "-04", ""}) std::remove((file + suffix).c_str());
    if (!ran || ir < 0 || launches <= 0) {
      std::fprintf(stderr, "bench_trace: callgrind run (%s) failed (valgrind installed?):\n%s\n", kModes[m],
                   out.c_str());
      ok = false;
      return {};
    }
    per_launch[m] = ir / launches;
  }
  std::string rows = "| mode | instructions per launch (timed loop, callgrind) | over untraced |\n|---|---|---|\n";
  char row[256];
  for (int m = 0; m < 3; ++m) {
    std::snprintf(row, sizeof row, "| %s | %.1f | %s |\n", kModes[m], per_launch[m],
                  m == 0 ? "-" : std::to_string(std::lround(per_launch[m] - per_launch[0])).c_str());
    rows += row;
  }
  return rows;
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_trace --tracer PATH [--libcuda REAL] [--workload self|cudart:PATH] [--processes N] "
               "[--rounds N] [--repeat N] [--instructions] [--out FILE.md]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "worker") == 0) {
    int rounds = 61;
    bool interleave = false;
    for (int i = 2; i < argc; ++i) {
      if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
        rounds = std::atoi(argv[++i]);
      } else if (std::strcmp(argv[i], "--interleave") == 0) {
        interleave = true;
      } else {
        std::fprintf(stderr, "bench_trace worker: unknown option %s (accepted: --rounds N, --interleave)\n", argv[i]);
        return 2;
      }
    }
    return worker(rounds, interleave);
  }
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--instructions") {
      o.instructions = true;
      continue;
    }
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    if (k == "--tracer")
      o.tracer = v;
    else if (k == "--libcuda")
      o.libcuda = v;
    else if (k == "--workload")
      o.workload = v;
    else if (k == "--repeat")
      o.repeat = std::atoi(v);
    else if (k == "--rounds")
      o.rounds = std::atoi(v);
    else if (k == "--processes")
      o.processes = std::atoi(v);
    else if (k == "--out")
      o.out = v;
    else {
      std::fprintf(stderr, "bench_trace: unknown option %s\n", k.c_str());
      return usage();
    }
  }
  if (o.tracer.empty() || o.repeat < 1 || o.rounds < 1 || o.processes < 1) return usage();
  const bool self = o.workload == "self";
  if (!self && o.workload.rfind("cudart:", 0) != 0) {
    std::fprintf(stderr, "bench_trace: --workload is self or cudart:PATH, not \"%s\"\n", o.workload.c_str());
    return 2;
  }
  if (o.instructions && !self) {
    std::fprintf(stderr, "bench_trace: --instructions measures the self workload only\n");
    return 2;
  }
  const std::string me = self_path();
  bool ok = true;
  std::string table;
  if (o.instructions) {
    table = instructions(o, me, ok);
  } else {
    table =
        "| workload | mode | method | ns per launch (median) | overhead (median) | 95 % CI of the median | spread of "
        "the "
        "paired overheads | samples | goal | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n";
    if (self) {
      table += interleaved(o, me + " worker --rounds " + std::to_string(o.rounds), ok);
      if (ok) table += whole_processes(o, me + " worker --rounds " + std::to_string(o.rounds), "driver API", ok);
    } else {
      table += whole_processes(o, o.workload.substr(7), "cudart <<<>>>", ok);
    }
  }
  if (!ok) return 1;
  std::fputs(table.c_str(), stdout);
  if (!o.out.empty()) {
    if (std::FILE* f = std::fopen(o.out.c_str(), "a")) {
      std::fputs(table.c_str(), f);
      std::fputs("\n", f);
      std::fclose(f);
    }
  }
  return 0;
}
