// SPDX-License-Identifier: Apache-2.0
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

bool is_context_probe(const Record& r) {
  // Queries that read the current context (cuCtxGetApiVersion and cuCtxGetId, and cuCtxGetDevice_v2, only
  // when their context argument is NULL).
  static const std::set<std::string_view> kQueries = {"cuCtxGetDevice",
                                                      "cuCtxGetFlags",
                                                      "cuCtxGetId",
                                                      "cuCtxGetApiVersion",
                                                      "cuCtxGetLimit",
                                                      "cuCtxGetCacheConfig",
                                                      "cuCtxGetStreamPriorityRange",
                                                      "cuCtxGetSharedMemConfig",
                                                      "cuCtxGetExecAffinity"};
  if (r.kind != Kind::call || r.result != 201 || kQueries.count(r.api) == 0) return false;
  const auto ctx = arg(r, "ctx");
  return !ctx || ctx->text == "null" || ctx->text == "0x0";
}

bool is_benign_failure(const Record& r) {
  const std::string_view api = r.api;
  if (r.result == 600 && (api == "cuStreamQuery" || api == "cuEventQuery")) return true;  // NOT_READY is an answer
  if (r.result == 1 && (api == "cuFuncGetParamInfo" || api == "cuPointerGetAttribute" ||
                        api == "cuPointerGetAttributes" || api == "cuDeviceGetAttribute")) {
    return true;  // probes: past the last parameter, a host pointer, an attribute this driver lacks
  }
  // NOT_FOUND from a lookup (cuModuleGetFunction, cuGetProcAddress, cuLibraryGetGlobal, ...): the caller
  // asked whether something exists, and usually falls back to something else.
  if (r.result == 500 && api.find("Get") != std::string_view::npos) return true;
  // The CUDA Runtime asks whether a thread has a current context with cuCtxGetDevice: INVALID_CONTEXT is
  // its expected answer on a thread that has none.
  return is_context_probe(r);
}

bool exec_failed(const std::vector<Record>& records, std::size_t index, std::size_t end) {
  // A failed exec returns to the thread that called it, which records exec-failed next; after a
  // successful one the calling thread's next record (if any) belongs to the new program.
  const std::uint64_t tid = records[index].tid;
  for (std::size_t k = index + 1; k < end; ++k) {
    const Record& r = records[k];
    if (r.tid != tid) continue;
    return r.kind == Kind::process && r.api == "exec-failed";
  }
  return false;
}

std::vector<const ContextInfo*> contexts_in_creation_order(const ProcessInfo& process) {
  std::vector<const ContextInfo*> out;
  out.reserve(process.replaced_contexts.size() + process.context_order.size());
  for (const auto& c : process.replaced_contexts) out.push_back(&c);
  for (const auto handle : process.context_order) out.push_back(&process.contexts.at(handle));
  std::stable_sort(out.begin(), out.end(),
                   [](const ContextInfo* x, const ContextInfo* y) { return x->create_index < y->create_index; });
  return out;
}

DiagnosticSink::DiagnosticSink(Analysis& analysis) : a_(analysis) {
  for (std::size_t k = 0; k < a_.diagnostics.size(); ++k) {
    const Diagnostic& d = a_.diagnostics[k];
    index_.emplace(fmt::format("{}\n{}\n{}\n{}", d.id, d.pid, d.image, d.title), k);
  }
}

Model::Model(Analysis& analysis, ProcessInfo& process, DiagnosticSink& sink) : a_(analysis), p_(process), sink_(sink) {}

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

void Model::push(ThreadInfo& t, std::uintptr_t ctx, std::size_t index) {
  t.stack.push_back(ctx);
  t.pushed_by.push_back(static_cast<long>(index));
}

void Model::pop(ThreadInfo& t) {
  if (t.stack.empty()) return;
  t.stack.pop_back();
  t.pushed_by.pop_back();
}

void Model::set_top(ThreadInfo& t, std::uintptr_t ctx) {
  if (ctx == 0) {
    pop(t);
  } else if (t.stack.empty()) {
    t.stack.push_back(ctx);
    t.pushed_by.push_back(-1);
  } else {
    t.stack.back() = ctx;
    t.pushed_by.back() = -1;
  }
}

