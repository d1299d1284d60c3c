#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <drvshim/error.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>

#include "log_internal.hpp"
#include "process.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace {

constexpr std::size_t kMaxRecords = 1u << 20;

struct Recorder {
  std::mutex mutex;
  std::vector<trace::Record> records;
  std::uint64_t next_seq = 1;
  std::uint64_t dropped = 0;
  std::FILE* file = nullptr;
  bool in_memory = false;
  std::atomic<bool> active{false};
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();

  void update_active() {
    active.store(in_memory || file != nullptr);
    detail::refresh_slow_path();
  }
};

Recorder& recorder() noexcept {
  // Never destroyed, so driver calls made during exit can still be recorded.
  static Recorder* r = [] {
    auto* rec = new Recorder;
    // Held across fork(), so a child never inherits it locked by a thread that is not there.
    pthread_atfork([] { recorder().mutex.lock(); }, [] { recorder().mutex.unlock(); }, [] { recorder().mutex.unlock(); });
    return rec;
  }();
  return *r;
}

void append_escaped(std::string& out, std::string_view s) {
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
}

void add(trace::Record rec) noexcept {
  auto& r = recorder();
  try {
    std::lock_guard<std::mutex> lock(r.mutex);
    rec.seq = r.next_seq++;
    if (r.file != nullptr) {
      std::string line = trace::to_json(rec);
      line += '\n';
      std::fwrite(line.data(), 1, line.size(), r.file);
      std::fflush(r.file);
    }
    if (r.in_memory) {
      if (r.records.size() < kMaxRecords) {
        r.records.push_back(std::move(rec));
      } else {
        ++r.dropped;
      }
    }
  } catch (...) {
    // Out of memory while tracing: the record is lost, the call is not.
  }
}

}  // namespace

namespace detail {

bool trace_active() noexcept { return recorder().active.load(std::memory_order_relaxed); }

std::int64_t trace_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              recorder().epoch)
      .count();
}

std::uint64_t thread_id() noexcept { return static_cast<std::uint64_t>(::syscall(SYS_gettid)); }

void trace_record_call(const char* api, std::int64_t start_ns, std::int64_t duration_ns, std::string args,
                       int result, std::uintptr_t context) noexcept {
  if (!trace_active()) return;
  trace::Record rec;
  rec.timestamp_ns = start_ns;
  rec.duration_ns = duration_ns;
  rec.thread = thread_id();
  rec.kind = trace::Kind::call;
  try {
    rec.api = api;
  } catch (...) {
    return;
  }
  rec.args = std::move(args);
  rec.result = result;
  rec.context = context;
  add(std::move(rec));
}

void trace_init_from_env() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      if (const char* on = std::getenv("DRVSHIM_TRACE"); on != nullptr && std::string_view(on) == "1") {
        trace::enable(true);
      }
      if (const char* path = std::getenv("DRVSHIM_TRACE_FILE"); path != nullptr && *path != '\0') {
        trace::set_file(path);
      }
    } catch (const std::exception& e) {
      logf(log::Level::error, "DRVSHIM_TRACE_FILE: {}", e.what());
    }
  });
}

}  // namespace detail

namespace trace {

void enable(bool on) {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.in_memory = on;
  r.update_active();
}

bool enabled() noexcept { return detail::trace_active(); }

std::vector<Record> records() {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.records;
}

void clear() {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.records.clear();
  r.dropped = 0;
}

std::size_t max_records() noexcept { return kMaxRecords; }

std::uint64_t dropped() noexcept {
  auto& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.dropped;
}

void set_file(const std::string& path) {
  auto& r = recorder();
  std::FILE* opened = nullptr;
  if (!path.empty()) {
    opened = std::fopen(path.c_str(), "ae");
    if (opened == nullptr) {
      throw InvalidArgumentError("trace::set_file",
                                 fmt::format("cannot open trace file \"{}\" for appending", path),
                                 "check that the directory exists and is writable (DRVSHIM_TRACE_FILE)");
    }
  }
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.file != nullptr) std::fclose(r.file);
  r.file = opened;
  r.update_active();
}

void mark(std::string_view event, std::string_view what) {
  detail::logf(log::Level::debug, "{}: {}", event, what);
  if (!detail::trace_active()) return;
  Record rec;
  rec.timestamp_ns = detail::trace_now_ns();
  rec.thread = detail::thread_id();
  rec.kind = Kind::event;
  rec.api = std::string(event);
  rec.args = std::string(what);
  add(std::move(rec));
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

std::string to_json(const Record& rec) {
  std::string out;
  out.reserve(160 + rec.args.size());
  out += fmt::format("{{\"seq\":{},\"ts_ns\":{},\"dur_ns\":{},\"tid\":{},\"kind\":\"{}\",\"api\":\"", rec.seq,
                     rec.timestamp_ns, rec.duration_ns, rec.thread, kind_name(rec.kind));
  append_escaped(out, rec.api);
  out += "\",\"args\":\"";
  append_escaped(out, rec.args);
  out += fmt::format("\",\"result\":{},\"result_name\":\"{}\",\"ctx\":\"0x{:x}\"}}", rec.result,
                     rec.kind == Kind::call ? result_name(rec.result) : "", rec.context);
  return out;
}

}  // namespace trace
}  // namespace drvshim
