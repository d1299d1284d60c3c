// SPDX-License-Identifier: Apache-2.0
// Start-up to first result: a host that spends T ms of its own work
// before its first kernel, timed from the process's start (the parent's clock
// just before posix_spawn; CLOCK_MONOTONIC is one clock for every process) to
// the moment the first kernel's result is back on the host, one fresh process
// per sample, the modes interleaved, medians:
//
//   cudart-lazy         the CUDA Runtime (static cudart, nvcc): initialisation inside the first call
//   drvshim-explicit    Driver::load, init, retain, Library::load after the host's work
//   drvshim-background  BackgroundInit started at main's first line, the host's work meanwhile
//   rt-lazy / rt-eager / rt-background
//                       the same nvcc program built with -cudart none on libdrvshim_cudart,
//                       DRVSHIM_RT_POLICY=lazy|eager|background
//
//   bench_startup [--samples N] [--t 0,100,300] [--devices 1[,2]] [--work busy|sleep]
//                 [--modes m1,m2,...] [--cudart PATH] [--rt PATH] [--out FILE.md]
//
// The goal: background <= 1.05 x max(T, initialisation) + one launch,
// where initialisation + one launch is drvshim-explicit at T = 0 and one launch
// is its measured first-kernel share; at T = 0, background no slower than
// explicit by more than 1 ms. Against the fake driver (DRVSHIM_LIBCUDA=<fake>,
// DRVSHIM_FAKE_INIT_DELAY_MS=100) it is a smoke test; cudart-lazy is skipped there.
//
// The child side (drvshim modes): bench_startup --child explicit|background T_MS DEVICES busy|sleep
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <drvshim/drvshim.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_startup_fatbin.hpp"
#include "startup_work.hpp"

extern char** environ;

