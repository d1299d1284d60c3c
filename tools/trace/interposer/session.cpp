// SPDX-License-Identifier: Apache-2.0
// The interposer's life in a process: configuration from the environment
// drvshim-trace sets, the real driver, the recorder, fork, exit.
//
//   DRVSHIM_TRACE_OUT            the trace file (JSON lines); unset: forward without recording
//   DRVSHIM_TRACE_MODE           full (default) | summary | off
//   DRVSHIM_TRACE_REAL_LIBCUDA   the real driver (else searched as the loader would)
//   DRVSHIM_TRACE_EPOCH_NS       the time every process measures from (CLOCK_MONOTONIC ns)
//   DRVSHIM_TRACE_CHILDREN=0     record only in DRVSHIM_TRACE_ROOT_PID, forward in its children
//   DRVSHIM_TRACE_MAX_BYTES      the trace file's cap
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

#include "driver_search.hpp"
#include "env.hpp"
#include "interposer.hpp"

namespace drvshim::trace_interposer {

std::atomic<int> g_mode{kOff};
// The mode this process started in (kOff: not traced; drvshim_trace_set_mode then refuses).
std::atomic<int> g_started_mode{kOff};
std::atomic<bool> g_initialized{false};
std::atomic<std::uint64_t> g_untraced{0};

namespace {

// Only constant-initialised objects at namespace scope here (see real_driver_path()).
bool g_real_loaded = false;

// The real driver's path. Made on first use: start() runs from .init_array, possibly before
// this file's namespace-scope objects are constructed (which would reset them). Never
// destroyed: in a program that loads the driver with dlopen (the CUDA Runtime, drvshim) the
// exit handlers that destroy function-local statics run before stop(), which reads it.
std::string& real_driver_path() {
  static std::string* path = new std::string;
  return *path;
}

std::string own_library() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&own_library), &info) == 0 || info.dli_fname == nullptr) return {};
  return info.dli_fname;
}
bool g_follow_children = true;

// The link-map namespace this library was loaded into.
bool own_namespace(Lmid_t& lmid) {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&own_namespace), &info) == 0 || info.dli_fname == nullptr) return false;
  // Opened from here, the name resolves in this library's own namespace: this library.
  void* self = ::dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (self == nullptr) return false;
  const bool ok = ::dlinfo(self, RTLD_DI_LMID, &lmid) == 0;
  ::dlclose(self);
  return ok;
}
std::atomic<bool> g_missing_reported[kFnCount] = {};

std::string read_file(const char* path, std::size_t max) {
  std::string out;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  while (out.size() < max) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  if (out.size() > max) out.resize(max);
  return out;
}

std::string command_line() {
  std::string cmd = read_file("/proc/self/cmdline", 1024);
  while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
  for (char& c : cmd) {
    if (c == '\0') c = ' ';
  }
  return cmd;
}

std::string executable() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("?");
}

std::uint64_t env_u64(drvshim::detail::env::Name name, std::uint64_t fallback) {
  const char* text = drvshim::detail::env::value(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || *text == '-') {
    std::fprintf(stderr, "drvshim-trace: %s=\"%s\" is not a non-negative integer; using %llu\n", name.c_str(), text,
                 static_cast<unsigned long long>(fallback));
    return fallback;
  }
  return v;
}

// DRVSHIM_TRACE_MAX_BYTES: a byte count as libdrvshim reads it (1G, 512M, ...).
std::uint64_t max_trace_bytes() noexcept {
  constexpr std::uint64_t kDefault = std::uint64_t{1} << 30;
  const char* text = drvshim::detail::env::value("DRVSHIM_TRACE_MAX_BYTES");
  if (text == nullptr) return kDefault;
  if (const auto bytes = drvshim::detail::env::parse_bytes(text)) return *bytes;
  std::fprintf(stderr,
               "drvshim-trace: DRVSHIM_TRACE_MAX_BYTES=\"%s\" is not a byte count (such as 1G or 512M); using 1G\n",
               text);
  return kDefault;
}

