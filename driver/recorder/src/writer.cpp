// The writer thread: drains the logs into the trace file every few
// milliseconds, or sooner when a producer filled a chunk. It blocks every
// signal (the traced program's handlers never run on it) and makes no
// driver call. One per process; a forked child starts its own on demand.
#include <pthread.h>
#include <signal.h>

#include <chrono>

#include "state.hpp"

namespace drvshim::recorder::detail {
namespace {

constexpr auto kPeriod = std::chrono::milliseconds(20);

void* writer_main(void*) noexcept {
  (void)pthread_setname_np(pthread_self(), "drvshim-trace");
  State& s = state();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(s.writer_mutex);
      s.writer_cv->wait_for(lock, kPeriod, [&] { return s.writer_wake; });
      s.writer_wake = false;
    }
    flush();
  }
  return nullptr;
}

}  // namespace

void ensure_writer(State& s) noexcept {
  if (!s.file_on.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(s.writer_mutex);
  if (s.writer_running) return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  s.writer_running = pthread_create(&thread, &attr, &writer_main, nullptr) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void wake_writer(State& s) noexcept {
  {
    std::lock_guard<std::mutex> lock(s.writer_mutex);
    s.writer_wake = true;
  }
  s.writer_cv->notify_one();
}

}  // namespace drvshim::recorder::detail