namespace {

using bench_startup::now_ns;
using bench_startup::work;

std::span<const std::byte> fatbin() {
  return {reinterpret_cast<const std::byte*>(kBenchStartupFatbin), sizeof(kBenchStartupFatbin)};
}

// ---- the child: one sample of a drvshim mode ----------------------------------------------------

// The first kernel on each device: allocate, copy in, launch `scale`, copy back, check.
bool first_kernel(const std::vector<drvshim::ContextRef>& contexts, const drvshim::Library& library) {
  constexpr unsigned n = 1024;
  std::vector<float> host(n, 1.0f);
  std::vector<drvshim::DeviceBuffer> buffers;
  for (const auto& ctx : contexts) {
    const drvshim::Kernel kernel = library.kernel(ctx, "scale");
    buffers.push_back(drvshim::DeviceBuffer::allocate(ctx, n * sizeof(float)));
    drvshim::copy(buffers.back().as<float>(), std::span<const float>(host));
    drvshim::launch(kernel, drvshim::LaunchConfig{{(n + 255) / 256}, {256}, 0, {}, {}}, buffers.back().address(), 2.0f,
                    n, 1u);
  }
  for (std::size_t d = 0; d < buffers.size(); ++d) {
    std::vector<float> back(n, 0.0f);
    drvshim::copy(std::span<float>(back), drvshim::DeviceSpan<const float>(buffers[d].as<float>()));
    for (unsigned i = 0; i < n; ++i) {
      if (back[i] != 2.0f) {
        std::fprintf(stderr, "WRONG RESULT on device %zu at %u: %f\n", d, i, static_cast<double>(back[i]));
        return false;
      }
    }
  }
  return true;
}

int child(const std::string& mode, long long t_ms, int devices, bool busy) {
  const long long main_ns = now_ns();
  std::vector<int> ordinals;
  for (int d = 0; d < devices; ++d) ordinals.push_back(d);
  std::optional<drvshim::BackgroundInit> bg;
  if (mode == "background") {
    drvshim::BackgroundInitOptions o;
    o.primary_contexts = ordinals;
    o.libraries.push_back({"scale", {}, std::vector<std::byte>(fatbin().begin(), fatbin().end())});
    bg.emplace(drvshim::BackgroundInit::start(std::move(o)));
  }
  work(t_ms, busy);
  std::vector<drvshim::PrimaryContext> owned;
  std::vector<drvshim::ContextRef> contexts;
  std::optional<drvshim::Library> own_library;
  const drvshim::Library* library = nullptr;
  if (bg) {
    for (const int d : ordinals) contexts.push_back(bg->primary_context(d));
    library = &bg->library("scale");
  } else {
    drvshim::Driver drv = drvshim::Driver::load();
    drv.init();
    for (const int d : ordinals) owned.push_back(drv.device(d).retain_primary_context());
    own_library.emplace(drvshim::Library::load(drv, fatbin()));
    for (const auto& p : owned) contexts.push_back(p.ref());
    library = &*own_library;
  }
  const long long launch_start = now_ns();
  if (!first_kernel(contexts, *library)) return 1;
  const long long result_ns = now_ns();
  std::printf("result_ns=%lld launch_ns=%lld main_ns=%lld\n", result_ns, result_ns - launch_start, main_ns);
  std::fflush(stdout);
  // What a sample measures ends here; the teardown (releasing primary contexts
  // takes ~60 ms on the H200) is the process's own.
  std::_Exit(0);
}

// ---- the parent ---------------------------------------------------------------------------------

struct Sample {
  double total_ms = 0;    // process start to the first result
  double launch_ms = 0;   // the first kernel's share (allocate, copy in, launch, copy back)
  double premain_ms = 0;  // process start to main
};

struct Mode {
  std::string name;
  std::vector<std::string> argv;  // the program and its leading arguments
  std::vector<std::string> env;   // added to the environment
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::optional<Sample> run_one(const Mode& mode, long long t_ms, int devices, const std::string& work_kind,
                              std::string& error) {
  std::vector<std::string> args = mode.argv;
  args.push_back(std::to_string(t_ms));
  args.push_back(std::to_string(devices));
  args.push_back(work_kind);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("DRVSHIM_RT_POLICY=", 0) == 0) continue;
    env_strings.push_back(entry);
  }
  for (const auto& e : mode.env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2];
  if (pipe(out) != 0) {
    error = "pipe failed";
    return std::nullopt;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  pid_t pid = 0;
  const long long spawn_ns = now_ns();
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    error = std::string("cannot start ") + argv[0] + ": " + std::strerror(rc);
    return std::nullopt;
  }
  std::string text;
  char buf[512];
  for (ssize_t got; (got = read(out[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(got));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  long long result = 0, launch = 0, main_ns = 0;
  const auto at = text.find("result_ns=");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || at == std::string::npos ||
      std::sscanf(text.c_str() + at, "result_ns=%lld launch_ns=%lld main_ns=%lld", &result, &launch, &main_ns) != 3) {
    error = mode.name + " exited with status " + std::to_string(status) + ", output: " + text;
    return std::nullopt;
  }
  return Sample{static_cast<double>(result - spawn_ns) / 1e6, static_cast<double>(launch) / 1e6,
                static_cast<double>(main_ns - spawn_ns) / 1e6};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string here() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  path[n] = '\0';
  std::string p(path);
  return p.substr(0, p.rfind('/'));
}

int usage(const char* self) {
  std::fprintf(stderr,
               "usage: %s [--samples N] [--t 0,100,300] [--devices 1[,2]] [--work busy|sleep] [--modes m,...]\n"
               "          [--cudart PATH] [--rt PATH] [--out FILE.md]\n"
               "modes: cudart-lazy drvshim-explicit drvshim-background rt-lazy rt-eager rt-background\n",
               self);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--child") == 0) {
    if (argc != 6) return usage(argv[0]);
    try {
      return child(argv[2], std::atoll(argv[3]), std::atoi(argv[4]), std::strcmp(argv[5], "sleep") != 0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_startup --child %s: %s\n", argv[2], e.what());
      return 1;
    }
  }
  int samples = 11;
  std::vector<long long> ts = {0, 100, 300};
  std::vector<int> device_counts = {1};
  std::string work_kind = "busy";
  std::vector<std::string> wanted = {"cudart-lazy", "drvshim-explicit", "drvshim-background",
                                     "rt-lazy",     "rt-eager",         "rt-background"};
  const std::string dir = here();
  std::string cudart = dir + "/bench_startup_cudart";
  std::string rt = dir + "/bench_startup_rt";
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--samples" && has_value) {
      samples = std::atoi(argv[++i]);
    } else if (a == "--t" && has_value) {
      ts.clear();
      for (const auto& t : split(argv[++i])) ts.push_back(std::atoll(t.c_str()));
    } else if (a == "--devices" && has_value) {
      device_counts.clear();
      for (const auto& d : split(argv[++i])) device_counts.push_back(std::atoi(d.c_str()));
    } else if (a == "--work" && has_value) {
      work_kind = argv[++i];
      if (work_kind != "busy" && work_kind != "sleep") return usage(argv[0]);
    } else if (a == "--modes" && has_value) {
      wanted = split(argv[++i]);
    } else if (a == "--cudart" && has_value) {
      cudart = argv[++i];
    } else if (a == "--rt" && has_value) {
      rt = argv[++i];
    } else if (a == "--out" && has_value) {
      out_path = argv[++i];
    } else {
      return usage(argv[0]);
    }
  }
  if (samples < 1 || ts.empty() || device_counts.empty()) return usage(argv[0]);