ContextInfo& Model::new_context(std::uintptr_t handle, std::size_t index) {
  const Record& r = a_.records[index];
  auto [it, fresh] = p_.contexts.try_emplace(handle);
  if (!fresh) {
    // The driver hands out a destroyed context's handle again: a new context, listed apart from the old.
    ContextInfo& old = it->second;
    if (old.ended_ns < 0) {
      old.ended_ns = r.ts_ns;
      old.ended_by = "not traced (the driver handed out its handle again)";
    }
    p_.replaced_contexts.push_back(std::move(old));
    p_.context_order.erase(std::remove(p_.context_order.begin(), p_.context_order.end(), handle),
                           p_.context_order.end());
    it->second = ContextInfo{};
  }
  p_.context_order.push_back(handle);
  ContextInfo& c = it->second;
  c.handle = handle;
  c.creator_tid = r.tid;
  c.creator_lib = r.lib;
  c.created_by = symbol_of(r);
  c.created_ns = r.ts_ns;
  c.create_index = index;
  return c;
}

void Model::diagnose(const char* id, std::size_t index, std::string title) {
  sink_.add(id, p_, index, std::move(title));
}

void Model::step(std::size_t i) {
  const Record& r = a_.records[i];
  p_.start_ns = p_.start_ns == 0 ? r.ts_ns : std::min(p_.start_ns, r.ts_ns);
  p_.end_ns = std::max(p_.end_ns, r.ts_ns + r.dur_ns);
  ThreadInfo& t = thread(r);
  switch (r.kind) {
    case Kind::thread: t.name = r.args; return;
    case Kind::process: process_record(i); return;
    case Kind::counts: {
      Folded& f = p_.folded[r.tid][symbol_of(r)];
      f.calls += r.count;
      f.total_ns += r.dur_ns;
      return;
    }
    case Kind::runtime: return;
    case Kind::event:
      if (r.api == "records-dropped") {
        const auto kv = key_values(r.args);
        const auto count = kv.find("count");
        const auto reason = kv.find("reason");
        const std::uint64_t n = count != kv.end() ? std::strtoull(count->second.c_str(), nullptr, 10) : 0;
        const std::string why = reason != kv.end() ? reason->second : std::string("?");
        p_.dropped += n;
        p_.dropped_by_thread[r.tid] += n;
        p_.dropped_by_reason[why] += n;
        p_.notices.push_back(i);
        p_.timeline.push_back(
            {i, "", fmt::format("[records-dropped] {} record(s) of tid {} were not recorded ({})", n, r.tid, why)});
        return;
      }
      if (r.api == "untraced-entry-point" || r.api == "untraced-entry-point-called" || r.api == "untraced-summary") {
        untraced(i);  // one line for them all, at the end
        return;
      }
      if (r.api == "libcuda-redirected" || r.api == "libcuda-bypass" || r.api == "entry-point-by-name" ||
          r.api == "trace-truncated" || r.api == "missing-entry-point" || r.api == "cupti-unavailable" ||
          r.api == "cupti" || r.api == "load-failed" || r.api == "child-untraced") {
        p_.notices.push_back(i);
        p_.timeline.push_back({i, ""});
      }
      return;
    case Kind::call: call(i, t); return;
  }
}

void Model::process_record(std::size_t i) {
  const Record& r = a_.records[i];
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
  } else if (r.api == "exec") {
    // The last record of this program image, unless exec-failed follows.
    const std::string path = get("path");
    if (exec_failed(a_.records, i, last_)) {
      p_.timeline.push_back({i, fmt::format("tid {} exec's {}", r.tid, path)});
    } else if (get("traced") == "0") {
      p_.exec_path = path;
      // why= is last and may contain "; ": it takes the rest.
      const auto why = r.args.find("why=");
      p_.notices.push_back(i);
      p_.timeline.push_back({i, "",
                             fmt::format("[exec] exec'd {} outside tracing ({})", path,
                                         why == std::string::npos ? "no reason given" : r.args.substr(why + 4))});
    } else {
      p_.exec_path = path;
      const bool follows = last_ < a_.records.size() && a_.records[last_].pid == p_.pid;
      p_.timeline.push_back(
          {i, follows ? fmt::format("exec'd {}: its records follow as image {} of pid {}", path, p_.image + 2, p_.pid)
                      : fmt::format("exec'd {}, which left no records (it did not load the CUDA driver)", path)});
    }
  } else if (r.api == "exec-failed") {
    p_.exec_path.clear();
    p_.ended.clear();  // a trace-end written for the exec: the program goes on
    p_.timeline.push_back(
        {i, fmt::format("the exec failed (errno {}): pid {} goes on with this program", get("errno"), p_.pid)});
  } else if (r.api == "trace-end") {
    p_.ended = get("reason");
    if (p_.ended.rfind("signal", 0) == 0) {
      p_.notices.push_back(i);
      p_.timeline.push_back({i, "", fmt::format("[trace-end] pid {} died of {}", p_.pid, p_.ended)});
    }
  } else if (r.api == "process") {
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
  p_.live.clear();
  for (std::size_t k = 0; k < live_.size(); ++k) {
    if (!released_[k]) p_.live.push_back(std::move(live_[k]));
  }
  live_.clear();
  released_.clear();
  live_by_handle_.clear();
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
  // Balance is judged from what the thread's stack still holds at the end, not per library: a pop
  // recorded for another library (a tail call from a wrapper) may end a push, and cuCtxSetCurrent
  // replaces (NULL: pops) the entry on top, pushed or not.
  for (const auto& [tid, t] : p_.threads) {
    std::size_t pushed = 0;
    long last = -1;  // the push nearest the top
    for (const long by : t.pushed_by) {
      if (by < 0) continue;
      ++pushed;
      last = by;
    }
    if (pushed == 0) continue;
    const std::size_t index = static_cast<std::size_t>(last);
    const std::string& lib = a_.records[index].lib;
    // A context a library pushes and keeps for its own later calls (Numba activates its
    // context so) harms no one; it matters once another library's call runs in it.
    std::size_t foreign = last_;
    for (std::size_t k = index + 1; k < last_ && foreign == last_; ++k) {
      const Record& r = a_.records[k];
      if (r.kind == Kind::call && r.tid == tid && !r.lib.empty() && r.lib != lib) foreign = k;
    }
    if (foreign == last_) continue;
    diagnose("unbalanced-context-stack", index,
             fmt::format("{} left {} context(s) pushed on tid {}'s stack, where {} then called {}",
                         lib.empty() ? "a caller" : lib, pushed, tid, a_.records[foreign].lib,
                         symbol_of(a_.records[foreign])));
  }
}

