// SPDX-License-Identifier: Apache-2.0
// Thread logs: one per thread, created at the thread's first record and
// registered under the registry lock (the only lock a producer ever takes,
// once per thread). A pthread key's destructor marks the log exited when the
// thread ends, so the consumer frees it after reading it.
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "recorder_state.hpp"

namespace drvshim::recorder::detail {

constinit thread_local Counter* tl_counters = nullptr;

namespace {

thread_local ThreadLog* tl_log = nullptr;
thread_local std::uint64_t tl_tid = 0;

pthread_key_t g_key;
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

void on_thread_exit(void* p) noexcept {
  auto* log = static_cast<ThreadLog*>(p);
  if (log == nullptr) return;
  // Unused budget goes back, so a thread pool's exited threads do not shrink the cap.
  state().budget.fetch_add(log->budget, std::memory_order_relaxed);
  log->budget = 0;
  // A destructor running after this one may still record: it then gets a fresh log. The
  // counters go first: once the log says exited, the consumer may free them.
  if (tl_log == log) {
    tl_log = nullptr;
    tl_counters = nullptr;
  }
  log->exited.store(true, std::memory_order_release);
}

bool g_key_made = false;

void make_key() noexcept { g_key_made = pthread_key_create(&g_key, &on_thread_exit) == 0; }

// A host library that is unloaded (dlclose) must not leave threads a destructor to call
// in unmapped code; at exit this runs after every exit handler, when no log is reaped any more.
__attribute__((destructor)) void drop_key() noexcept {
  if (g_key_made) (void)pthread_key_delete(g_key);
}

}  // namespace

ThreadLog* current_log() noexcept {
  if (ThreadLog* log = tl_log; log != nullptr) [[likely]]
    return log;
  State& s = state();
  ThreadLog* log = ThreadLog::make(thread_id(), s.counter_slots);
  if (log == nullptr) return nullptr;
  (void)pthread_getname_np(pthread_self(), log->name, sizeof(log->name));
  {
    std::lock_guard<std::mutex> lock(s.registry_mutex);
    log->next = s.logs;
    s.logs = log;
  }
  pthread_once(&g_key_once, &make_key);
  (void)pthread_setspecific(g_key, log);
  tl_log = log;
  tl_counters = log->counters;
  return log;
}

Counter* counters_slow() noexcept {
  ThreadLog* log = current_log();
  return log != nullptr ? log->counters : nullptr;
}

void note_reentrant() noexcept {
  if (ThreadLog* log = tl_log; log != nullptr) {
    log->dropped_reentrant.fetch_add(1, std::memory_order_relaxed);
  } else {
    state().reentrant_without_log.fetch_add(1, std::memory_order_relaxed);
  }
}

void forget_current_log() noexcept {
  // The key would otherwise hand the freed log to on_thread_exit.
  if (tl_log != nullptr) (void)pthread_setspecific(g_key, nullptr);
  tl_log = nullptr;
  tl_counters = nullptr;
  tl_tid = 0;
}

}  // namespace drvshim::recorder::detail

namespace drvshim::recorder {

std::uint64_t thread_id() noexcept {
  if (detail::tl_tid == 0) [[unlikely]]
    detail::tl_tid = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  return detail::tl_tid;
}

}  // namespace drvshim::recorder