void on_fork_child() noexcept {
  const bool parent_initialized = g_initialized.load();
  g_initialized.store(false);
  if (!g_follow_children) {
    g_started_mode.store(kOff);
    g_mode.store(kOff);
    return;
  }
  if (g_started_mode.load() == kOff) return;
  reset_untraced_calls();
  g_untraced.store(0);
  // A child of an initialised parent cannot use CUDA and may _exit at any time: write as it goes.
  if (parent_initialized) recorder::set_synchronous(true);
  recorder::event(
      recorder::Kind::process, "fork",
      fmt::format("parent={}; parent_initialized={}; exe={}", ::getppid(), parent_initialized ? 1 : 0, executable()));
}

__attribute__((constructor)) void start() noexcept {
  try {
    const char* out = drvshim::detail::env::value("DRVSHIM_TRACE_OUT");
    const char* mode_text = drvshim::detail::env::value("DRVSHIM_TRACE_MODE");
    int mode = kFull;
    if (mode_text != nullptr && *mode_text != '\0') {
      const std::string m = mode_text;
      if (m == "full") {
        mode = kFull;
      } else if (m == "summary") {
        mode = kSummary;
      } else if (m == "off") {
        mode = kOff;
      } else {
        std::fprintf(stderr, "drvshim-trace: DRVSHIM_TRACE_MODE=\"%s\" is not full, summary or off; using full\n",
                     mode_text);
      }
    }
    if (out == nullptr || *out == '\0') mode = kOff;  // placed on the path by hand: forward only
    g_follow_children = drvshim::detail::env::switch_value("DRVSHIM_TRACE_CHILDREN", true);
    const auto root = env_u64("DRVSHIM_TRACE_ROOT_PID", 0);
    if (!g_follow_children && root != 0 && root != static_cast<std::uint64_t>(::getpid())) mode = kOff;

    std::string real_path;
    const std::string why = load_real_driver(real_path);
    real_driver_path() = real_path;
    g_real_loaded = why.empty();
    if (!g_real_loaded) {
      std::fprintf(stderr,
                   "drvshim-trace: %s\ndrvshim-trace: every driver call now fails with CUDA_ERROR_STUB_LIBRARY; "
                   "set DRVSHIM_LIBCUDA (or drvshim-trace --libcuda) to the real libcuda.so.1\n",
                   why.c_str());
    }
    if (mode != kOff) {
      if (const auto epoch = env_u64("DRVSHIM_TRACE_EPOCH_NS", 0); epoch != 0) {
        recorder::set_epoch(static_cast<std::int64_t>(epoch));
      }
      recorder::set_counters(kDescs, kFnCount);
      // Loaded with dlmopen into a namespace of its own: its records are kept apart from those
      // of the copy in the main namespace (same pid, another driver instance).
      if (Lmid_t lmid = LM_ID_BASE; own_namespace(lmid) && lmid != LM_ID_BASE) {
        recorder::set_namespace(static_cast<std::uint32_t>(lmid));
      }
      const std::string file_error = recorder::set_file(out, max_trace_bytes());
      if (!file_error.empty()) {
        std::fprintf(stderr, "drvshim-trace: %s; this process is not traced\n", file_error.c_str());
        mode = kOff;
      }
    }
    pthread_atfork(nullptr, nullptr, &on_fork_child);
    if (mode != kOff) {
      std::size_t resolved = 0;
      for (void* p : g_real) resolved += p != nullptr ? 1 : 0;
      recorder::event(recorder::Kind::process, "process",
                      fmt::format("exe={}; ppid={}; driver={}; mode={}; entry_points={}/{}; cmdline={}", executable(),
                                  ::getppid(), g_real_loaded ? real_path : std::string("(none)"),
                                  mode == kFull ? "full" : "summary", resolved, kFnCount, command_line()));
    }
    g_started_mode.store(mode);
    g_mode.store(mode);
    if (mode != kOff) install_endings();
  } catch (...) {
    g_mode.store(kOff);
  }
}

