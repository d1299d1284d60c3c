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
       "pair every cuCtxPushCurrent with a cuCtxPopCurrent in the same library (a scope guard), and pop or destroy "
       "the contexts it creates"},
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

void find_init_races(Analysis& a, const ProcessInfo& p) {
  for (std::size_t x = 0; x < p.inits.size(); ++x) {
    for (std::size_t y = x + 1; y < p.inits.size(); ++y) {
      const Record& r1 = a.records[p.inits[x]];
      const Record& r2 = a.records[p.inits[y]];
      if (r1.tid == r2.tid) continue;
      const bool overlap = r2.ts_ns < r1.ts_ns + r1.dur_ns && r1.ts_ns < r2.ts_ns + r2.dur_ns;
      if (!overlap) continue;
      add_diagnostic(
          a, "init-race", p.pid, p.inits[x],
          fmt::format("cuInit ran concurrently on tid {}{} and tid {}{}", r1.tid,
                      r1.lib.empty() ? "" : " (" + r1.lib + ")", r2.tid, r2.lib.empty() ? "" : " (" + r2.lib + ")"));
      add_diagnostic(
          a, "init-race", p.pid, p.inits[y],
          fmt::format("cuInit ran concurrently on tid {}{} and tid {}{}", r1.tid,
                      r1.lib.empty() ? "" : " (" + r1.lib + ")", r2.tid, r2.lib.empty() ? "" : " (" + r2.lib + ")"));
      return;
    }
  }
}

void find_fork_use(Analysis& a, const ProcessInfo& p, std::size_t first, std::size_t last) {
  if (!p.forked || !p.parent_initialized) return;
  for (std::size_t k = first; k < last; ++k) {
    const Record& r = a.records[k];
    if (r.kind != Kind::call) continue;
    const std::string_view api = r.api;
    if (api == "cuGetErrorName" || api == "cuGetErrorString" || api == "cuDriverGetVersion") continue;
    add_diagnostic(a, "fork-after-init", p.pid, k,
                   fmt::format("pid {} (forked from pid {} after it initialised CUDA) called {}{} -> {}", p.pid, p.ppid,
                               symbol_of(r), r.lib.empty() ? "" : " from " + r.lib, recorder::result_name(r.result)));
    return;
  }
}

void find_ignored_errors(Analysis& a, const ProcessInfo& p, std::size_t last) {
  for (const std::size_t i : p.errors) {
    const Record& failed = a.records[i];
    const ApiInfo* info = api_info(failed);
    if (info == nullptr) continue;
    const auto values = split_args(failed.args);
    std::string object;
    for (std::size_t k = 0; k < info->params.size() && k < values.size(); ++k) {
      if (kObjectParams.count(info->params[k]) != 0 && !values[k].out && values[k].known && values[k].text != "null" &&
          values[k].text != "0x0") {
        object = values[k].text;
        break;
      }
    }
    if (object.empty()) continue;
    for (std::size_t k = i + 1; k < last; ++k) {
      const Record& next = a.records[k];
      if (next.kind != Kind::call || next.tid != failed.tid) continue;
      const auto next_values = split_args(next.args);
      const bool same = std::any_of(next_values.begin(), next_values.end(),
                                    [&](const ArgValue& v) { return !v.out && v.text == object; });
      if (!same) continue;
      if (!handles_failure(next.api)) {
        Diagnostic& d =
            add_diagnostic(a, "ignored-error", p.pid, i,
                           fmt::format("{} on {} returned {} and tid {}{} went on with {} on the same object",
                                       symbol_of(failed), object, recorder::result_name(failed.result), failed.tid,
                                       failed.lib.empty() ? "" : " (" + failed.lib + ")", symbol_of(next)));
        if (d.evidence.size() < kMaxEvidence) d.evidence.push_back(k);
      }
      break;
    }
  }
}

}  // namespace

Diagnostic& add_diagnostic(Analysis& a, const char* id, std::uint32_t pid, std::size_t evidence, std::string title) {
  for (auto& d : a.diagnostics) {
    if (d.id == id && d.pid == pid && d.title == title) {
      ++d.occurrences;
      if (d.evidence.size() < kMaxEvidence &&
          std::find(d.evidence.begin(), d.evidence.end(), evidence) == d.evidence.end()) {
        d.evidence.push_back(evidence);
      }
      return d;
    }
  }
  const DiagnosticKind& k = kind_of(id);
  Diagnostic d;
  d.id = id;
  d.title = std::move(title);
  d.explanation = k.explanation;
  d.fix = k.fix;
  d.pid = pid;
  d.evidence.push_back(evidence);
  a.diagnostics.push_back(std::move(d));
  return a.diagnostics.back();
}

void find_diagnostics(Analysis& a) {
  std::size_t first = 0;
  for (const auto& p : a.processes) {
    std::size_t last = first;
    while (last < a.records.size() && a.records[last].pid == p.pid) ++last;
    find_init_races(a, p);
    find_fork_use(a, p, first, last);
    find_ignored_errors(a, p, last);
    first = last;
  }
  // Stable order: by process, then by the first piece of evidence.
  std::stable_sort(a.diagnostics.begin(), a.diagnostics.end(), [](const Diagnostic& x, const Diagnostic& y) {
    if (x.pid != y.pid) return x.pid < y.pid;
    return x.evidence.front() < y.evidence.front();
  });
}

}  // namespace drvshim::trace_analysis
