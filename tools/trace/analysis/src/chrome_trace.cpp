// SPDX-License-Identifier: Apache-2.0
// Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing): see chrome_trace.hpp.
#include <drvshim_recorder/json_line.hpp>
#include <drvshim_trace/api_info.hpp>
#include <drvshim_trace/chrome_trace.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>

namespace drvshim::trace_analysis {
namespace {

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Microseconds since the trace start with three decimals: exact nanoseconds.
std::string us(std::int64_t ns) {
  if (ns < 0) ns = 0;
  return fmt::format("{}.{:03}", ns / 1000, ns % 1000);
}

class Writer {
 public:
  void event(const std::string& body) {
    out_ += first_ ? "\n" : ",\n";
    first_ = false;
    out_ += '{';
    out_ += body;
    out_ += '}';
  }
  std::string take() { return std::move(out_); }
  std::string& raw() { return out_; }

 private:
  std::string out_;
  bool first_ = true;
};

std::string context_name(const ContextInfo& c) {
  return fmt::format("context 0x{:x} (device {} {})", c.handle, c.device, c.primary ? "primary" : "non-primary");
}

}  // namespace

std::string chrome_trace_json(const Analysis& a) {
  Writer w;
  w.raw() = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  const std::int64_t t0 = a.start_ns;
  std::size_t span = 0;                               // context spans: each its own id
  std::map<std::uint64_t, std::string> thread_names;  // of the current pid, as emitted
  for (std::size_t n = 0; n < a.processes.size(); ++n) {
    const ProcessInfo& p = a.processes[n];
    if (p.image == 0) {
      // A pid's program images share its track: its name lists them ("pid 7: /bin/sh, then /bin/app").
      const std::string name = [&] {
        std::string text = fmt::format("pid {}: {}", p.pid, p.exe.empty() ? "?" : p.exe);
        for (std::size_t m = n + 1; m < a.processes.size() && a.processes[m].pid == p.pid; ++m) {
          text += ", then " + (a.processes[m].exe.empty() ? std::string("?") : a.processes[m].exe);
        }
        return text;
      }();
      w.event(fmt::format("\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":{}}}", p.pid,
                          quoted(name)));
      w.event(fmt::format(
          "\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}", p.pid,
          p.pid == a.root_pid ? 0 : 1));
      thread_names.clear();
    }
    for (const auto& [tid, t] : p.threads) {
      const std::string tname = t.name.empty() ? fmt::format("tid {}", tid) : fmt::format("{} (tid {})", t.name, tid);
      const auto [named, fresh] = thread_names.try_emplace(tid, tname);
      if (!fresh && (t.name.empty() || named->second == tname)) continue;
      named->second = tname;
      w.event(fmt::format("\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":{}}}", p.pid,
                          tid, quoted(tname)));
    }
    for (std::size_t index = p.first_record; index < p.end_record; ++index) {
      const Record& r = a.records[index];
      const std::string ts = us(r.ts_ns - t0);
      switch (r.kind) {
        case Kind::call:
          w.event(
              fmt::format("\"ph\":\"X\",\"cat\":\"driver\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},"
                          "\"args\":{{\"args\":{},\"result\":{},\"lib\":{},\"ctx\":\"0x{:x}\"{}}}",
                          quoted(symbol_of(r)), r.pid, r.tid, ts, us(r.dur_ns), quoted(r.args),
                          quoted(recorder::result_name(r.result)), quoted(r.lib), r.ctx,
                          r.rt != 0 ? fmt::format(",\"runtime_call\":{}", r.rt) : ""));
          break;
        case Kind::runtime:
          w.event(
              fmt::format("\"ph\":\"X\",\"cat\":\"runtime\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},"
                          "\"args\":{{\"result\":{},\"correlation\":{}}}",
                          quoted(r.api), r.pid, r.tid, ts, us(r.dur_ns), r.result, r.rt));
          break;
        case Kind::event:
        case Kind::process:
          w.event(
              fmt::format("\"ph\":\"i\",\"s\":\"t\",\"cat\":\"event\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},"
                          "\"args\":{{\"detail\":{}}}",
                          quoted(r.api), r.pid, r.tid, ts, quoted(r.args)));
          break;
        case Kind::counts:
        case Kind::thread: break;
      }
    }
    // Context changes: instants on the thread whose current context changed.
    for (const auto& [tid, t] : p.threads) {
      for (const auto& h : t.history) {
        std::string what = "none";
        if (const auto it = p.contexts.find(h.context); it != p.contexts.end()) {
          what = context_name(it->second);
        } else if (h.context != 0) {
          what = fmt::format("0x{:x}", h.context);
        }
        w.event(
            fmt::format("\"ph\":\"i\",\"s\":\"t\",\"cat\":\"context\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},"
                        "\"args\":{{\"via\":{}}}",
                        quoted("current: " + what), p.pid, tid, us(h.ts_ns - t0), quoted(h.via)));
      }
    }
    // Driver initialisation.
    if (p.first_init >= 0) {
      const Record& r = a.records[static_cast<std::size_t>(p.first_init)];
      w.event(
          fmt::format("\"ph\":\"i\",\"s\":\"p\",\"cat\":\"context\",\"name\":\"driver initialised\",\"pid\":{},"
                      "\"tid\":{},\"ts\":{},\"args\":{{\"by\":{}}}",
                      p.pid, r.tid, us(r.ts_ns + r.dur_ns - t0), quoted(r.lib)));
    }
    // Context lifetimes: async spans, one per context (a handle the driver reused names several).
    for (const ContextInfo* context : contexts_in_creation_order(p)) {
      const ContextInfo& c = *context;
      const std::int64_t end = c.ended_ns >= 0 ? c.ended_ns : p.end_ns;
      const std::string id = fmt::format("\"ctx-{}\"", ++span);
      w.event(
          fmt::format("\"ph\":\"b\",\"cat\":\"context\",\"id\":{},\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},"
                      "\"args\":{{\"created_by\":{},\"lib\":{},\"flags\":{}}}",
                      id, quoted(context_name(c)), p.pid, c.creator_tid, us(c.created_ns - t0), quoted(c.created_by),
                      quoted(c.creator_lib), quoted(c.flags)));
      w.event(
          fmt::format("\"ph\":\"e\",\"cat\":\"context\",\"id\":{},\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},"
                      "\"args\":{{\"ended_by\":{}}}",
                      id, quoted(context_name(c)), p.pid, c.creator_tid, us(end - t0),
                      quoted(c.ended_ns >= 0 ? c.ended_by : std::string("alive at the end"))));
    }
  }
  std::string out = w.take();
  out += fmt::format(
      "\n],\"otherData\":{{\"generator\":\"drvshim-trace\",\"processes\":{},\"records\":{},"
      "\"diagnostics\":{}}}}}\n",
      a.processes.size(), a.records.size(), a.diagnostics.size());
  return out;
}

}  // namespace drvshim::trace_analysis
