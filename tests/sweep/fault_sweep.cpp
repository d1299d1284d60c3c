// SPDX-License-Identifier: Apache-2.0
// The fault-injection sweep (curl's and SQLite's torture idea): for each
// public scenario, the driver calls it makes against the fake are listed from
// a clean run; then the scenario runs again once per call with that call
// failing. Every run must end in a typed drvshim error naming the failed call
// (or in a recovery listed below), with no crash, the context stack as it
// was, nothing leaked once the objects are gone, and the objects usable again
// (or cleanly unusable: a typed error) afterwards. Each run is a forked child
// (a crash is then a finding, not the end of the sweep); the parent never
// touches the driver.
//
//   drvshim_fault_sweep [--verbose] [scenario-name-substring]
//
// Prints "N scenarios, M injected failures, C crashes, L leaks, P problems"
// and exits non-zero when C, L or P is not 0.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>
#include <drvshim/drvshim.hpp>
#include <drvshim/runtime_compat.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <drvshim/fakecuda.h>
#include "vadd_ptx.hpp"

using namespace drvshim;

namespace {

// CUDA_ERROR_UNKNOWN: not sticky (the context survives), and no API uses it as
// an answer with a meaning (as cuDeviceGetAttribute and cuFuncGetParamInfo
// use CUDA_ERROR_INVALID_VALUE: "unknown attribute", "no more parameters").
constexpr int kInjectedCode = 999;

// What a scenario may hold across its body: set up once per run, not swept.
struct World {
  std::optional<Driver> driver;
  std::optional<PrimaryContext> primary;
  ContextRef ctx() const { return primary->ref(); }
};

struct Scenario {
  const char* name;
  const char* profile;
  bool needs_context;  // setup: load, init and retain device 0's primary context
  std::function<void(World&)> body;
  // runtime_compat makes the device's primary context current on the calling
  // thread, as the CUDA Runtime does: its stack is meant to change.
  bool keeps_stack = true;
};

// ---- the scenarios: public API only --------------------------------------------------------------

constexpr const char* kPtx = drvshim_test::kVaddPtx;

std::span<const std::byte> ptx_bytes() { return std::as_bytes(std::span<const char>(kPtx, std::strlen(kPtx))); }

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("wrong result: ") + what);
}

