// SPDX-License-Identifier: Apache-2.0
// The analysis for people: per process a context-state timeline, the calls
// folded into counts, a summary; then the diagnostics.
#include <drvshim_recorder/json_line.hpp>
#include <drvshim_trace/api_info.hpp>
#include <drvshim_trace/diagnostics.hpp>
#include <drvshim_trace/report.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace drvshim::trace_analysis {
namespace {

std::string ms(std::int64_t ns) { return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6); }

std::string at(const Analysis& a, std::int64_t ts) {
  return fmt::format("+{:.3f} ms", static_cast<double>(ts - a.start_ns) / 1e6);
}

std::string who(std::uint64_t tid, const std::string& lib) {
  return fmt::format("tid {}{}", tid, lib.empty() ? "" : " (" + lib + ")");
}

std::string describe(const ProcessInfo& p, std::uintptr_t ctx) {
  if (ctx == 0) return "none";
  const auto it = p.contexts.find(ctx);
  if (it == p.contexts.end()) return fmt::format("0x{:x}", ctx);
  const ContextInfo& c = it->second;
  return fmt::format("0x{:x} ({}{})", ctx, c.device >= 0 ? fmt::format("device {} ", c.device) : std::string(),
                     c.primary ? "primary" : "context");
}

std::string call_text(const Record& r) {
  if (r.kind == Kind::call) {
    return fmt::format("{}({}) -> {} [{}]", symbol_of(r), r.args, recorder::result_name(r.result), ms(r.dur_ns));
  }
  if (r.kind == Kind::runtime) return fmt::format("{}() [{}] (Runtime API)", r.api, ms(r.dur_ns));
  if (r.kind == Kind::process) return fmt::format("[{}]", r.api);
  return fmt::format("[{}] {}: {}", recorder::kind_name(r.kind), r.api, r.args);
}

std::string thread_label(const ProcessInfo& p, std::uint64_t tid) {
  const auto it = p.threads.find(tid);
  if (it == p.threads.end() || it->second.name.empty()) return fmt::format("tid {}", tid);
  return fmt::format("tid {} ({})", tid, it->second.name);
}

// "pid 7" for a pid's first program image, "pid 7 (image 2)" after an exec.
std::string pid_label(std::uint32_t pid, int image) {
  return image == 0 ? fmt::format("pid {}", pid) : fmt::format("pid {} (image {})", pid, image + 1);
}

// The records the recorder could not keep (records-dropped), "" none.
std::string dropped_line(const ProcessInfo& p) {
  if (p.dropped == 0) return {};
  std::string threads;
  for (const auto& [tid, n] : p.dropped_by_thread) {
    threads += fmt::format("{}{}: {}", threads.empty() ? "" : ", ", thread_label(p, tid), n);
  }
  std::string reasons;
  for (const auto& [reason, n] : p.dropped_by_reason) {
    reasons += fmt::format("{}{} {}", reasons.empty() ? "" : ", ", reason, n);
  }
  return fmt::format("  {} record(s) were not recorded ({}), by thread: {}\n", p.dropped, reasons, threads);
}

// How the image's trace ends: an exec, a fatal signal, or no final record at all (killed, or its
// records could not be written).
std::string ending(const Analysis& a, const ProcessInfo& p) {
  std::string out;
  // The image's last exec record, when the exec succeeded (exec_path is then set): other threads'
  // records may follow it until the kernel ended them.
  std::size_t exec_index = p.end_record;
  for (std::size_t k = p.end_record; k > p.first_record && !p.exec_path.empty(); --k) {
    if (a.records[k - 1].kind == Kind::process && a.records[k - 1].api == "exec") {
      exec_index = k - 1;
      break;
    }
  }
  if (exec_index < p.end_record) {
    const Record& r = a.records[exec_index];
    const std::string path = p.exec_path.empty() ? "?" : p.exec_path;
    const auto why = r.args.find("why=");
    if (r.args.find("traced=0") != std::string::npos) {
      out += fmt::format("  exec'd {} outside tracing ({}) at {}\n", path,
                         why == std::string::npos ? "no reason given" : r.args.substr(why + 4), at(a, r.ts_ns));
    } else {
      out += fmt::format("  exec'd {} at {}\n", path, at(a, r.ts_ns));
    }
  } else if (p.ended.rfind("signal", 0) == 0) {
    out += fmt::format("  pid {} died of {}\n", p.pid, p.ended);
  } else if (p.ended.empty() && p.end_record > p.first_record) {
    // A trace-truncated notice explains the end itself (the file's cap, a failed write).
    for (const std::size_t k : p.notices) {
      if (a.records[k].api != "trace-truncated") continue;
      out += fmt::format("  the trace of pid {} was cut short at {}: {}\n", p.pid, at(a, a.records[k].ts_ns),
                         a.records[k].args);
      return out + dropped_line(p);
    }
    out += fmt::format(
        "  the trace of pid {} ends without a final record: it was killed or its records could not be written; "
        "calls after {} may be missing\n",
        p.pid, at(a, a.records[p.end_record - 1].ts_ns));
  }
  return out + dropped_line(p);
}

}  // namespace

