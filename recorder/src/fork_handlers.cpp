// SPDX-License-Identifier: Apache-2.0
// fork(): every lock of the recorder is held across it (prepare), so the
// child never inherits one locked by a thread that does not exist there. The
// child then drops the logs of the parent's threads (their records belong to
// the parent, which still writes them), takes its own pid, numbers its
// records from 1 and starts its writer at its first record.
#include <pthread.h>
#include <unistd.h>

#include "recorder_state.hpp"

namespace drvshim::recorder::detail {
namespace {

void prepare() noexcept {
  State& s = state();
  s.consumer_mutex.lock();
  s.registry_mutex.lock();
  s.writer_mutex.lock();
}

void parent() noexcept {
  State& s = state();
  s.writer_mutex.unlock();
  s.registry_mutex.unlock();
  s.consumer_mutex.unlock();
}

void child() noexcept {
  State& s = state();
  ThreadLog* l = s.logs;
  s.logs = nullptr;
  while (l != nullptr) {
    ThreadLog* next = l->next;
    s.budget.fetch_add(l->budget, std::memory_order_relaxed);
    delete l;
    l = next;
  }
  forget_current_log();
  s.pid.store(static_cast<std::uint32_t>(::getpid()));
  s.next_seq = 0;
  s.refs.clear();
  s.extras.clear();
  s.retired.clear();
  s.writer_running = false;
  s.writer_started.store(false);
  s.writer_tid.store(0);
  s.flush_requested.store(0);
  s.flush_done.store(0);
  s.ending_how.store(nullptr);
  s.ending_written = false;
  s.callers.clear();
  s.writer_mutex.unlock();
  s.registry_mutex.unlock();
  s.consumer_mutex.unlock();
}

}  // namespace

void install_fork_handlers() noexcept { (void)pthread_atfork(&prepare, &parent, &child); }

}  // namespace drvshim::recorder::detail
