// How a traced process image ends, and its last records written before it
// does: exit (the interposer's destructor), exec and _exit (hooks the preload
// library calls, preload_hooks.h), and fatal signals (handlers installed here
// where the program left the default action). Each writes a last record
// ("trace-end", or "exec" for an exec) so the analysis can tell a trace that
// ended from one whose process vanished.
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "interposer.hpp"
#include "preload_hooks.h"

namespace drvshim::trace_interposer {
namespace {

// How long an ending waits for the writer to drain: exec and _exit may wait for a large
// backlog; a signal handler keeps the process from dying only briefly.
constexpr int kEndTimeoutMs = 10'000;
constexpr int kSignalTimeoutMs = 3'000;

// A fork()ed child runs the recorder's fork handler and so has its own pid there; a vfork()
// child shares its parent's memory and must not touch the parent's logs.
bool own_image() noexcept { return static_cast<std::uint32_t>(::getpid()) == recorder::process_id(); }

bool traced_now() noexcept { return g_mode.load(std::memory_order_relaxed) != kOff; }

int hook_before_exec(const char* path, int traced, const char* why) {
  if (!traced_now() || !own_image()) return 0;
  try {
    recorder::event(recorder::Kind::process, "exec",
                    traced != 0 ? fmt::format("path={}; traced=1", path != nullptr ? path : "?")
                                : fmt::format("path={}; traced=0; why={}", path != nullptr ? path : "?",
                                              why != nullptr ? why : "?"));
  } catch (...) {
    return 0;
  }
  (void)recorder::flush_now(kEndTimeoutMs, false);
  return 1;
}

void hook_exec_failed(int err) {
  if (!traced_now() || !own_image()) return;
  try {
    recorder::event(recorder::Kind::process, "exec-failed", fmt::format("errno={} ({})", err, std::strerror(err)));
  } catch (...) {
  }
}

void hook_before_exit(const char* how, int status) {
  if (!traced_now() || !own_image()) return;
  try {
    report_untraced_calls();
    recorder::event(recorder::Kind::process, "trace-end",
                    fmt::format("reason={}; status={}", how != nullptr ? how : "_exit", status));
  } catch (...) {
  }
  (void)recorder::flush_now(kEndTimeoutMs, false);
}

int hook_child_untraced(const char* path, const char* why) {
  if (!traced_now() || !own_image()) return 0;
  try {
    recorder::event(recorder::Kind::event, "child-untraced",
                    fmt::format("path={}; traced=0; why={}", path != nullptr ? path : "?", why != nullptr ? why : "?"));
  } catch (...) {
    return 0;
  }
  return 1;
}

constexpr DrvshimTraceHooks kHooks = {DRVSHIM_TRACE_HOOKS_VERSION, &hook_before_exec, &hook_exec_failed,
                                      &hook_before_exit, &hook_child_untraced};

// Signals whose default action ends the process.
constexpr int kFatal[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,  SIGTRAP, SIGABRT, SIGBUS,  SIGFPE, SIGUSR1,
                          SIGSEGV, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGXCPU, SIGXFSZ, SIGSYS};

// Appends `text` to buf at `n` (no allocation: a signal handler builds the record).
void put(char* buf, std::size_t size, std::size_t& n, const char* text) noexcept {
  while (*text != '\0' && n + 1 < size) buf[n++] = *text++;
  buf[n] = '\0';
}

void put_number(char* buf, std::size_t size, std::size_t& n, int v) noexcept {
  char tmp[12];
  std::size_t k = 0;
  auto u = static_cast<unsigned>(v < 0 ? -v : v);
  do {
    tmp[k++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (v < 0 && n + 1 < size) buf[n++] = '-';
  while (k > 0 && n + 1 < size) buf[n++] = tmp[--k];
  buf[n] = '\0';
}

void on_fatal_signal(int sig, siginfo_t*, void*) {
  const int saved = errno;
  if (traced_now() && own_image()) {
    // "reason=signal 11 (SIGSEGV)", built on the stack.
    char detail[96];
    std::size_t n = 0;
    put(detail, sizeof detail, n, "reason=signal ");
    put_number(detail, sizeof detail, n, sig);
    if (const char* name = ::sigabbrev_np(sig); name != nullptr) {
      put(detail, sizeof detail, n, " (SIG");
      put(detail, sizeof detail, n, name);
      put(detail, sizeof detail, n, ")");
    }
    recorder::event(recorder::Kind::process, "trace-end", std::string_view(detail, n));
    (void)recorder::flush_now(kSignalTimeoutMs, true);
  }
  errno = saved;
  // SA_RESETHAND restored the default action: the signal, pending until this handler
  // returns (or raised again by the faulting instruction), ends the process as it would have.
  (void)::raise(sig);
}

}  // namespace

void install_endings() noexcept {
  using Register = void (*)(const DrvshimTraceHooks*);
  if (auto reg = reinterpret_cast<Register>(::dlsym(RTLD_DEFAULT, "drvshim_trace_preload_register")); reg != nullptr) {
    reg(&kHooks);
  }
  for (const int sig : kFatal) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    // A program's own handler (or SIG_IGN) stays: it decides how that signal ends the process.
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_sigaction = &on_fatal_signal;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = static_cast<int>(SA_SIGINFO | SA_RESETHAND | SA_ONSTACK | SA_RESTART);
    (void)::sigaction(sig, &sa, nullptr);
  }
}

void record_exit() noexcept {
  try {
    recorder::event(recorder::Kind::process, "trace-end", "reason=exit");
  } catch (...) {
  }
}

}  // namespace drvshim::trace_interposer