Analysis analyse(std::vector<Record> records) {
  Analysis a;
  std::stable_sort(records.begin(), records.end(), [](const Record& x, const Record& y) {
    if (x.pid != y.pid) return x.pid < y.pid;
    if (x.ns != y.ns) return x.ns < y.ns;  // a driver copy loaded with dlmopen is its own process
    if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
    return x.seq < y.seq;
  });
  a.records = std::move(records);
  DiagnosticSink sink(a);
  std::int64_t earliest = 0;
  bool any = false;
  for (std::size_t i = 0; i < a.records.size();) {
    std::size_t j = i;
    while (j < a.records.size() && a.records[j].pid == a.records[i].pid && a.records[j].ns == a.records[i].ns) ++j;
    if (!any || a.records[i].ts_ns < earliest) {
      earliest = a.records[i].ts_ns;
      a.root_pid = a.records[i].pid;
      a.start_ns = earliest;
      any = true;
    }
    // One ProcessInfo per program image: a successful exec ends one, the records after it are the next.
    int image = 0;
    for (std::size_t first = i; first < j; ++image) {
      std::size_t end = first;
      while (end < j) {
        const Record& r = a.records[end++];
        if (r.kind == Kind::process && r.api == "exec" && end < j && !exec_failed(a.records, end - 1, j)) {
          // Threads other than the one that exec'd go on recording until the kernel ends them.
          // Their records come after the exec record but belong to this image: its recorder
          // numbered them after it (a higher seq), while the next image's recorder starts again
          // at 1 and notes written for it by the audit module or the preload library carry none.
          // Up to the next image's process record, those are moved before the boundary.
          const std::uint64_t exec_seq = r.seq;
          std::size_t next = end;
          while (next < j && !(a.records[next].kind == Kind::process && a.records[next].api == "process")) ++next;
          const auto old_image =
              std::stable_partition(a.records.begin() + static_cast<std::ptrdiff_t>(end),
                                    a.records.begin() + static_cast<std::ptrdiff_t>(next),
                                    [&](const Record& x) { return exec_seq != 0 && x.seq > exec_seq; });
          end = static_cast<std::size_t>(old_image - a.records.begin());
          break;
        }
      }
      ProcessInfo& p = a.processes.emplace_back();
      p.pid = a.records[first].pid;
      p.ns = a.records[first].ns;
      p.first_record = first;
      p.end_record = end;
      p.image = image;
      if (image > 0) {
        const ProcessInfo& before = a.processes[a.processes.size() - 2];
        p.exe = before.exec_path;  // until its own process record says
        p.ppid = before.ppid;
      }
      Model m(a, p, sink);
      m.set_range(first, end);
      for (std::size_t k = first; k < end; ++k) m.step(k);
      m.finish();
      first = end;
    }
    i = j;
  }
  find_diagnostics(a);
  return a;
}

}  // namespace drvshim::trace_analysis
