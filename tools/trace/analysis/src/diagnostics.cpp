// SPDX-License-Identifier: Apache-2.0
// The diagnostics: each names a pattern that explains a context-order
// problem, with a one-line explanation and fix. Those that depend on the
// state at a call are found during the model's walk (context_model.cpp);
// the rest here, over the finished model.
#include <drvshim_recorder/json_line.hpp>
#include <drvshim_trace/api_info.hpp>
#include <drvshim_trace/diagnostics.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_map>

#include "model_internal.hpp"

namespace drvshim::trace_analysis {

const std::vector<DiagnosticKind>& diagnostic_kinds() {
  static const std::vector<DiagnosticKind> kinds = {
      {"init-race",
       "cuInit ran on several threads at once: which one wins decides when and under which environment the driver "
       "starts, and a failure surfaces in whichever thread asked next",
       "initialise CUDA once, on one thread, before starting the others (cuInit(0), or cudaFree(0) for the Runtime)"},
      {"no-current-context",
       "driver calls act on the calling thread's current context; a thread has none until something makes one "
       "current, so the call fails (CUDA_ERROR_INVALID_CONTEXT) or lands in an unintended context",
       "make the context current on that thread first (cuCtxSetCurrent, or cudaSetDevice on threads that use the "
       "Runtime)"},
      {"primary-flags-after-activation",
       "primary-context flags are meant for the context's creation; on an active context older drivers refuse them "
       "(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE) and newer ones change a running context shared by every component (the "
       "Runtime refuses: cudaErrorSetOnActiveProcess)",
       "set the flags before anything activates the context (before the first Runtime call), or check "
       "cuDevicePrimaryCtxGetState first"},
      {"context-beside-primary",
       "a second context on a device has its own memory, modules and streams, does not overlap work with the primary "
       "one, and is invisible to libraries that use the Runtime",
       "retain the primary context (cuDevicePrimaryCtxRetain) instead of creating one with cuCtxCreate"},
      {"unbalanced-context-stack",
       "the caller's next call runs in whichever context a library left on top of the thread's stack, often on the "
       "wrong device",
       "pair every cuCtxPushCurrent with a cuCtxPopCurrent (a scope guard), and pop or destroy the contexts "
       "cuCtxCreate pushes"},
      {"fork-after-init",
       "fork() does not copy CUDA's state: in a child of an initialised parent every driver call fails "
       "(CUDA_ERROR_NOT_INITIALIZED) or hangs",
       "start workers with spawn/exec (multiprocessing's 'spawn', posix_spawn), or fork before anything calls cuInit"},
      {"primary-released-while-used",
       "the primary context is shared by every component of the process: a reset, or a release of a retain one did "
       "not take, destroys it with everything allocated in it while others still use it",
       "release exactly the retains you took, and never reset a primary context other components use "
       "(cudaDeviceReset in a library)"},
      {"ignored-error",
       "after a failed call its object may be unusable (a sticky error poisons the whole context); calls that go on "
       "fail far from the cause or work on garbage",
       "check every CUresult (and cudaError_t) and stop using the object, or the context, after an error"},
  };
  return kinds;
}

namespace {

const DiagnosticKind& kind_of(std::string_view id) {
  for (const auto& k : diagnostic_kinds()) {
    if (id == k.id) return k;
  }
  return diagnostic_kinds().front();
}

constexpr std::size_t kMaxEvidence = 8;

// Inputs that name the object a call works on.
const std::set<std::string_view> kObjectParams = {"ctx",    "hStream",   "hEvent",   "hmod",       "library",
                                                  "kernel", "f",         "hGraph",   "hGraphExec", "dptr",
                                                  "hfunc",  "dstDevice", "srcDevice"};

// Calls that may follow a failure on an object without ignoring it: cleanup and questions.
bool handles_failure(std::string_view base) {
  return base.find("Destroy") != std::string_view::npos || base.find("Unload") != std::string_view::npos ||
         base.find("Free") != std::string_view::npos || base.find("Release") != std::string_view::npos ||
         base.find("Reset") != std::string_view::npos || base.find("Query") != std::string_view::npos ||
         base == "cuGetErrorName" || base == "cuGetErrorString" || base == "cuCtxPopCurrent" ||
         base == "cuCtxGetCurrent";
}

void find_init_races(DiagnosticSink& sink, const Analysis& a, const ProcessInfo& p) {
  // p.inits is in time order: the calls that can overlap one are those that start before it ends.
  for (std::size_t x = 0; x < p.inits.size(); ++x) {
    for (std::size_t y = x + 1; y < p.inits.size(); ++y) {
      const Record& r1 = a.records[p.inits[x]];
      const Record& r2 = a.records[p.inits[y]];
      if (r2.ts_ns >= r1.ts_ns + r1.dur_ns) break;
      if (r1.tid == r2.tid) continue;
      const bool overlap = r2.ts_ns < r1.ts_ns + r1.dur_ns && r1.ts_ns < r2.ts_ns + r2.dur_ns;
      if (!overlap) continue;
      sink.add(
          "init-race", p, p.inits[x],
          fmt::format("cuInit ran concurrently on tid {}{} and tid {}{}", r1.tid,
                      r1.lib.empty() ? "" : " (" + r1.lib + ")", r2.tid, r2.lib.empty() ? "" : " (" + r2.lib + ")"));
      sink.add(
          "init-race", p, p.inits[y],
          fmt::format("cuInit ran concurrently on tid {}{} and tid {}{}", r1.tid,
                      r1.lib.empty() ? "" : " (" + r1.lib + ")", r2.tid, r2.lib.empty() ? "" : " (" + r2.lib + ")"));
      return;
    }
  }
}

void find_fork_use(DiagnosticSink& sink, const Analysis& a, const ProcessInfo& p) {
  if (!p.forked || !p.parent_initialized) return;
  for (std::size_t k = p.first_record; k < p.end_record; ++k) {
    const Record& r = a.records[k];
    if (r.kind != Kind::call) continue;
    const std::string_view api = r.api;
    if (api == "cuGetErrorName" || api == "cuGetErrorString" || api == "cuDriverGetVersion") continue;
    sink.add("fork-after-init", p, k,
             fmt::format("pid {} (forked from pid {} after it initialised CUDA) called {}{} -> {}", p.pid, p.ppid,
                         symbol_of(r), r.lib.empty() ? "" : " from " + r.lib, recorder::result_name(r.result)));
    return;
  }
}

// The object (input handle) a failed call worked on, "" none.
std::string failed_object(const Record& failed) {
  const ApiInfo* info = api_info(failed);
  if (info == nullptr) return {};
  const auto values = split_args(failed.args);
  for (std::size_t k = 0; k < info->params.size() && k < values.size(); ++k) {
    if (kObjectParams.count(info->params[k]) != 0 && !values[k].out && values[k].known && values[k].text != "null" &&
        values[k].text != "0x0") {
      return values[k].text;
    }
  }
  return {};
}

// Each failure on an object against the next call of the same thread that names that object. One pass:
// the failures wait (by thread and object) for the next call naming their object, so a failure that no
// call follows costs nothing more than the walk.
void find_ignored_errors(DiagnosticSink& sink, const Analysis& a, const ProcessInfo& p) {
  std::unordered_map<std::string, std::size_t> waiting;  // "tid object" -> the failure
  auto key = [](std::uint64_t tid, const std::string& object) { return fmt::format("{} {}", tid, object); };
  std::size_t e = 0;  // the next failure in p.errors (in record order)
  for (std::size_t k = p.first_record; k < p.end_record; ++k) {
    const Record& next = a.records[k];
    if (next.kind != Kind::call) continue;
    if (!waiting.empty()) {
      for (const ArgValue& v : split_args(next.args)) {
        if (v.out) continue;
        const auto it = waiting.find(key(next.tid, v.text));
        if (it == waiting.end()) continue;
        const std::size_t i = it->second;
        waiting.erase(it);
        if (handles_failure(next.api)) continue;
        const Record& failed = a.records[i];
        Diagnostic& d =
            sink.add("ignored-error", p, i,
                     fmt::format("{} on {} returned {} and tid {}{} went on with {} on the same object",
                                 symbol_of(failed), v.text, recorder::result_name(failed.result), failed.tid,
                                 failed.lib.empty() ? "" : " (" + failed.lib + ")", symbol_of(next)));
        if (d.evidence.size() < kMaxEvidence) d.evidence.push_back(k);
      }
    }
    while (e < p.errors.size() && p.errors[e] < k) ++e;
    if (e < p.errors.size() && p.errors[e] == k) {
      if (std::string object = failed_object(next); !object.empty()) waiting[key(next.tid, object)] = k;
    }
  }
}

}  // namespace

Diagnostic& DiagnosticSink::add(const char* id, const ProcessInfo& process, std::size_t evidence, std::string title) {
  auto [it, fresh] =
      index_.try_emplace(fmt::format("{}\n{}\n{}\n{}", id, process.pid, process.image, title), a_.diagnostics.size());
  if (!fresh) {
    Diagnostic& d = a_.diagnostics[it->second];
    ++d.occurrences;
    if (d.evidence.size() < kMaxEvidence &&
        std::find(d.evidence.begin(), d.evidence.end(), evidence) == d.evidence.end()) {
      d.evidence.push_back(evidence);
    }
    return d;
  }
  const DiagnosticKind& k = kind_of(id);
  Diagnostic d;
  d.id = id;
  d.title = std::move(title);
  d.explanation = k.explanation;
  d.fix = k.fix;
  d.pid = process.pid;
  d.image = process.image;
  d.evidence.push_back(evidence);
  a_.diagnostics.push_back(std::move(d));
  return a_.diagnostics.back();
}

void find_diagnostics(Analysis& a) {
  DiagnosticSink sink(a);
  for (const auto& p : a.processes) {
    find_init_races(sink, a, p);
    find_fork_use(sink, a, p);
    find_ignored_errors(sink, a, p);
  }
  // Stable order: by process, then by the first piece of evidence.
  std::stable_sort(a.diagnostics.begin(), a.diagnostics.end(), [](const Diagnostic& x, const Diagnostic& y) {
    if (x.pid != y.pid) return x.pid < y.pid;
    return x.evidence.front() < y.evidence.front();
  });
}

}  // namespace drvshim::trace_analysis
