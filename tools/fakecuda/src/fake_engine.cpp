// SPDX-License-Identifier: Apache-2.0
// The engine's life: its creation (never destroyed, held across fork), the
// profile and injected failures read from the environment, reset, the entry
// every fake driver function takes, and the report written at exit.
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "env.hpp"
#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

Engine* g_engine = nullptr;

}  // namespace

Engine& engine() {
  static Engine* e = [] {
    g_engine = new Engine;  // never destroyed: drvshim may call during exit
    // The engine's lock is held across fork(), so a child never inherits it
    // locked by a thread that does not exist there.
    pthread_atfork([] { g_engine->mutex.lock(); }, [] { g_engine->mutex.unlock(); },
                   [] {
                     if (g_engine->initialized) g_engine->forked_after_init = true;
                     g_engine->mutex.unlock();
                   });
    return g_engine;
  }();
  return *e;
}

void misuse(Engine& e, const std::string& what) {
  ++e.misuse;
  e.last_misuse = what;
}

std::atomic<bool> g_before_call_armed{false};

namespace {
struct BeforeCall {
  std::mutex mutex;
  std::string name;
  void (*fn)(void*) = nullptr;
  void* data = nullptr;
};
BeforeCall& before_call() {
  static auto* b = new BeforeCall;  // never destroyed: calls may come during exit
  return *b;
}
}  // namespace

void set_before_call(const char* name, void (*fn)(void*), void* data) {
  BeforeCall& b = before_call();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.name = fn != nullptr && name != nullptr ? name : "";
  b.fn = fn;
  b.data = data;
  g_before_call_armed.store(fn != nullptr);
}

void run_before_call(const char* name) {
  BeforeCall& b = before_call();
  void (*fn)(void*) = nullptr;
  void* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(b.mutex);
    if (b.fn == nullptr || b.name != name) return;
    fn = std::exchange(b.fn, nullptr);
    data = b.data;
    g_before_call_armed.store(false);
  }
  fn(data);  // unlocked: it may call the fake, and arm another hook
}

void reset_state(Engine& e) {
  for (auto& [base, a] : e.allocs) std::free(reinterpret_cast<void*>(base));
  e.allocs.clear();
  for (const auto& [base, size] : e.quarantine) std::free(reinterpret_cast<void*>(base));
  e.quarantine.clear();
  e.quarantined = 0;
  e.registered.clear();
  reset_graphs(e);
  for (FakeStream* st : e.streams) delete st;
  e.streams.clear();
  for (FakeStream* st : e.free_streams) delete st;
  e.free_streams.clear();
  e.legacy_streams.clear();
  e.recycle_handles = false;
  e.hold_new_streams = false;
  e.endless_param_info = false;
  for (FakeEvent* ev : e.events) delete ev;
  e.events.clear();
  for (FakeModule* m : e.modules) {
    for (FakeFunction* f : m->functions) delete f;
    delete m;  // its globals were freed with the allocations above
  }
  e.modules.clear();
  for (FakeModule* l : e.libraries) {
    for (FakeFunction* f : l->functions) delete f;
    delete l;
  }
  e.libraries.clear();
  for (auto* l : e.links) delete l;
  e.links.clear();
  e.launches = 0;
  e.device_used.assign(e.devices.size(), 0);
  e.peer_enabled.clear();
  e.p2p_attributes.clear();
  e.p2p_attribute_errors.clear();
  e.peer_unsupported.clear();
  if (e.profile == "trio") e.peer_unsupported = {{0, 2}, {2, 0}, {1, 2}, {2, 1}};
  if (e.profile == "oneway") e.peer_unsupported = {{1, 0}};
  e.initialized = false;
  e.primaries.assign(e.devices.size(), Primary{});
  e.live.clear();
  e.injections.clear();
  e.proc_status.clear();
  e.counts.clear();
  e.log.clear();
  e.misuse = 0;
  e.last_misuse.clear();
  e.deinitialized = false;
  e.forked_after_init = false;
  e.calls_while_deinit = 0;
  ++e.generation;
}

unsigned env_number(drvshim::detail::env::Name name, unsigned lo, unsigned hi) {
  const char* text = drvshim::detail::env::value(name);
  if (text == nullptr) return 0;
  unsigned long v = 0;
  const char* p = text;
  for (; *p >= '0' && *p <= '9' && v <= hi; ++p) v = v * 10 + static_cast<unsigned long>(*p - '0');
  if (*p != '\0' || p == text || v < lo || v > hi) {
    std::fprintf(stderr, "drvshim fake driver: %s=\"%s\" is not accepted; accepted: %s (%u to %u)\n", name.c_str(),
                 text, name.variable().accepts, lo, hi);
    std::abort();
  }
  return static_cast<unsigned>(v);
}

