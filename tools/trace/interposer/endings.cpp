// SPDX-License-Identifier: Apache-2.0
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
  // Nothing allocated here when a writer exists: _exit is often called from a signal handler
  // that may have interrupted malloc. The writer makes the trace-end record.
  recorder::note_ending(how != nullptr && std::strcmp(how, "_Exit") == 0 ? "_Exit" : "_exit", status);
  // Without a writer (a forked worker that recorded little) this thread drains: the worker's
  // records are lost otherwise, and _exit is rarely called from a handler that interrupted malloc.
  (void)recorder::flush_now(kEndTimeoutMs, recorder::writer_running());
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

// Signals that end programs in practice (crashes, kill, a terminal, a closed pipe) whose
// default action ends the process. The program sees drvshim-trace's handler for these in
// sigaction(); the rarer SIGUSR1/2, SIGALRM, SIGXCPU and SIGXFSZ are left untouched.
constexpr int kFatal[] = {SIGHUP, SIGINT, SIGQUIT, SIGILL,  SIGTRAP, SIGABRT,
                          SIGBUS, SIGFPE, SIGSEGV, SIGPIPE, SIGTERM, SIGSYS};

void on_fatal_signal(int sig, siginfo_t*, void*) {
  const int saved = errno;
  if (traced_now() && own_image()) {
    // Only stores and a futex wake on this thread: it may have been interrupted holding
    // malloc's lock or inside the recorder. The writer makes the trace-end record.
    recorder::note_ending("signal", sig);
    (void)recorder::flush_now(kSignalTimeoutMs, true);
  }
  // The default action comes back only now, after the drain: restored on entry (as
  // SA_RESETHAND does), a second copy of the signal (a group kill plus drvshim-trace's
  // forward, a double Ctrl-C) reaching a thread that does not block it would end the process
  // before the records were written. The signal, pending until this handler returns (or
  // raised again by the faulting instruction), then ends the process as it would have.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  (void)::sigaction(sig, &default_action, nullptr);
  (void)::raise(sig);
  errno = saved;
}

}  // namespace

void install_endings() noexcept {
  recorder::set_ending_records(&untraced_call_records);
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
    sa.sa_flags = static_cast<int>(SA_SIGINFO | SA_ONSTACK | SA_RESTART);
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