std::string format_timeline(const Analysis& a, const ProcessInfo& p, std::size_t max_lines) {
  std::string out;
  const std::size_t first = p.first_record;
  const std::size_t last = p.end_record;
  // Runtime-API calls by correlation id, to name the caller of nested driver calls.
  std::map<std::uint64_t, std::string> runtime_calls;
  for (std::size_t k = first; k < last; ++k) {
    if (a.records[k].kind == Kind::runtime && a.records[k].rt != 0) runtime_calls[a.records[k].rt] = a.records[k].api;
  }
  std::size_t shown = 0;
  for (const auto& e : p.timeline) {
    if (shown++ >= max_lines) {
      out += fmt::format("  ... {} more timeline entries (see the JSON trace)\n", p.timeline.size() - max_lines);
      break;
    }
    const Record& r = a.records[e.index];
    std::string inside;
    if (r.rt != 0) {
      const auto it = runtime_calls.find(r.rt);
      inside = fmt::format("  [inside {}]", it != runtime_calls.end() ? it->second : "a Runtime-API call");
    }
    out += fmt::format("  {:>12}  tid {:<7} {:<22} {}{}\n", at(a, r.ts_ns), r.tid, r.lib.empty() ? "-" : r.lib,
                       e.text.empty() ? call_text(r) : e.text, inside);
    if (!e.note.empty()) out += fmt::format("  {:>12}  {:<30} => {}\n", "", "", e.note);
  }
  if (!p.folded.empty()) {
    out += "  other calls (folded into counts), per thread:\n";
    for (const auto& [tid, apis] : p.folded) {
      std::vector<std::pair<std::string, Folded>> sorted(apis.begin(), apis.end());
      std::sort(sorted.begin(), sorted.end(),
                [](const auto& x, const auto& y) { return x.second.total_ns > y.second.total_ns; });
      std::string line;
      for (const auto& [api, f] : sorted) {
        line += fmt::format("{}{} x{} {}", line.empty() ? "" : ", ", api, f.calls, ms(f.total_ns));
      }
      out += fmt::format("    {}: {}\n", thread_label(p, tid), line);
    }
  }
  return out;
}

