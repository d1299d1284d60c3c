// The context-state model: walks one process's records in time order and
// keeps what the driver's state must have been, from the calls alone (and,
// where a record carries it, the thread's actual current context after the
// call). See model.hpp.
#include <drvshim_recorder/json_line.hpp>
#include <drvshim_trace/api_info.hpp>
#include <drvshim_trace/diagnostics.hpp>
#include <drvshim_trace/model.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string_view>

#include "model_internal.hpp"

namespace drvshim::trace_analysis {
namespace {

// Calls that need a current context on the calling thread (their explicit
// handles do not name one). Calls taking a stream, function or event use that
// object's context and are left out.
const std::set<std::string_view> kNeedsContext = {
    "cuMemAlloc",          "cuMemAllocPitch",     "cuMemAllocHost",     "cuMemHostAlloc",
    "cuMemAllocManaged",   "cuMemGetInfo",        "cuMemHostRegister",  "cuModuleLoad",
    "cuModuleLoadData",    "cuModuleLoadDataEx",  "cuModuleLoadFatBinary", "cuCtxSynchronize",
    "cuCtxGetDevice",      "cuCtxGetFlags",       "cuCtxGetApiVersion", "cuCtxGetLimit",
    "cuCtxSetLimit",       "cuCtxGetId",          "cuCtxGetStreamPriorityRange", "cuCtxGetCacheConfig",
    "cuCtxSetCacheConfig", "cuStreamCreate",      "cuStreamCreateWithPriority", "cuEventCreate",
    "cuMemcpyHtoD",        "cuMemcpyDtoH",        "cuMemcpyDtoD",       "cuMemsetD8",
    "cuMemsetD16",         "cuMemsetD32",         "cuLinkCreate",       "cuMemPoolCreate",
    "cuGraphInstantiateWithFlags", "cuCtxResetPersistingL2Cache"};

// Context management: calls that change or read which context is current
// rather than use it.
const std::set<std::string_view> kManagement = {
    "cuCtxSetCurrent",   "cuCtxGetCurrent",          "cuCtxPushCurrent",           "cuCtxPopCurrent",
    "cuCtxCreate",       "cuCtxDestroy",             "cuDevicePrimaryCtxRetain",   "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxSetFlags", "cuInit",
    "cuDriverGetVersion", "cuGetProcAddress",        "cuGetExportTable",           "cuGetErrorName",
    "cuGetErrorString",  "cuDeviceGet",              "cuDeviceGetCount",           "cuDeviceGetAttribute",
    "cuDeviceGetName",   "cuDeviceGetUuid",          "cuDeviceTotalMem",           "cuDeviceGetPCIBusId",
    "cuModuleGetLoadingMode", "cuLibraryLoadData",   "cuLibraryLoadFromFile",      "cuLibraryUnload",
    "cuLibraryGetKernel", "cuLibraryGetManaged",     "cuKernelGetName",            "cuKernelGetFunction"};

struct Creation {
  const char* base;
  const char* kind;
  const char* handle;  // the out parameter (or, for registrations, the input pointer)
  const char* bytes;   // nullptr: no size
};
constexpr Creation kCreations[] = {
    {"cuMemAlloc", "device memory", "dptr", "bytesize"},
    {"cuMemAllocPitch", "device memory", "dptr", nullptr},
    {"cuMemAllocManaged", "managed memory", "dptr", "bytesize"},
    {"cuMemAllocAsync", "device memory", "dptr", "bytesize"},
    {"cuMemAllocFromPoolAsync", "device memory", "dptr", "bytesize"},
    {"cuMemAllocHost", "pinned host memory", "pp", "bytesize"},
    {"cuMemHostAlloc", "pinned host memory", "pp", "bytesize"},
    {"cuMemHostRegister", "host registration", "p", "bytesize"},
    {"cuModuleLoad", "module", "module", nullptr},
    {"cuModuleLoadData", "module", "module", nullptr},
    {"cuModuleLoadDataEx", "module", "module", nullptr},
    {"cuModuleLoadFatBinary", "module", "module", nullptr},
    {"cuLibraryLoadData", "library", "library", nullptr},
    {"cuLibraryLoadFromFile", "library", "library", nullptr},
    {"cuStreamCreate", "stream", "phStream", nullptr},
    {"cuStreamCreateWithPriority", "stream", "phStream", nullptr},
    {"cuEventCreate", "event", "phEvent", nullptr},
    {"cuGraphCreate", "graph", "phGraph", nullptr},
    {"cuGraphInstantiateWithFlags", "graph exec", "phGraphExec", nullptr},
    {"cuMemPoolCreate", "memory pool", "pool", nullptr},
    {"cuLinkCreate", "link state", "stateOut", nullptr},
};

struct Release {
  const char* base;
  const char* kinds;  // '|'-separated kinds it releases
  const char* handle;
};
constexpr Release kReleases[] = {
    {"cuMemFree", "device memory|managed memory", "dptr"},
    {"cuMemFreeAsync", "device memory|managed memory", "dptr"},
    {"cuMemFreeHost", "pinned host memory", "p"},
    {"cuMemHostUnregister", "host registration", "p"},
    {"cuModuleUnload", "module", "hmod"},
    {"cuLibraryUnload", "library", "library"},
    {"cuStreamDestroy", "stream", "hStream"},
    {"cuEventDestroy", "event", "hEvent"},
    {"cuGraphDestroy", "graph", "hGraph"},
    {"cuGraphExecDestroy", "graph exec", "hGraphExec"},
    {"cuMemPoolDestroy", "memory pool", "pool"},
    {"cuLinkDestroy", "link state", "state"},
};

bool kind_in(std::string_view kinds, std::string_view kind) {
  while (!kinds.empty()) {
    const auto bar = kinds.find('|');
    if (kinds.substr(0, bar) == kind) return true;
    if (bar == std::string_view::npos) break;
    kinds.remove_prefix(bar + 1);
  }
  return false;
}

std::map<std::string, std::string> key_values(std::string_view text) {
  std::map<std::string, std::string> out;
  while (!text.empty()) {
    const auto semi = text.find("; ");
    const std::string_view item = text.substr(0, semi);
    const auto eq = item.find('=');
    if (eq != std::string_view::npos) {
      // cmdline is last and may contain "; ": it takes the rest.
      if (item.substr(0, eq) == "cmdline") {
        out["cmdline"] = std::string(text.substr(eq + 1));
        break;
      }
      out[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
    }
    if (semi == std::string_view::npos) break;
    text.remove_prefix(semi + 2);
  }
  return out;
}

}  // namespace

std::uintptr_t handle_value(const std::string& text) {
  if (text.empty() || text == "null") return 0;
  return static_cast<std::uintptr_t>(std::strtoull(text.c_str(), nullptr, 0));
}

bool is_benign_failure(const Record& r) {
  const std::string_view api = r.api;
  if (r.result == 600 && (api == "cuStreamQuery" || api == "cuEventQuery")) return true;  // NOT_READY is an answer
  if (r.result == 1 && (api == "cuFuncGetParamInfo" || api == "cuPointerGetAttribute" ||
                        api == "cuPointerGetAttributes" || api == "cuDeviceGetAttribute")) {
    return true;  // probes: past the last parameter, a host pointer, an attribute this driver lacks
  }
  if (r.result == 500 && (api == "cuModuleGetGlobal" || api == "cuLibraryGetGlobal")) return true;
  return false;
}

Model::Model(Analysis& analysis, ProcessInfo& process) : a_(analysis), p_(process) {}

std::string Model::describe(std::uintptr_t ctx) const {
  if (ctx == 0) return "none";
  const auto it = p_.contexts.find(ctx);
  if (it == p_.contexts.end()) return fmt::format("0x{:x}", ctx);
  const ContextInfo& c = it->second;
  return fmt::format("0x{:x} ({}{})", ctx, c.device >= 0 ? fmt::format("device {} ", c.device) : std::string(),
                     c.primary ? "primary" : "context");
}

ThreadInfo& Model::thread(const Record& r) {
  auto [it, fresh] = p_.threads.try_emplace(r.tid);
  ThreadInfo& t = it->second;
  if (fresh) {
    t.tid = r.tid;
    t.first_ns = r.ts_ns;
  }
  t.last_ns = std::max(t.last_ns, r.ts_ns + r.dur_ns);
  return t;
}

std::uintptr_t Model::current(const ThreadInfo& t) const { return t.stack.empty() ? 0 : t.stack.back(); }

void Model::set_top(ThreadInfo& t, std::uintptr_t ctx) {
  if (ctx == 0) {
    if (!t.stack.empty()) t.stack.pop_back();
  } else if (t.stack.empty()) {
    t.stack.push_back(ctx);
  } else {
    t.stack.back() = ctx;
  }
}

void Model::diagnose(const char* id, std::size_t index, std::string title) {
  add_diagnostic(a_, id, p_.pid, index, std::move(title));
}

void Model::step(std::size_t i) {
  const Record& r = a_.records[i];
  p_.start_ns = p_.start_ns == 0 ? r.ts_ns : std::min(p_.start_ns, r.ts_ns);
  p_.end_ns = std::max(p_.end_ns, r.ts_ns + r.dur_ns);
  ThreadInfo& t = thread(r);
  switch (r.kind) {
    case Kind::thread:
      t.name = r.args;
      return;
    case Kind::process: {
      const auto kv = key_values(r.args);
      auto get = [&](const char* k) {
        const auto it = kv.find(k);
        return it != kv.end() ? it->second : std::string();
      };
      if (r.api == "fork") {
        p_.forked = true;
        p_.ppid = static_cast<std::uint32_t>(std::strtoul(get("parent").c_str(), nullptr, 10));
        p_.parent_initialized = get("parent_initialized") == "1";
        if (p_.exe.empty()) p_.exe = get("exe");
        p_.timeline.push_back({i, fmt::format("forked from pid {} ({})", p_.ppid,
                                              p_.parent_initialized ? "which had initialised CUDA"
                                                                    : "which had not initialised CUDA")});
      } else {
        p_.exe = get("exe");
        p_.cmdline = get("cmdline");
        p_.driver = get("driver");
        p_.mode = get("mode");
        if (const auto pp = get("ppid"); !pp.empty() && p_.ppid == 0) {
          p_.ppid = static_cast<std::uint32_t>(std::strtoul(pp.c_str(), nullptr, 10));
        }
        p_.timeline.push_back({i, fmt::format("libcuda.so.1 loaded on tid {} (the program's first reach for the "
                                              "driver; the real one is {})",
                                              r.tid, p_.driver)});
      }
      return;
    }
    case Kind::counts: {
      Folded& f = p_.folded[r.tid][symbol_of(r)];
      f.calls += r.count;
      f.total_ns += r.dur_ns;
      return;
    }
    case Kind::runtime:
      return;
    case Kind::event:
      if (r.api == "untraced-entry-point" || r.api == "untraced-entry-point-called" || r.api == "untraced-summary") {
        untraced(i);  // one line for them all, at the end
        return;
      }
      if (r.api == "libcuda-redirected" || r.api == "libcuda-bypass" || r.api == "entry-point-by-name" ||
          r.api == "trace-truncated" || r.api == "missing-entry-point" || r.api == "cupti-unavailable" ||
          r.api == "cupti" || r.api == "load-failed") {
        p_.notices.push_back(i);
        p_.timeline.push_back({i, ""});
      }
      return;
    case Kind::call:
      call(i, t);
      return;
  }
}

void Model::call(std::size_t i, ThreadInfo& t) {
  const Record& r = a_.records[i];
  const std::string& base = r.api;
  const bool ok = r.result == 0;
  const std::uintptr_t before = current(t);
  std::vector<std::string> notes;
  bool show = false;

  auto value = [&](const char* param) -> std::string {
    const auto v = arg(r, param);
    return v && v->known ? v->text : std::string();
  };
  auto device_of = [&]() -> int {
    const std::string d = value("dev");
    return d.empty() ? -1 : std::atoi(d.c_str());
  };
  auto who = [&]() { return fmt::format("tid {}{}", r.tid, r.lib.empty() ? "" : " (" + r.lib + ")"); };

  if (!ok && !is_benign_failure(r)) {
    p_.errors.push_back(i);
    notes.push_back(fmt::format("failed: {}", recorder::result_name(r.result)));
  }

  // Use of a context: diagnostics that depend on the state before the call.
  const bool manages = kManagement.count(base) != 0;
  if (kNeedsContext.count(base) != 0 && before == 0) {
    diagnose("no-current-context", i,
             fmt::format("{} called by {} with no current context{}", symbol_of(r), who(),
                         r.result == 201 ? " (it failed with CUDA_ERROR_INVALID_CONTEXT)" : ""));
  } else if (r.result == 201 && before == 0 && !manages) {
    diagnose("no-current-context", i,
             fmt::format("{} by {} failed with CUDA_ERROR_INVALID_CONTEXT: the thread had no current context",
                         symbol_of(r), who()));
  }
  if (before != 0 && !manages) {
    const auto ci = p_.contexts.find(before);
    if (ci != p_.contexts.end() && ci->second.primary && ci->second.ended_ns >= 0 && ci->second.device >= 0) {
      const PrimaryState& ps = p_.primaries[ci->second.device];
      if (!ps.active && ps.ended_by_lib != r.lib) {
        diagnose("primary-released-while-used", i,
                 fmt::format("{} by {} used the primary context of device {} after {} had ended it ({})", symbol_of(r),
                             who(), ci->second.device, ps.ended_by_lib.empty() ? "another component" : ps.ended_by_lib,
                             ci->second.ended_by));
      }
    }
  }

  if (base == "cuInit") {
    p_.inits.push_back(i);
    show = true;
    if (ok && p_.first_init < 0) {
      p_.first_init = static_cast<long>(i);
      notes.push_back(fmt::format("driver initialised by {} in {:.3f} ms", who(), static_cast<double>(r.dur_ns) / 1e6));
    } else if (ok) {
      notes.push_back("cuInit again (no effect)");
    }
  } else if (base == "cuDevicePrimaryCtxRetain") {
    show = true;
    const int dev = device_of();
    const auto h = arg(r, "pctx");
    if (ok && dev >= 0 && h && h->known) {
      PrimaryState& ps = p_.primaries[dev];
      const std::uintptr_t handle = handle_value(h->text);
      const bool was_active = ps.active;
      const int count = ps.retains;
      ps.active = true;
      ps.retains += 1;
      ps.retains_by_lib[r.lib] += 1;
      ps.handle = handle;
      ps.inactive_since = -1;
      auto [it, fresh] = p_.contexts.try_emplace(handle);
      ContextInfo& c = it->second;
      if (fresh || c.ended_ns >= 0) {
        if (!fresh) {
          // The driver handed back the same handle for a new activation.
          p_.context_order.erase(std::remove(p_.context_order.begin(), p_.context_order.end(), handle),
                                 p_.context_order.end());
        }
        c = ContextInfo{};
        c.handle = handle;
        c.device = dev;
        c.primary = true;
        c.flags = ps.flags;
        c.creator_tid = r.tid;
        c.creator_lib = r.lib;
        c.created_by = symbol_of(r);
        c.created_ns = r.ts_ns;
        c.create_index = i;
        p_.context_order.push_back(handle);
      }
      notes.push_back(fmt::format("device {} primary 0x{:x}: {} -> active, retains {} -> {}, flags {}{}", dev, handle,
                                  was_active ? "active" : "inactive", count, ps.retains, ps.flags,
                                  was_active ? " (already active: adopted)" : " (created)"));
    }
  } else if (base == "cuDevicePrimaryCtxRelease") {
    show = true;
    const int dev = device_of();
    if (ok && dev >= 0) {
      PrimaryState& ps = p_.primaries[dev];
      const int count = ps.retains;
      const int own = ps.retains_by_lib[r.lib];
      int others = 0;
      for (const auto& [lib, n] : ps.retains_by_lib) others += lib == r.lib ? 0 : n;
      if (own <= 0 && others > 0) {
        diagnose("primary-released-while-used", i,
                 fmt::format("{} released device {}'s primary context without having retained it, while {} "
                             "retain(s) of other components were open",
                             who(), dev, others));
      }
      ps.retains -= 1;
      ps.retains_by_lib[r.lib] -= 1;
      if (ps.retains <= 0) {
        ps.retains = 0;
        ps.active = false;
        ps.inactive_since = r.ts_ns;
        ps.ended_by_lib = r.lib;
        if (auto c = p_.contexts.find(ps.handle); c != p_.contexts.end() && c->second.ended_ns < 0) {
          c->second.ended_ns = r.ts_ns;
          c->second.ended_by = fmt::format("released (last retain) by {}", who());
        }
      }
      notes.push_back(fmt::format("device {} primary: retains {} -> {}{}", dev, count, ps.retains,
                                  ps.active ? "" : ", now inactive (the driver destroys it)"));
    }
  } else if (base == "cuDevicePrimaryCtxReset") {
    show = true;
    const int dev = device_of();
    if (ok && dev >= 0) {
      PrimaryState& ps = p_.primaries[dev];
      int others = 0;
      for (const auto& [lib, n] : ps.retains_by_lib) others += lib == r.lib ? 0 : n;
      if (others > 0) {
        diagnose("primary-released-while-used", i,
                 fmt::format("{} reset device {}'s primary context while {} retain(s) of other components were open",
                             who(), dev, others));
      }
      notes.push_back(fmt::format("device {} primary reset (was {}, {} retain(s))", dev,
                                  ps.active ? "active" : "inactive", ps.retains));
      ps.active = false;
      ps.retains = 0;
      ps.retains_by_lib.clear();
      ps.inactive_since = r.ts_ns;
      ps.ended_by_lib = r.lib;
      if (auto c = p_.contexts.find(ps.handle); c != p_.contexts.end() && c->second.ended_ns < 0) {
        c->second.ended_ns = r.ts_ns;
        c->second.ended_by = fmt::format("reset by {}", who());
      }
    }
  } else if (base == "cuDevicePrimaryCtxSetFlags") {
    show = true;
    const int dev = device_of();
    const std::string flags = value("flags");
    if (dev >= 0) {
      PrimaryState& ps = p_.primaries[dev];
      if (ps.active || r.result == 708) {
        diagnose("primary-flags-after-activation", i,
                 fmt::format("{} set device {}'s primary-context flags to {} after the context was activated ({})",
                             who(), dev, flags.empty() ? "?" : flags,
                             ok ? std::string("it succeeded: the running context shared by every component changed")
                                : std::string("it failed with ") + recorder::result_name(r.result)));
      }
      if (ok && !flags.empty()) ps.flags = flags;
      notes.push_back(fmt::format("device {} primary flags -> {}", dev, flags));
    }
  } else if (base == "cuDevicePrimaryCtxGetState") {
    const int dev = device_of();
    if (ok && dev >= 0) {
      PrimaryState& ps = p_.primaries[dev];
      const std::string flags = value("flags");
      const std::string active = value("active");
      if (!flags.empty()) ps.flags = flags;
      if (!active.empty() && (active != "0") != ps.active) {
        show = true;
        notes.push_back(fmt::format("device {} primary observed {} (the trace had it {})", dev,
                                    active != "0" ? "active" : "inactive", ps.active ? "active" : "inactive"));
        ps.active = active != "0";
      }
    }
  } else if (base == "cuCtxCreate") {
    show = true;
    const int dev = device_of();
    const auto h = arg(r, "pctx");
    if (ok && h && h->known) {
      const std::uintptr_t handle = handle_value(h->text);
      if (dev >= 0 && p_.primaries[dev].active) {
        diagnose("context-beside-primary", i,
                 fmt::format("{} created context 0x{:x} on device {} while its primary context 0x{:x} was active",
                             who(), handle, dev, p_.primaries[dev].handle));
      }
      ContextInfo c;
      c.handle = handle;
      c.device = dev;
      c.primary = false;
      c.flags = value("flags");
      c.creator_tid = r.tid;
      c.creator_lib = r.lib;
      c.created_by = symbol_of(r);
      c.created_ns = r.ts_ns;
      c.create_index = i;
      p_.contexts[handle] = c;
      p_.context_order.push_back(handle);
      t.stack.push_back(handle);
      t.push_balance[r.lib] += 1;
      notes.push_back(fmt::format("context 0x{:x} created on device {} (pushed)", handle, dev));
    }
  } else if (base == "cuCtxDestroy") {
    show = true;
    const std::uintptr_t handle = handle_value(value("ctx"));
    if (ok) {
      if (auto c = p_.contexts.find(handle); c != p_.contexts.end()) {
        c->second.ended_ns = r.ts_ns;
        c->second.ended_by = fmt::format("{} by {}", symbol_of(r), who());
      }
      if (current(t) == handle) {
        t.stack.pop_back();
        t.push_balance[r.lib] -= 1;
      }
      notes.push_back(fmt::format("context 0x{:x} destroyed", handle));
    }
  } else if (base == "cuCtxPushCurrent") {
    // Pushes and pops are not shown one by one (drvshim and many libraries wrap every call
    // in a pair); the timeline shows the net change at the thread's next shown entry.
    if (ok) {
      t.stack.push_back(handle_value(value("ctx")));
      t.push_balance[r.lib] += 1;
    }
  } else if (base == "cuCtxPopCurrent") {
    if (ok && !t.stack.empty()) {
      t.stack.pop_back();
      t.push_balance[r.lib] -= 1;
    }
  } else if (base == "cuCtxSetCurrent") {
    show = true;
    if (ok) set_top(t, handle_value(value("ctx")));
  } else if (base == "cuCtxGetCurrent") {
    const auto h = arg(r, "pctx");
    if (ok && h && h->known && handle_value(h->text) != current(t)) set_top(t, handle_value(h->text));
  }

  // Objects created and released.
  for (const auto& c : kCreations) {
    if (base != c.base) continue;
    show = true;
    const auto h = arg(r, c.handle);
    if (ok && h && h->known) {
      ObjectInfo o;
      o.kind = c.kind;
      o.handle = h->text;
      if (c.bytes != nullptr) o.bytes = std::strtoull(value(c.bytes).c_str(), nullptr, 0);
      o.context = current(t);
      o.tid = r.tid;
      o.lib = r.lib;
      o.created_by = symbol_of(r);
      o.created_ns = r.ts_ns;
      o.create_index = i;
      notes.push_back(fmt::format("{} {}{}", c.kind, o.handle, o.bytes != 0 ? fmt::format(", {} bytes", o.bytes) : ""));
      live_.push_back(std::move(o));
    }
  }
  for (const auto& rel : kReleases) {
    if (base != rel.base) continue;
    const std::string h = value(rel.handle);
    if (!ok || h.empty()) continue;
    const auto it = std::find_if(live_.begin(), live_.end(),
                                 [&](const ObjectInfo& o) { return o.handle == h && kind_in(rel.kinds, o.kind); });
    if (it != live_.end()) {
      live_.erase(it);
      ++p_.released_objects;
    }
    if (std::string_view(rel.kinds).find("module") != std::string_view::npos ||
        std::string_view(rel.kinds).find("library") != std::string_view::npos) {
      show = true;
      notes.push_back(fmt::format("{} {} unloaded", rel.kinds, h));
    }
  }

  // The record's own view of the current context after the call wins over the model.
  if (r.ctx != 0 || p_.first_init >= 0) {
    if (current(t) != r.ctx && !(r.ctx == 0 && p_.first_init < 0)) set_top(t, r.ctx);
  }
  const std::uintptr_t after = current(t);
  const bool scoped = base == "cuCtxPushCurrent" || base == "cuCtxPopCurrent";
  if (after != before) {
    t.history.push_back({r.ts_ns, after, symbol_of(r)});
    if (!scoped) show = true;
  }
  if (after != 0 && !manages && t.used.insert(after).second) {
    show = true;
    notes.push_back(fmt::format("first use of {} by tid {}", describe(after), r.tid));
  }
  if ((show || !notes.empty()) && after != t.shown) {
    notes.insert(notes.begin(), fmt::format("tid {}: current {} -> {}", r.tid, describe(t.shown), describe(after)));
    t.shown = after;
  }

  if (show || !notes.empty()) {
    std::string joined;
    for (const auto& n : notes) joined += (joined.empty() ? "" : "; ") + n;
    p_.timeline.push_back({i, std::move(joined)});
  } else {
    Folded& f = p_.folded[r.tid][symbol_of(r)];
    f.calls += 1;
    f.total_ns += r.dur_ns;
  }
}

UntracedEntryInfo& Model::untraced_entry(const std::string& key, std::size_t index) {
  for (auto& e : p_.untraced_entries) {
    if (e.key == key) return e;
  }
  UntracedEntryInfo& e = p_.untraced_entries.emplace_back();
  e.key = key;
  e.symbol = key.substr(0, key.find('@'));
  e.first = index;
  return e;
}

// "cuGLInit@2000 flags 0 -> 0x7f.. is no export ...": one per lookup (older traces) or per entry;
// "cuGLInit@2000 flags 0: 3 call(s) through ...": calls counted through a trampoline;
// "29 entry point(s) handed out untraced (87 lookup(s))": at exit.
void Model::untraced(std::size_t i) {
  const Record& r = a_.records[i];
  if (r.api == "untraced-entry-point") {
    ++untraced_events_;
    UntracedEntryInfo& e = untraced_entry(r.args.substr(0, r.args.find(" -> ")), i);
    ++e.lookups;
  } else if (r.api == "untraced-entry-point-called") {
    const auto colon = r.args.find(": ");
    UntracedEntryInfo& e = untraced_entry(r.args.substr(0, colon), i);
    e.calls = colon == std::string::npos ? 0 : std::strtoull(r.args.c_str() + colon + 2, nullptr, 10);
    e.called_index = static_cast<long>(i);
  } else {
    const auto open = r.args.find(" (");
    if (open != std::string::npos) untraced_lookups_ = std::strtoull(r.args.c_str() + open + 2, nullptr, 10);
  }
}

void Model::finish() {
  p_.live = std::move(live_);
  p_.untraced = std::max(untraced_events_, untraced_lookups_);
  // The entries nobody called: one line where the first was resolved. Those called: a line each.
  std::vector<const UntracedEntryInfo*> folded;
  for (const auto& e : p_.untraced_entries) {
    if (e.calls == 0 && e.lookups > 0) folded.push_back(&e);
  }
  if (!folded.empty()) {
    std::vector<std::string> names;
    for (const auto* e : folded) {
      if (std::find(names.begin(), names.end(), e->symbol) == names.end()) names.push_back(e->symbol);
    }
    constexpr std::size_t kNamed = 8;
    std::string list;
    for (std::size_t k = 0; k < names.size() && k < kNamed; ++k) list += (k == 0 ? "" : ", ") + names[k];
    if (names.size() > kNamed) list += fmt::format(" and {} more (the summary lists them)", names.size() - kNamed);
    p_.timeline.push_back(
        {folded.front()->first, "",
         fmt::format("[untraced] {} entry point(s) the driver resolves but does not export: {}; calls through them are "
                     "not traced",
                     folded.size(), list)});
    p_.notices.push_back(folded.front()->first);
  }
  for (const auto& e : p_.untraced_entries) {
    if (e.calls == 0) continue;
    p_.timeline.push_back(
        {e.lookups > 0 ? e.first : static_cast<std::size_t>(e.called_index), "",
         fmt::format("[untraced] {}: the driver resolves it but does not export it; called {} time(s) through the "
                     "pointer handed out, calls not traced",
                     e.key, e.calls)});
    p_.notices.push_back(e.lookups > 0 ? e.first : static_cast<std::size_t>(e.called_index));
  }
  std::stable_sort(p_.timeline.begin(), p_.timeline.end(),
                   [](const TimelineEntry& x, const TimelineEntry& y) { return x.index < y.index; });
  std::sort(p_.notices.begin(), p_.notices.end());
  for (auto& [tid, t] : p_.threads) {
    for (const auto& [lib, balance] : t.push_balance) {
      if (balance == 0) continue;
      // The evidence: that library's last push (or, when it popped too much, its last pop) on that thread.
      std::size_t last = first_;
      const char* op = balance > 0 ? "cuCtxPushCurrent" : "cuCtxPopCurrent";
      for (std::size_t k = first_; k < last_; ++k) {
        const Record& r = a_.records[k];
        if (r.tid == tid && r.lib == lib && r.kind == Kind::call &&
            (r.api == op || (balance > 0 && r.api == "cuCtxCreate"))) {
          last = k;
        }
      }
      diagnose("unbalanced-context-stack", last,
               balance > 0 ? fmt::format("{} left {} context(s) pushed on tid {}'s stack", lib.empty() ? "a caller" : lib,
                                         balance, tid)
                           : fmt::format("{} popped {} context(s) on tid {} that it had not pushed",
                                         lib.empty() ? "a caller" : lib, -balance, tid));
    }
  }
}

Analysis analyse(std::vector<Record> records) {
  Analysis a;
  std::stable_sort(records.begin(), records.end(), [](const Record& x, const Record& y) {
    if (x.pid != y.pid) return x.pid < y.pid;
    if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
    return x.seq < y.seq;
  });
  a.records = std::move(records);
  std::int64_t earliest = 0;
  bool any = false;
  for (std::size_t i = 0; i < a.records.size();) {
    std::size_t j = i;
    while (j < a.records.size() && a.records[j].pid == a.records[i].pid) ++j;
    ProcessInfo& p = a.processes.emplace_back();
    p.pid = a.records[i].pid;
    if (!any || a.records[i].ts_ns < earliest) {
      earliest = a.records[i].ts_ns;
      a.root_pid = p.pid;
      a.start_ns = earliest;
      any = true;
    }
    Model m(a, p);
    m.set_range(i, j);
    for (std::size_t k = i; k < j; ++k) m.step(k);
    m.finish();
    i = j;
  }
  find_diagnostics(a);
  return a;
}

}  // namespace drvshim::trace_analysis