// A second libcuda loaded beside the interposer (by absolute path, with the audit module
// off): its calls bypass the trace. Said once, at exit.
void report_bypassing_drivers(const std::string& real) noexcept {
  struct Ctx {
    std::string self, real, found;
  } ctx{trace_tool::real_path(own_library()), trace_tool::real_path(real), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* p) -> int {
        auto* c = static_cast<Ctx*>(p);
        const char* name = info->dlpi_name;
        if (name == nullptr || *name == '\0') return 0;
        const char* base = std::strrchr(name, '/');
        base = base != nullptr ? base + 1 : name;
        if (std::strncmp(base, "libcuda.so", 10) != 0) return 0;
        const std::string rp = trace_tool::real_path(name);
        if (rp != c->self && rp != c->real) c->found += (c->found.empty() ? "" : ", ") + std::string(name);
        return 0;
      },
      &ctx);
  if (!ctx.found.empty()) {
    recorder::event(recorder::Kind::event, "libcuda-bypass",
                    "another libcuda is loaded (" + ctx.found +
                        "): calls through it were not traced; run without --no-audit to redirect it");
  }
}

__attribute__((destructor)) void stop() noexcept {
  if (g_started_mode.load() == kOff) return;
  report_bypassing_drivers(real_driver_path());
  report_untraced_calls();
  record_exit();
  recorder::final_flush();
}

}  // namespace

void before_init() noexcept { cupti_start(); }

void after_init(CUresult result) noexcept {
  if (result == CUDA_SUCCESS) g_initialized.store(true);
}

CUresult missing_function(std::size_t id) noexcept {
  if (!g_real_loaded) return CUDA_ERROR_STUB_LIBRARY;
  if (g_mode.load(std::memory_order_relaxed) != kOff && !g_missing_reported[id].exchange(true)) {
    recorder::event(
        recorder::Kind::event, "missing-entry-point",
        fmt::format("{} is not in the real driver: the call returned CUDA_ERROR_NOT_FOUND", kFns[id].symbol));
  }
  return CUDA_ERROR_NOT_FOUND;
}

void lookup_matched_by_name(const char* symbol, int version, unsigned long long flags, std::size_t id) noexcept {
  static std::atomic<bool> said[kFnCount] = {};
  if (g_mode.load(std::memory_order_relaxed) == kOff || said[id].exchange(true)) return;
  recorder::event(recorder::Kind::event, "entry-point-by-name",
                  fmt::format("{}@{} flags {} came back as an address of no export; handed out the wrapper of {} "
                              "(the newest variant at or below that version), which calls its export",
                              symbol, version, flags, kFns[id].symbol));
}

void* untraced_lookup(const char* symbol, int version, unsigned long long flags, void* fn) noexcept {
  g_untraced.fetch_add(1, std::memory_order_relaxed);
  if (g_mode.load(std::memory_order_relaxed) == kOff) return fn;
  const UntracedEntry entry = untraced_entry(fn, symbol, version, flags);
  if (entry.fresh) {
    recorder::event(recorder::Kind::event, "untraced-entry-point",
                    fmt::format("{}@{} flags {} -> {} is no export of the real driver and has no wrapper: calls "
                                "through it are not traced{}",
                                symbol != nullptr ? symbol : "(null)", version, flags, fn,
                                entry.handed_out != fn ? " (only counted)" : ""));
  }
  return entry.handed_out;
}

}  // namespace drvshim::trace_interposer

// For benchmarks (tools/bench/bench_trace.cpp interleaves untraced, summary and full rounds in
// one process): switches a traced process between summary (1) and full (2) recording, or to
// forwarding without recording (0). Returns the previous mode; -1, changing nothing, when the
// process is not traced (no trace file: nothing could be recorded) or `mode` is none of those.
extern "C" __attribute__((visibility("default"))) int drvshim_trace_set_mode(int mode) noexcept {
  using namespace drvshim::trace_interposer;
  if (g_started_mode.load() == kOff || (mode != kOff && mode != kSummary && mode != kFull)) return -1;
  return g_mode.exchange(mode);
}