  const std::string self = dir + "/bench_startup";
  const bool other_driver = std::getenv("DRVSHIM_LIBCUDA") != nullptr;
  std::vector<Mode> modes;
  std::string notes;
  for (const auto& name : wanted) {
    if (name == "cudart-lazy") {
      if (other_driver) {
        notes +=
            "cudart-lazy: skipped (DRVSHIM_LIBCUDA names another driver; the CUDA Runtime loads libcuda.so.1 itself)\n";
        continue;
      }
      modes.push_back({name, {cudart}, {}});
    } else if (name == "drvshim-explicit") {
      modes.push_back({name, {self, "--child", "explicit"}, {}});
    } else if (name == "drvshim-background") {
      modes.push_back({name, {self, "--child", "background"}, {}});
    } else if (name == "rt-lazy" || name == "rt-eager" || name == "rt-background") {
      modes.push_back({name, {rt}, {"DRVSHIM_RT_POLICY=" + name.substr(3)}});
    } else {
      std::fprintf(stderr, "unknown mode %s\n", name.c_str());
      return usage(argv[0]);
    }
  }

  // results[devices][t][mode]
  std::map<int, std::map<long long, std::map<std::string, std::vector<Sample>>>> results;
  int failures = 0;
  for (const int devices : device_counts) {
    // One unrecorded round first: page cache, the driver's own caches.
    for (const auto& m : modes) {
      std::string error;
      if (!run_one(m, 0, devices, work_kind, error)) {
        std::fprintf(stderr, "warm-up: %s\n", error.c_str());
        ++failures;
      }
    }
    for (const long long t : ts) {
      for (int s = 0; s < samples; ++s) {
        for (const auto& m : modes) {  // interleaved: drift hits every mode alike
          std::string error;
          if (auto sample = run_one(m, t, devices, work_kind, error)) {
            results[devices][t][m.name].push_back(*sample);
          } else {
            std::fprintf(stderr, "%s\n", error.c_str());
            ++failures;
          }
        }
      }
    }
  }

  std::string report;
  char line[512];
  std::snprintf(line, sizeof line,
                "Start-up to the first kernel's result, from process start (median of %d fresh processes per cell, "
                "modes interleaved; host work: %s)\n\n",
                samples, work_kind.c_str());
  report += line;
  report += notes;
  for (const int devices : device_counts) {
    auto& by_t = results[devices];
    std::vector<double> explicit0_total, explicit0_launch;
    for (const auto& s : by_t[ts.front()]["drvshim-explicit"]) {
      explicit0_total.push_back(s.total_ms);
      explicit0_launch.push_back(s.launch_ms);
    }
    const double launch = median(explicit0_launch);
    // Initialisation as drvshim-explicit at the smallest T shows it (T itself taken off).
    const double init = median(explicit0_total) - launch - static_cast<double>(ts.front());
    std::snprintf(line, sizeof line,
                  "\n%d device(s): initialisation I = %.1f ms (drvshim-explicit at T = %lld, less T and one launch), "
                  "one launch L = %.2f ms\n\n",
                  devices, init, ts.front(), launch);
    report += line;
    report += "| T ms | mode | median ms | min | max | to main | first kernel | goal ms | verdict |\n";
    report += "|---:|---|---:|---:|---:|---:|---:|---:|---|\n";
    for (const long long t : ts) {
      for (const auto& m : modes) {
        const auto& v = by_t[t][m.name];
        if (v.empty()) continue;
        std::vector<double> total, launch_share, premain;
        for (const auto& s : v) {
          total.push_back(s.total_ms);
          launch_share.push_back(s.launch_ms);
          premain.push_back(s.premain_ms);
        }
        const double med = median(total);
        std::string goal = "", verdict = "";
        if (m.name == "drvshim-background" || m.name == "rt-background") {
          const double g = 1.05 * std::max(static_cast<double>(t), init) + launch;
          char buf[64];
          std::snprintf(buf, sizeof buf, "%.1f", g);
          goal = buf;
          verdict = med <= g ? "meets" : "misses";
          if (t == 0 && m.name == "drvshim-background" && !by_t[0]["drvshim-explicit"].empty()) {
            std::vector<double> e;
            for (const auto& s : by_t[0]["drvshim-explicit"]) e.push_back(s.total_ms);
            std::snprintf(buf, sizeof buf, "; %+.2f ms vs explicit (goal <= +1)", med - median(e));
            verdict += buf;
          }
        }
        std::snprintf(line, sizeof line, "| %lld | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %s | %s |\n", t,
                      m.name.c_str(), med, *std::min_element(total.begin(), total.end()),
                      *std::max_element(total.begin(), total.end()), median(premain), median(launch_share),
                      goal.c_str(), verdict.c_str());
        report += line;
      }
    }
  }
  if (failures != 0) {
    std::snprintf(line, sizeof line, "\n%d sample(s) failed (see stderr)\n", failures);
    report += line;
  }
  std::fputs(report.c_str(), stdout);
  if (!out_path.empty()) {
    std::ofstream(out_path, std::ios::app) << report;
  }
  return failures == 0 ? 0 : 1;
}
