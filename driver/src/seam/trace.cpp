// SPDX-License-Identifier: Apache-2.0
// drvshim's in-process trace: the public drvshim::trace API over the shared
// recorder (recorder/), which keeps per-thread logs and writes files off the
// calling thread.
#include <drvshim/error.hpp>
#include <drvshim_recorder/json_line.hpp>
#include <drvshim_recorder/recorder.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "env.hpp"
#include "log_internal.hpp"
#include "seam/process.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace {

constexpr std::uint64_t kDefaultMaxFileBytes = std::uint64_t{1} << 30;

trace::Record to_public(const recorder::Record& r) {
  trace::Record out;
  out.seq = r.seq;
  out.timestamp_ns = r.ts_ns;
  out.duration_ns = r.dur_ns;
  out.thread = r.tid;
  out.pid = r.pid;
  out.kind = r.kind == recorder::Kind::call ? trace::Kind::call : trace::Kind::event;
  out.api = r.api;
  out.args = r.args;
  out.result = r.result;
  out.context = r.ctx;
  return out;
}

recorder::Record to_internal(const trace::Record& r) {
  recorder::Record out;
  out.seq = r.seq;
  out.ts_ns = r.timestamp_ns;
  out.dur_ns = r.duration_ns;
  out.tid = r.thread;
  out.pid = r.pid;
  out.kind = r.kind == trace::Kind::call ? recorder::Kind::call : recorder::Kind::event;
  out.api = r.api;
  out.args = r.args;
  out.result = r.result;
  out.ctx = r.context;
  return out;
}

// DRVSHIM_TRACE_MAX_BYTES: the trace file's cap (default 1 GiB; 0 = no cap).
std::uint64_t max_file_bytes() {
  // Unset, or not a byte count (reported by the reader): the default.
  return detail::env::bytes("DRVSHIM_TRACE_MAX_BYTES").value_or(kDefaultMaxFileBytes);
}

void flush_at_exit() noexcept { recorder::final_flush(); }

}  // namespace

namespace detail {

bool trace_active() noexcept { return recorder::active(); }

std::int64_t trace_now_ns() noexcept { return recorder::now_ns(); }

std::uint64_t thread_id() noexcept { return recorder::thread_id(); }

void trace_record_call(const char* api, std::int64_t start_ns, std::int64_t duration_ns, const std::string& args,
                       int result, std::uintptr_t context) noexcept {
  if (!trace_active()) return;
  recorder::call_text(api, start_ns, duration_ns, args, result, context);
}

void trace_init_from_env() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      if (env::flag("DRVSHIM_TRACE", false)) trace::enable(true);
      if (const auto path = env::raw("DRVSHIM_TRACE_FILE")) trace::set_file(*path);
    } catch (const std::exception& e) {
      logf(log::Level::error, "DRVSHIM_TRACE_FILE: {}", e.what());
    }
  });
}

}  // namespace detail

namespace trace {

void enable(bool on) {
  recorder::set_memory(on);
  detail::refresh_slow_path();
}

bool enabled() noexcept { return detail::trace_active(); }

std::vector<Record> records() {
  std::vector<Record> out;
  recorder::for_each_record([&](const recorder::Record& r) { out.push_back(to_public(r)); });
  return out;
}

void clear() { recorder::clear(); }

std::size_t max_records() noexcept { return recorder::max_records(); }

std::uint64_t dropped() noexcept { return recorder::dropped(); }

void set_file(const std::string& path) {
  const std::string why = recorder::set_file(path, max_file_bytes());
  if (!why.empty()) {
    throw InvalidArgumentError("trace::set_file", why,
                               "give a path in a directory you can write to, to a regular file you own "
                               "(DRVSHIM_TRACE_FILE)");
  }
  if (!path.empty()) {
    static std::once_flag once;
    // Registered at the first file, so it runs after the exit handlers of
    // components initialised later (the CUDA Runtime's teardown is recorded).
    std::call_once(once, [] { std::atexit(&flush_at_exit); });
  }
  detail::refresh_slow_path();
}

void mark(std::string_view event, std::string_view what) {
  detail::logf(log::Level::debug, "{}: {}", event, what);
  if (!detail::trace_active()) return;
  recorder::event(recorder::Kind::event, event, what);
}

std::string format_timeline(const std::vector<Record>& records) {
  std::string out;
  if (records.empty()) return out;
  const std::int64_t t0 = records.front().timestamp_ns;
  for (const auto& r : records) {
    out += fmt::format("+{:9.3f} ms  {:<5}  ", static_cast<double>(r.timestamp_ns - t0) / 1e6, kind_name(r.kind));
    if (r.kind == Kind::call) {
      out += fmt::format("{}({}) -> {}  [{:.3f} ms]", r.api, r.args, result_name(r.result),
                         static_cast<double>(r.duration_ns) / 1e6);
      if (r.context != 0) out += fmt::format("  ctx 0x{:x}", r.context);
    } else {
      out += fmt::format("{}: {}", r.api, r.args);
    }
    out += '\n';
  }
  return out;
}

const char* kind_name(Kind kind) noexcept { return kind == Kind::call ? "call" : "event"; }

std::string to_json(const Record& rec) { return recorder::to_json(to_internal(rec)); }

}  // namespace trace
}  // namespace drvshim
