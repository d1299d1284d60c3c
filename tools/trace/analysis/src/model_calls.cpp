// SPDX-License-Identifier: Apache-2.0
// The context-state model's per-call rules (Model::call): which calls need a
// current context, which create and release which objects, and how each call
// changes the model. The walk itself is in context_model.cpp.
#include <drvshim_recorder/json_line.hpp>
#include <drvshim_trace/api_info.hpp>
#include <drvshim_trace/diagnostics.hpp>
#include <drvshim_trace/model.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string_view>

#include "model_internal.hpp"

namespace drvshim::trace_analysis {
namespace {

// Calls that need a current context on the calling thread (their explicit
// handles do not name one). Calls taking a stream, function or event use that
// object's context and are left out.
const std::set<std::string_view> kNeedsContext = {"cuMemAlloc",
                                                  "cuMemAllocPitch",
                                                  "cuMemAllocHost",
                                                  "cuMemHostAlloc",
                                                  "cuMemAllocManaged",
                                                  "cuMemGetInfo",
                                                  "cuMemHostRegister",
                                                  "cuModuleLoad",
                                                  "cuModuleLoadData",
                                                  "cuModuleLoadDataEx",
                                                  "cuModuleLoadFatBinary",
                                                  "cuCtxSynchronize",
                                                  "cuCtxGetDevice",
                                                  "cuCtxGetFlags",
                                                  "cuCtxGetApiVersion",
                                                  "cuCtxGetLimit",
                                                  "cuCtxSetLimit",
                                                  "cuCtxGetId",
                                                  "cuCtxGetStreamPriorityRange",
                                                  "cuCtxGetCacheConfig",
                                                  "cuCtxSetCacheConfig",
                                                  "cuStreamCreate",
                                                  "cuStreamCreateWithPriority",
                                                  "cuEventCreate",
                                                  "cuMemcpyHtoD",
                                                  "cuMemcpyDtoH",
                                                  "cuMemcpyDtoD",
                                                  "cuMemsetD8",
                                                  "cuMemsetD16",
                                                  "cuMemsetD32",
                                                  "cuLinkCreate",
                                                  "cuMemPoolCreate",
                                                  "cuGraphInstantiateWithFlags",
                                                  "cuCtxResetPersistingL2Cache"};

// Context management: calls that change or read which context is current
// rather than use it.
const std::set<std::string_view> kManagement = {"cuCtxSetCurrent",
                                                "cuCtxGetCurrent",
                                                "cuCtxPushCurrent",
                                                "cuCtxPopCurrent",
                                                "cuCtxCreate",
                                                "cuCtxDestroy",
                                                "cuDevicePrimaryCtxRetain",
                                                "cuDevicePrimaryCtxRelease",
                                                "cuDevicePrimaryCtxReset",
                                                "cuDevicePrimaryCtxGetState",
                                                "cuDevicePrimaryCtxSetFlags",
                                                "cuInit",
                                                "cuDriverGetVersion",
                                                "cuGetProcAddress",
                                                "cuGetExportTable",
                                                "cuGetErrorName",
                                                "cuGetErrorString",
                                                "cuDeviceGet",
                                                "cuDeviceGetCount",
                                                "cuDeviceGetAttribute",
                                                "cuDeviceGetName",
                                                "cuDeviceGetUuid",
                                                "cuDeviceTotalMem",
                                                "cuDeviceGetPCIBusId",
                                                "cuModuleGetLoadingMode",
                                                "cuLibraryLoadData",
                                                "cuLibraryLoadFromFile",
                                                "cuLibraryUnload",
                                                "cuLibraryGetKernel",
                                                "cuLibraryGetManaged",
                                                "cuKernelGetName",
                                                "cuKernelGetFunction"};

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

}  // namespace

void Model::add_live(ObjectInfo object) {
  live_by_handle_[object.handle].push_back(live_.size());
  live_.push_back(std::move(object));
  released_.push_back(false);
}

bool Model::release_live(const std::string& handle, const char* kinds) {
  // The oldest unreleased object of a matching kind with that handle.
  const auto it = live_by_handle_.find(handle);
  if (it == live_by_handle_.end()) return false;
  auto& positions = it->second;
  for (auto k = positions.begin(); k != positions.end(); ++k) {
    if (!kind_in(kinds, live_[*k].kind)) continue;
    released_[*k] = true;
    positions.erase(k);
    if (positions.empty()) live_by_handle_.erase(it);
    return true;
  }
  return false;
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

  // Use of a context: diagnostics that depend on the state before the call. A query of the current
  // context that fails with INVALID_CONTEXT asked whether there is one: it is not a use.
  const bool manages = kManagement.count(base) != 0;
  const bool probe = is_context_probe(r);
  if (!probe && kNeedsContext.count(base) != 0 && before == 0) {
    diagnose("no-current-context", i,
             fmt::format("{} called by {} with no current context{}", symbol_of(r), who(),
                         r.result == 201 ? " (it failed with CUDA_ERROR_INVALID_CONTEXT)" : ""));
  } else if (!probe && r.result == 201 && before == 0 && !manages) {
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
      const auto known = p_.contexts.find(handle);
      if (known == p_.contexts.end() || known->second.ended_ns >= 0) {
        // A new activation (the driver may hand back the handle of the one it destroyed).
        ContextInfo& c = new_context(handle, i);
        c.device = dev;
        c.primary = true;
        c.flags = ps.flags;
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
      ContextInfo& c = new_context(handle, i);
      c.device = dev;
      c.primary = false;
      c.flags = value("flags");
      push(t, handle, i);
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
      if (current(t) == handle) pop(t);
      notes.push_back(fmt::format("context 0x{:x} destroyed", handle));
    }
  } else if (base == "cuCtxPushCurrent") {
    // Pushes and pops are not shown one by one (drvshim and many libraries wrap every call
    // in a pair); the timeline shows the net change at the thread's next shown entry.
    if (ok) push(t, handle_value(value("ctx")), i);
  } else if (base == "cuCtxPopCurrent") {
    if (ok) pop(t);
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
      add_live(std::move(o));
    }
  }
  for (const auto& rel : kReleases) {
    if (base != rel.base) continue;
    const std::string h = value(rel.handle);
    if (!ok || h.empty()) continue;
    if (release_live(h, rel.kinds)) ++p_.released_objects;
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

}  // namespace drvshim::trace_analysis
