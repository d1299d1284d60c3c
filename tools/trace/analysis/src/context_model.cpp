// The context-state model: walks one process's records in time order and
// keeps what the driver's state must have been, from the calls alone (and,
// where a record carries it, the thread's actual current context after the
// call). See model.hpp. Model::call, the per-call rules, is in model_calls.cpp.
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
    case Kind::thread: t.name = r.args; return;
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
        p_.timeline.push_back(
            {i, fmt::format("forked from pid {} ({})", p_.ppid,
                            p_.parent_initialized ? "which had initialised CUDA" : "which had not initialised CUDA")});
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
    case Kind::runtime: return;
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
    case Kind::call: call(i, t); return;
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
               balance > 0 ? fmt::format("{} left {} context(s) pushed on tid {}'s stack",
                                         lib.empty() ? "a caller" : lib, balance, tid)
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
