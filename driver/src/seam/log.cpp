// SPDX-License-Identifier: Apache-2.0
#include <pthread.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "env.hpp"
#include "log_internal.hpp"
#include "seam/process.hpp"

namespace drvshim {
namespace {

spdlog::level::level_enum to_spdlog(log::Level level) noexcept {
  switch (level) {
    case log::Level::trace: return spdlog::level::trace;
    case log::Level::debug: return spdlog::level::debug;
    case log::Level::info: return spdlog::level::info;
    case log::Level::warn: return spdlog::level::warn;
    case log::Level::error: return spdlog::level::err;
    case log::Level::off: return spdlog::level::off;
  }
  return spdlog::level::off;
}

log::Level from_spdlog(spdlog::level::level_enum level) noexcept {
  switch (level) {
    case spdlog::level::trace: return log::Level::trace;
    case spdlog::level::debug: return log::Level::debug;
    case spdlog::level::info: return log::Level::info;
    case spdlog::level::warn: return log::Level::warn;
    case spdlog::level::err:
    case spdlog::level::critical: return log::Level::error;
    default: return log::Level::off;
  }
}

// One sink for the library's logger: a user callback when one is set, else
// stderr. Swapping the callback under the sink's own mutex is what makes
// set_sink() safe while other threads log.
class RoutingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void set_callback(log::Sink callback) {
    std::lock_guard<std::mutex> lock(mutex_);
    callback_ = std::move(callback);
  }
  // Held across fork() (see state()), so a child never inherits it locked by
  // a thread that does not exist there.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() { mutex_.unlock(); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (callback_) {
      callback_(from_spdlog(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
      return;
    }
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    std::fwrite(formatted.data(), 1, formatted.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

 private:
  log::Sink callback_;
};

struct LoggerState {
  std::shared_ptr<RoutingSink> sink;
  std::shared_ptr<spdlog::logger> logger;
  std::atomic<bool> traces_calls{false};
};

LoggerState& state() noexcept {
  // Deliberately never destroyed: objects destroyed during exit may still log,
  // after function-local statics would already be gone.
  static LoggerState* s = [] {
    auto* st = new LoggerState;
    st->sink = std::make_shared<RoutingSink>();
    st->sink->set_pattern("[%H:%M:%S.%e] [drvshim] [%l] [tid %t] %v");
    st->logger = std::make_shared<spdlog::logger>("drvshim", st->sink);
    log::Level level = log::Level::warn;
    // Read without the env helpers' warnings, which go through this very logger.
    if (const auto value = detail::env::raw("DRVSHIM_LOG")) {
      if (auto parsed = log::parse_level(*value)) {
        level = *parsed;
      } else {
        std::fprintf(stderr,
                     "[drvshim] [warning] DRVSHIM_LOG=\"%s\" is not a level "
                     "(off, error, warn, info, debug, trace); using warn\n",
                     value->c_str());
      }
    }
    st->logger->set_level(to_spdlog(level));
    st->logger->flush_on(spdlog::level::warn);
    st->traces_calls.store(level == log::Level::trace);
    pthread_atfork([] { s->sink->lock_for_fork(); }, [] { s->sink->unlock_after_fork(); },
                   [] { s->sink->unlock_after_fork(); });
    return st;
  }();
  return *s;
}

}  // namespace

namespace log {

std::optional<Level> parse_level(std::string_view text) noexcept {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "trace") return Level::trace;
  if (lower == "debug") return Level::debug;
  if (lower == "info") return Level::info;
  if (lower == "warn" || lower == "warning") return Level::warn;
  if (lower == "error") return Level::error;
  if (lower == "off") return Level::off;
  return std::nullopt;
}

const char* level_name(Level level) noexcept {
  switch (level) {
    case Level::trace: return "trace";
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    case Level::off: return "off";
  }
  return "off";
}

void set_level(Level level) {
  auto& st = state();
  st.logger->set_level(to_spdlog(level));
  st.traces_calls.store(level == Level::trace);
  detail::refresh_slow_path();
}

Level level() noexcept { return from_spdlog(state().logger->level()); }

void set_sink(Sink sink) { state().sink->set_callback(std::move(sink)); }

// `off` is a level to set, not one to write at: spdlog would write an "off"
// message even with logging off (its check is level >= threshold).
bool enabled(Level level) noexcept { return level != Level::off && state().logger->should_log(to_spdlog(level)); }

void write(Level level, std::string_view message) noexcept {
  if (level == Level::off) return;
  try {
    state().logger->log(to_spdlog(level), message);
  } catch (...) {
    // A failing sink must not turn a log line into an error of the caller.
  }
}

}  // namespace log

namespace detail {

bool log_traces_calls() noexcept { return state().traces_calls.load(std::memory_order_relaxed); }

}  // namespace detail
}  // namespace drvshim