std::string format_summary(const Analysis& a, const ProcessInfo& p) {
  std::string out;
  if (p.first_init >= 0) {
    const Record& r = a.records[static_cast<std::size_t>(p.first_init)];
    out += fmt::format("  driver initialised by {} at {}; cuInit took {}; {} cuInit call(s) in all\n",
                       who(r.tid, r.lib), at(a, r.ts_ns), ms(r.dur_ns), p.inits.size());
  } else if (!p.inits.empty()) {
    const Record& r = a.records[p.inits.front()];
    out += fmt::format("  cuInit never succeeded: {} by {} returned {}\n", symbol_of(r), who(r.tid, r.lib),
                       recorder::result_name(r.result));
  } else {
    out += "  the driver was not initialised in this process\n";
  }
  const auto contexts = contexts_in_creation_order(p);
  out += fmt::format("  contexts ({}):\n", contexts.size());
  for (const ContextInfo* context : contexts) {
    const ContextInfo& c = *context;
    out += fmt::format("    0x{:x}  device {}  {}  flags {}  created by {} with {} at {}; {}\n", c.handle, c.device,
                       c.primary ? "primary" : "non-primary", c.flags.empty() ? "?" : c.flags,
                       who(c.creator_tid, c.creator_lib), c.created_by, at(a, c.created_ns),
                       c.ended_ns < 0 ? std::string("alive at the end")
                                      : fmt::format("ended at {} ({}), lifetime {}", at(a, c.ended_ns), c.ended_by,
                                                    ms(c.ended_ns - c.created_ns)));
  }
  for (const auto& [dev, ps] : p.primaries) {
    std::string by;
    for (const auto& [lib, n] : ps.retains_by_lib) {
      if (n != 0) by += fmt::format("{}{}: {}", by.empty() ? "" : ", ", lib.empty() ? "?" : lib, n);
    }
    out += fmt::format("  device {} primary context at the end: {}, {} retain(s) open{}\n", dev,
                       ps.active ? "active" : "inactive", ps.retains, by.empty() ? "" : " (" + by + ")");
  }
  out += "  threads and their current context:\n";
  constexpr std::size_t kShownChanges = 8;
  for (const auto& [tid, t] : p.threads) {
    std::string line = "none";
    for (std::size_t k = 0; k < t.history.size() && k < kShownChanges; ++k) {
      const auto& h = t.history[k];
      line += fmt::format(" -> {} at {} ({})", describe(p, h.context), at(a, h.ts_ns), h.via);
    }
    if (t.history.size() > kShownChanges) {
      const auto& last = t.history.back();
      line += fmt::format(" ... {} more change(s); at the end {} since {} ({})", t.history.size() - kShownChanges,
                          describe(p, last.context), at(a, last.ts_ns), last.via);
    }
    out += fmt::format("    {}: {}\n", thread_label(p, tid), line);
  }
  std::size_t unreleased = p.live.size();
  for (const ContextInfo* c : contexts) unreleased += c->ended_ns < 0 ? std::size_t{1} : std::size_t{0};
  out += fmt::format("  never released ({}):\n", unreleased);
  for (const ContextInfo* context : contexts) {
    const ContextInfo& c = *context;
    if (c.ended_ns < 0) {
      out += fmt::format("    {} context 0x{:x} (device {}), created by {}\n", c.primary ? "primary" : "non-primary",
                         c.handle, c.device, who(c.creator_tid, c.creator_lib));
    }
  }
  for (const auto& o : p.live) {
    out += fmt::format("    {} {}{} in context {}, by {} with {} at {}\n", o.kind, o.handle,
                       o.bytes != 0 ? fmt::format(" ({} bytes)", o.bytes) : "", describe(p, o.context),
                       who(o.tid, o.lib), o.created_by, at(a, o.created_ns));
  }
  out += fmt::format("  errors ({}):\n", p.errors.size());
  for (const std::size_t k : p.errors) {
    const Record& r = a.records[k];
    out += fmt::format("    {} {}: {}({}) -> {} ({})\n", at(a, r.ts_ns), who(r.tid, r.lib), symbol_of(r), r.args,
                       recorder::result_name(r.result), r.result);
  }
  if (!p.untraced_entries.empty() || p.untraced > 0) {
    out += fmt::format(
        "  untraced entry points ({}; {} lookup(s)): the driver resolves them but does not export them, "
        "so calls through them are not traced\n",
        p.untraced_entries.size(), p.untraced);
    for (const auto& e : p.untraced_entries) {
      out += fmt::format("    {}{}{}\n", e.key, e.lookups > 1 ? fmt::format(" ({} lookups)", e.lookups) : "",
                         e.calls > 0 ? fmt::format(": called {} time(s)", e.calls) : "");
    }
  }
  out += ending(a, p);
  return out;
}

std::string format_diagnostics(const Analysis& a) {
  std::string out = fmt::format("Diagnostics ({})\n", a.diagnostics.size());
  if (a.diagnostics.empty()) out += "  none\n";
  for (const auto& d : a.diagnostics) {
    out += fmt::format("  [{}] {}: {}{}\n", d.id, pid_label(d.pid, d.image), d.title,
                       d.occurrences > 1 ? fmt::format(" ({} times)", d.occurrences) : "");
    out += fmt::format("      why: {}\n      fix: {}\n", d.explanation, d.fix);
    for (const std::size_t k : d.evidence) {
      const Record& r = a.records[k];
      out += fmt::format("      {} {}: {}\n", at(a, r.ts_ns), who(r.tid, r.lib), call_text(r));
    }
  }
  return out;
}

std::string format_report(const Analysis& a, const ReportOptions& options) {
  std::string out;
  for (const auto& p : a.processes) {
    std::string cmdline = p.cmdline;
    std::replace(cmdline.begin(), cmdline.end(), '\n', ' ');
    if (cmdline.size() > 200) cmdline = cmdline.substr(0, 200) + "...";
    std::string how = p.image > 0           ? fmt::format(" (image {}, exec'd by image {})", p.image + 1, p.image)
                      : p.pid == a.root_pid ? std::string()
                                            : fmt::format(" (parent {})", p.ppid);
    if (p.ns != 0) {
      how += fmt::format(
          " (link-map namespace {}: a copy of the driver loaded with dlmopen, apart from the "
          "process's other calls)",
          p.ns);
    }
    out += fmt::format("== pid {}{}: {}{}\n", p.pid, how, p.exe.empty() ? "?" : p.exe,
                       cmdline.empty() ? "" : "  [" + cmdline + "]");
    if (!p.driver.empty()) out += fmt::format("   driver {}, mode {}\n", p.driver, p.mode);
    if (options.timeline) {
      out += "Timeline (context state)\n";
      out += format_timeline(a, p, options.max_timeline_lines);
    }
    if (options.summary) {
      out += fmt::format("Summary of {}\n", pid_label(p.pid, p.image));
      out += format_summary(a, p);
    }
    out += '\n';
  }
  if (options.diagnostics) out += format_diagnostics(a);
  return out;
}

}  // namespace drvshim::trace_analysis