void ensure_profile_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    Engine& e = engine();
    std::lock_guard<std::mutex> lock(e.mutex);
    const char* env = drvshim::detail::env::value("DRVSHIM_FAKE_PROFILE");
    if (env == nullptr) {
      apply_profile(e, "discrete");
    } else if (!apply_profile(e, env)) {
      // A misspelt profile must not quietly test another machine than the one asked for.
      const auto* v = drvshim::detail::env::find("DRVSHIM_FAKE_PROFILE");
      std::fprintf(stderr, "drvshim fake driver: DRVSHIM_FAKE_PROFILE=\"%s\" is not a profile; accepted: %s\n", env,
                   v != nullptr ? v->accepts : "?");
      std::abort();
    }
    reset_state(e);
    // DRVSHIM_FAKE_FAIL=api:nth:code[,api:nth:code...]: failures injected from the
    // start (as drvshim_fake_fail_call), for testing whole programs such as the probe.
    if (const char* fail = drvshim::detail::env::value("DRVSHIM_FAKE_FAIL"); fail != nullptr) {
      std::string spec(fail);
      for (size_t start = 0; start < spec.size();) {
        const size_t end = std::min(spec.find(',', start), spec.size());
        const std::string item = spec.substr(start, end - start);
        // A malformed item or a name that never matches a call would run the program
        // without the failure it was started to see.
        const size_t c1 = item.find(':');
        const size_t c2 = c1 == std::string::npos ? std::string::npos : item.find(':', c1 + 1);
        // Decimal digits only: no sign, no space, nothing after.
        auto number = [&](size_t from, size_t to, long long& out) {
          if (from >= to || to - from > 10) return false;
          out = 0;
          for (size_t i = from; i < to; ++i) {
            if (item[i] < '0' || item[i] > '9') return false;
            out = out * 10 + (item[i] - '0');
          }
          return true;
        };
        long long nth = 0;
        long long code = 0;
        std::string problem;
        if (c2 == std::string::npos || !number(c1 + 1, c2, nth) || !number(c2 + 1, item.size(), code)) {
          problem = "is not api:nth:code with decimal numbers (such as cuMemAlloc:2:2)";
        } else if (nth < 1 || nth > 1000000) {
          problem = "has nth " + std::to_string(nth) + ": the call to fail, counted from 1";
        } else if (code < 1 || code > std::numeric_limits<int>::max()) {
          problem = "has code " + std::to_string(code) + ": a CUresult other than CUDA_SUCCESS";
        } else if (const std::string why = injection_problem(item.substr(0, c1)); !why.empty()) {
          problem = "names " + why;
        }
        if (!problem.empty()) {
          std::fprintf(stderr, "drvshim fake driver: DRVSHIM_FAKE_FAIL item '%s' %s\n", item.c_str(), problem.c_str());
          std::abort();
        }
        e.injections.push_back(Injection{item.substr(0, c1), static_cast<int>(nth - 1), static_cast<int>(code)});
        start = end + 1;
      }
    }
  });
}

// Common entry of every fake driver function: log and count the call, then
// apply the stub profile, the deinitialised switch and injected failures.
CUresult enter(Engine& e, const char* api, bool needs_init) {
  e.log.emplace_back(api);
  ++e.counts[api];
  if (in_host_function()) {
    misuse(e, std::string(api) + " called inside a host function");
    return CUDA_ERROR_NOT_PERMITTED;
  }
  if (e.stub) return CUDA_ERROR_STUB_LIBRARY;
  if (e.deinitialized) {
    ++e.calls_while_deinit;
    return CUDA_ERROR_DEINITIALIZED;
  }
  for (auto it = e.injections.begin(); it != e.injections.end(); ++it) {
    if (it->api == api || it->api == "*") {
      if (it->remaining == 0) {
        const CUresult code = static_cast<CUresult>(it->code);
        e.injections.erase(it);
        return code;
      }
      --it->remaining;
    }
  }
  if (e.forked_after_init && (needs_init || std::strcmp(api, "cuInit") == 0)) return CUDA_ERROR_NOT_INITIALIZED;
  if (needs_init && !e.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return CUDA_SUCCESS;
}

namespace {

struct ExitReport {
  ~ExitReport() {
    const char* path = drvshim::detail::env::value("DRVSHIM_FAKE_REPORT");
    if (path == nullptr || *path == '\0') return;
    Engine& e = engine();
    std::FILE* f = std::fopen(path, "w");
    if (f == nullptr) return;
    std::fprintf(f, "calls_while_deinitialized %llu\nmisuse %llu\nlive_contexts %zu\n", e.calls_while_deinit, e.misuse,
                 e.live.size());
    std::fclose(f);
  }
} g_exit_report;

}  // namespace
}  // namespace drvshim::fake