std::vector<Scenario> scenarios() {
  std::vector<Scenario> s;
  s.push_back({"init and contexts", "dual", false, [](World&) {
                 Driver drv = Driver::load();
                 drv.init();
                 check(drv.device_count() == 2, "two devices");
                 const Device d0 = drv.device(0);
                 (void)d0.name();
                 (void)d0.attribute(DeviceAttribute::max_threads_per_block);
                 (void)d0.host_mapping();
                 (void)d0.can_access_peer(drv.device(1));
                 d0.set_primary_context_flags(ContextFlags::sched_blocking_sync);
                 PrimaryContext p = d0.retain_primary_context();
                 (void)p.ref().memory_info();
                 (void)p.ref().flags();
                 {
                   ScopedCurrentContext guard(p.ref());
                   (void)drv.current_context();
                 }
                 Context c = drv.device(1).create_context();
                 (void)c.ref().memory_info();
                 c.ref().synchronize();
                 c.destroy();
                 p.release();
                 d0.set_primary_context_flags(ContextFlags::sched_auto);
               }});
  s.push_back({"device memory and copies", "discrete", true, [](World& w) {
                 std::vector<std::uint32_t> host(4096, 7), back(4096, 0);
                 auto a = DeviceBuffer::allocate(w.ctx(), host.size() * 4);
                 auto b = DeviceBuffer::allocate(w.ctx(), host.size() * 4);
                 fill(a.as<std::uint32_t>(), 1u);
                 copy(a.as<std::uint32_t>(), std::span<const std::uint32_t>(host));
                 copy(b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
                 copy(std::span<std::uint32_t>(back), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
                 check(back == host, "round trip");
                 auto st = Stream::create(w.ctx());
                 fill_async(st.ref(), a.as<std::uint32_t>(), 3u);
                 copy_async(st.ref(), b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
                 copy_async(st.ref(), std::span<std::uint32_t>(back),
                            DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
                 st.ref().synchronize();
                 check(back[0] == 3, "async round trip");
                 (void)inspect_pointer(*w.driver, a.address());
                 a.free();
                 b.free();
               }});
  s.push_back({"pinned, mapped, registered, managed memory", "discrete", true, [](World& w) {
                 auto pinned = PinnedBuffer::allocate(w.ctx(), 1 << 16, HostAllocFlags::portable);
                 auto mapped = MappedBuffer::allocate(w.ctx(), 1 << 16);
                 (void)mapped.device_address();
                 std::vector<std::byte> pageable(1 << 16);
                 auto reg = RegisteredRange::register_range(w.ctx(), pageable.data(), pageable.size());
                 auto managed = ManagedBuffer::allocate(w.ctx(), 1 << 16);
                 reg.unregister();
                 managed.free();
                 mapped.free();
                 pinned.free();
               }});
  s.push_back({"stream-ordered allocation", "discrete", true, [](World& w) {
                 auto st = Stream::create(w.ctx());
                 auto buf = AsyncDeviceBuffer::allocate(st.ref(), 1 << 16);
                 fill_async(st.ref(), buf.as<std::uint8_t>(), std::uint8_t{1});
                 buf.free();
                 st.ref().synchronize();
               }});
  s.push_back({"streams, events and host functions", "discrete", true, [](World& w) {
                 auto a = Stream::create(w.ctx());
                 auto b = Stream::create(w.ctx(), StreamFlags::blocking, -1);
                 auto start = Event::create(w.ctx());
                 auto end = Event::create(w.ctx());
                 auto mark = Event::create(w.ctx(), EventFlags::disable_timing);
                 start.ref().record(a.ref());
                 auto ran = std::make_shared<int>(0);
                 a.ref().launch_host_func([ran] { ++*ran; });
                 mark.ref().record(a.ref());
                 b.ref().wait(mark.ref());
                 end.ref().record(a.ref());
                 (void)a.ref().query();
                 end.ref().synchronize();
                 (void)end.ref().query();
                 (void)elapsed(start.ref(), end.ref());
                 b.ref().synchronize();
                 a.ref().synchronize();
                 check(*ran == 1, "the host function ran");
                 w.ctx().synchronize();
                 b.destroy();
                 a.destroy();
               }});
  s.push_back({"module load and launch", "discrete", true, [](World& w) {
                 auto m = Module::load(w.ctx(), ptx_bytes());
                 const Kernel k = m.kernel("vadd");
                 (void)k.registers();
                 (void)k.max_threads_per_block();
                 auto a = DeviceBuffer::allocate(w.ctx(), 1024 * 4);
                 launch(k, LaunchConfig{{4}, {256}, 0, {}, {}}, a.address(), a.address(), a.address(), 1024u);
                 (void)m.global<std::uint32_t>("counter");
                 w.ctx().synchronize();
                 m.unload();
                 auto lib = Library::load(*w.driver, ptx_bytes());
                 const Kernel lk = lib.kernel(w.ctx(), "vadd");
                 launch(lk, LaunchConfig{{4}, {256}, 0, {}, {}}, a.address(), a.address(), a.address(), 1024u);
                 w.ctx().synchronize();
               }});
  s.push_back({"NVRTC and the compile cache (PTX linked by the driver)", "discrete", true, [](World& w) {
                 KernelSource program;
                 program.name = "sweep.cu";
                 program.source =
                     "extern \"C\" __global__ void vadd(const float* a, const float* b, float* c, unsigned n) "
                     "{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }";
                 CompileCache cache(NvrtcLoadOptions{});
                 const CachedCompile result = cache.compile_for(w.ctx(), program);
                 auto m = Module::load(w.ctx(), result.result.image);
                 (void)m.kernel("vadd");
               }});
  s.push_back({"staged copies, synchronous", "discrete", true, [](World& w) {
                 PinnedPool pool(w.ctx());
                 StagingOptions o;
                 o.threads = 2;
                 o.chunk_bytes = 1 << 20;
                 o.spin = std::chrono::microseconds(0);
                 StagingEngine engine(pool, o);
                 std::vector<std::byte> src(3 << 20, std::byte{5}), back(3 << 20);
                 auto dev = DeviceBuffer::allocate(w.ctx(), src.size());
                 engine.copy_to_device(dev.as<std::byte>(), src);
                 engine.copy_to_host(back, DeviceSpan<const std::byte>(dev.as<std::byte>()));
                 check(back == src, "staged round trip");
               }});
  s.push_back({"staged copies, stream-ordered", "discrete", true, [](World& w) {
                 PinnedPool pool(w.ctx());
                 StagingOptions o;
                 o.threads = 2;
                 o.chunk_bytes = 1 << 20;
                 o.spin = std::chrono::microseconds(0);
                 StagingEngine engine(pool, o);
                 auto st = Stream::create(w.ctx());
                 std::vector<std::byte> src(3 << 20, std::byte{6}), back(3 << 20);
                 auto dev = DeviceBuffer::allocate(w.ctx(), src.size());
                 engine.copy_to_device_async(dev.as<std::byte>(), src, st.ref());
                 engine.copy_to_host_async(back, DeviceSpan<const std::byte>(dev.as<std::byte>()), st.ref());
                 st.ref().synchronize();
                 check(back == src, "staged round trip");
               }});
  s.push_back({"pinned pool", "discrete", true, [](World& w) {
                 PinnedPoolOptions o;
                 o.thread_cache = false;
                 PinnedPool pool(w.ctx(), o);
                 auto st = Stream::create(w.ctx());
                 auto a = pool.acquire(1 << 20);
                 a.release_after(st.ref());
                 auto b = pool.acquire(1 << 20);
                 b.release();
                 st.ref().synchronize();
                 (void)pool.acquire(1 << 20);
                 (void)pool.trim(0);
               }});
  s.push_back({"runtime_compat: the Runtime API's lazy policy", "discrete", false,
               [](World&) {
                 namespace rt = drvshim::rt;
                 rt::set_policy(rt::Policy::lazy);
                 auto must = [](cudaError_t e, const char* what) {
                   if (e != cudaSuccess) {
                     const std::string message =
                         std::string(what) + " returned " + cudaGetErrorName(e) + ": " + rt::last_error_detail();
                     // As under cudart, a failed initialisation is the process's for good: the runtime
                     // is shut down so that the run after the fault starts it again.
                     rt::shutdown();
                     throw std::runtime_error(message);
                   }
                 };
                 int count = 0;
                 must(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
                 must(cudaSetDevice(0), "cudaSetDevice");
                 void* p = nullptr;
                 must(cudaMalloc(&p, 4096), "cudaMalloc");
                 std::vector<std::uint8_t> host(4096, 1);
                 must(cudaMemcpy(p, host.data(), 4096, cudaMemcpyHostToDevice), "cudaMemcpy");
                 cudaStream_t st = nullptr;
                 must(cudaStreamCreate(&st), "cudaStreamCreate");
                 must(cudaMemcpyAsync(host.data(), p, 4096, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
                 must(cudaStreamSynchronize(st), "cudaStreamSynchronize");
                 must(cudaStreamDestroy(st), "cudaStreamDestroy");
                 must(cudaFree(p), "cudaFree");
                 must(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
                 rt::shutdown();
               },
               false});
  return s;
}

// ---- running one scenario in a child -------------------------------------------------------------

// Calls that release something: when one fails, what it would have released
// stays with the driver (which ledger may then show it).
const std::map<std::string, std::set<std::string>>& release_calls() {
  static const std::map<std::string, std::set<std::string>> m = {
      {"cuMemFree", {"device"}},
      {"cuMemFreeAsync", {"device"}},
      {"cuMemFreeHost", {"pinned"}},
      {"cuMemHostUnregister", {"registrations"}},
      {"cuStreamDestroy", {"streams"}},
      {"cuEventDestroy", {"events"}},
      {"cuModuleUnload", {"modules", "device"}},  // a module's globals are device memory
      {"cuLibraryUnload", {"modules", "device"}},
      {"cuCtxDestroy", {"contexts"}},
      {"cuDevicePrimaryCtxRelease", {"primary"}},
  };
  return m;
}

// Failures drvshim recovers from by design (docs/reliability.md says how),
// so the scenario completes: (api, why).
const std::map<std::string, std::string>& recoveries() {
  static const std::map<std::string, std::string> m = {
      {"cuEventQuery", "the pool treats an unanswerable event as not ready (the error belongs to its stream)"},
      {"cuFuncGetParamInfo", "an unknown parameter layout means unchecked launches"},
      {"cuModuleGetLoadingMode", "read for the log only"},
      {"cuDeviceGetUuid", "optional: reported as unknown"},
      {"cuCtxGetId", "optional: used for names only"},
      {"cuMemHostAlloc", "the pool frees its cached blocks and tries once more"},
      {"cuLinkDestroy", "cleanup of a finished link: logged"},
      {"cuMemFree", "a no-throw release: logged and returned as Status"},
      {"cuMemFreeAsync", "a no-throw release: logged"},
      {"cuMemFreeHost", "a no-throw release: logged"},
      {"cuStreamDestroy", "a no-throw release: logged"},
      {"cuEventDestroy", "a no-throw release: logged"},
      {"cuModuleUnload", "a no-throw release: logged"},
      {"cuLibraryUnload", "a no-throw release: logged"},
      {"cuMemHostUnregister", "a no-throw release: logged"},
      {"cuDevicePrimaryCtxRelease", "a no-throw release: logged"},
      {"cuCtxGetCurrent", "ContextScope tries a failed context switch once more"},
      {"cuCtxPushCurrent", "ContextScope tries a failed context switch once more"},
      {"cuCtxPopCurrent", "ContextScope tries a failed context switch once more"},
      {"cuGetProcAddress",
       "Driver::load: an optional function is reported missing (a required one fails the load with "
       "DriverTooOldError naming it)"},
  };
  return m;
}

struct Ledgers {
  int contexts, device, pinned, registrations, streams, events, modules, primary;
  unsigned long long misuse;
};
Ledgers read_ledgers() {
  return Ledgers{drvshim_fake_live_contexts(),
                 drvshim_fake_live_device_allocations(),
                 drvshim_fake_live_pinned_allocations(),
                 drvshim_fake_live_registrations(),
                 drvshim_fake_live_streams(),
                 drvshim_fake_live_events(),
                 drvshim_fake_live_modules(),
                 std::max(0, drvshim_fake_primary_refcount(0)) + std::max(0, drvshim_fake_primary_refcount(1)),
                 drvshim_fake_misuse_count()};
}

std::string leak_text(const Ledgers& l, const std::set<std::string>& allowed) {
  std::string out;
  auto add = [&](const char* what, int n) {
    if (n != 0 && allowed.count(what) == 0)
      out += std::string(out.empty() ? "" : ", ") + what + " " + std::to_string(n);
  };
  add("contexts", l.contexts);
  add("device", l.device);
  add("pinned", l.pinned);
  add("registrations", l.registrations);
  add("streams", l.streams);
  add("events", l.events);
  add("modules", l.modules);
  add("primary", l.primary);
  return out;
}

enum ChildCode { kOk = 0, kProblem = 10, kLeak = 11, kNotReached = 12 };

// Runs `body` with the nth call of `api` failing (api empty: a clean run that
// writes its call log to `out`). Writes one line about what happened to `out`.
int run_in_child(const Scenario& sc, const std::string& api, int nth, int out) {
  auto say = [out](const std::string& text) {
    const std::string line = text + "\n";
    (void)!write(out, line.data(), line.size());
  };
  drvshim_fake_set_profile(sc.profile);
  World w;
  try {
    if (sc.needs_context) {
      w.driver.emplace(Driver::load());
      w.driver->init();
      w.primary.emplace(w.driver->device(0).retain_primary_context());
    }
  } catch (const std::exception& e) {
    say(std::string("setup failed: ") + e.what());
    return kProblem;
  }
  const int depth = drvshim_fake_ctx_stack_depth();
  void* top = drvshim_fake_ctx_stack_top();
  drvshim_fake_clear_call_log();
  if (!api.empty()) drvshim_fake_fail_call(api.c_str(), nth, kInjectedCode);
  std::string outcome;
  bool problem = false;
  try {
    sc.body(w);
    if (api.empty()) {
      for (size_t i = 0; i < drvshim_fake_call_log_size(); ++i)
        say(std::string("call ") + drvshim_fake_call_log_entry(i));
    } else if (drvshim_fake_pending_injections() != 0) {
      drvshim_fake_clear_injections();
      say("not reached (timing-dependent call)");
      return kNotReached;
    } else if (recoveries().count(api) != 0) {
      outcome = "recovered: " + recoveries().at(api);
    } else {
      outcome = "completed although " + api + " failed (swallowed?)";
      problem = true;
    }
  } catch (const Error& e) {
    const std::string what = e.what();
    if (api.empty()) {
      say(std::string("clean run threw: ") + what);
      return kProblem;
    }
    if (api == "cuGetProcAddress" && e.kind() == ErrorKind::driver_too_old) {
      outcome = "typed error naming the function that could not be resolved";
    } else if (what.find(api) == std::string::npos) {
      outcome = "typed error not naming " + api + ": " + what;
      problem = true;
    } else {
      outcome = "typed error naming the call";
    }
  } catch (const std::exception& e) {
    outcome = std::string("not a drvshim error: ") + e.what();
    problem = api.empty() || std::string(e.what()).find(api) == std::string::npos;
  }
  drvshim_fake_clear_injections();  // nothing pending for what follows
  if (sc.keeps_stack && (drvshim_fake_ctx_stack_depth() != depth || drvshim_fake_ctx_stack_top() != top)) {
    outcome += "; the context stack changed";
    problem = true;
  }
  // Usable again, or cleanly unusable (a typed error).
  if (!api.empty()) {
    try {
      sc.body(w);
      outcome += "; usable afterwards";
    } catch (const Error& e) {
      outcome += std::string("; cleanly unusable afterwards (") + e.what() + ")";
    } catch (const std::exception& e) {
      outcome += std::string("; afterwards: not a drvshim error: ") + e.what();
      problem = true;
    }
  }
  // The ledgers are read while the world's context still lives: a context that
  // goes takes its objects with it and would hide what a scenario leaked.
  const auto it = release_calls().find(api);
  const std::set<std::string> allowed = it != release_calls().end() ? it->second : std::set<std::string>{};
  Ledgers now = read_ledgers();
  if (sc.needs_context) --now.primary;  // the world's own retain
  const std::string leaks = leak_text(now, allowed);
  w.primary.reset();
  w.driver.reset();
  if (drvshim_fake_misuse_count() != 0) {
    outcome += std::string("; driver misuse: ") + drvshim_fake_last_misuse();
    problem = true;
  }
  say(outcome + (leaks.empty() ? "" : "; LEAKED " + leaks));
  if (!leaks.empty()) return kLeak;
  return problem ? kProblem : kOk;
}

struct ChildResult {
  int code;  // exit code, or 128 + signal
  std::vector<std::string> lines;
};

ChildResult fork_and_run(const Scenario& sc, const std::string& api, int nth) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(60);
    const int code = run_in_child(sc, api, nth, fds[1]);
    close(fds[1]);
    _exit(code);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ChildResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), {}};
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    r.lines.push_back(text.substr(at, end - at));
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--verbose") == 0) {
      verbose = true;
    } else {
      only = argv[i];
    }
  }
  // Each child compiles in a cache of its own making; this keeps them out of ~/.cache.
  const std::string cache_dir = std::filesystem::temp_directory_path() / ("drvshim-sweep-" + std::to_string(getpid()));
  setenv("DRVSHIM_CACHE_DIR", cache_dir.c_str(), 1);
  setenv("DRVSHIM_FAKE_CC", "101", 1);  // NVRTC compiles PTX, the driver links it: cuLink* are swept too
  setenv("DRVSHIM_LOG", "off", 1);
  int scenarios_run = 0, injected = 0, crashes = 0, leaks = 0, problems = 0, not_reached = 0;
  for (const Scenario& sc : scenarios()) {
    if (!only.empty() && std::string(sc.name).find(only) == std::string::npos) continue;
    ++scenarios_run;
    const ChildResult clean = fork_and_run(sc, "", 0);
    if (clean.code != 0) {
      std::printf("[%s] the clean run failed (exit %d): %s\n", sc.name, clean.code,
                  clean.lines.empty() ? "" : clean.lines.back().c_str());
      ++problems;
      continue;
    }
    std::vector<std::pair<std::string, int>> calls;
    std::map<std::string, int> seen;
    for (const auto& line : clean.lines) {
      if (line.rfind("call ", 0) != 0) continue;
      const std::string api = line.substr(5);
      calls.emplace_back(api, ++seen[api]);
    }
    int scenario_problems = 0;
    for (const auto& [api, nth] : calls) {
      const ChildResult r = fork_and_run(sc, api, nth);
      const std::string detail = r.lines.empty() ? "(no report)" : r.lines.back();
      if (r.code == kNotReached) {
        ++not_reached;
        continue;
      }
      ++injected;
      const bool bad = r.code != kOk;
      if (r.code >= 128) {
        ++crashes;
      } else if (r.code == kLeak) {
        ++leaks;
      } else if (r.code != kOk) {
        ++problems;
      }
      scenario_problems += bad ? 1 : 0;
      if (bad || verbose) {
        std::printf("[%s] %s #%d: %s%s\n", sc.name, api.c_str(), nth,
                    r.code >= 128 ? ("CRASHED (signal " + std::to_string(r.code - 128) + ") ").c_str() : "",
                    detail.c_str());
      }
    }
    std::printf("[%s] %zu driver calls, %d problem(s)\n", sc.name, calls.size(), scenario_problems);
  }
  std::error_code ec;
  std::filesystem::remove_all(cache_dir, ec);
  std::printf(
      "%d scenarios, %d injected failures, %d crashes, %d leaks, %d problems (%d timing-dependent calls not "
      "reached)\n",
      scenarios_run, injected, crashes, leaks, problems, not_reached);
  return crashes + leaks + problems == 0 ? 0 : 1;
}
