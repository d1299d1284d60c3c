// SPDX-License-Identifier: Apache-2.0
// The writer thread: drains the logs into the trace file every few
// milliseconds, or sooner when a producer filled a chunk or a signal handler,
// exec or _exit asked for a drain. It blocks every signal (the traced
// program's handlers never run on it) and makes no driver call. One per
// process; a forked child starts its own at its first record.
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "recorder_state.hpp"

namespace drvshim::recorder::detail {
namespace {

constexpr long kPeriodNs = 20'000'000;

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, long ns) noexcept {
  timespec ts{0, ns};
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
}

void* writer_main(void*) noexcept {
  (void)pthread_setname_np(pthread_self(), "drvshim-trace");
  State& s = state();
  s.writer_tid.store(thread_id(), std::memory_order_release);
  for (;;) {
    const std::uint32_t seen = s.writer_wake.load(std::memory_order_acquire);
    if (s.flush_requested.load(std::memory_order_acquire) == s.flush_done.load(std::memory_order_relaxed)) {
      futex_wait(s.writer_wake, seen, kPeriodNs);
    }
    // Everything committed before a request was made is drained by this flush.
    const std::uint64_t asked = s.flush_requested.load(std::memory_order_acquire);
    flush();
    s.flush_done.store(asked, std::memory_order_release);
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
  s.writer_started.store(s.writer_running, std::memory_order_release);
}

void wake_writer(State& s) noexcept {
  s.writer_wake.fetch_add(1, std::memory_order_release);
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&s.writer_wake), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr,
                  0);
}

}  // namespace drvshim::recorder::detail

namespace drvshim::recorder {

void note_ending(const char* how, int value) noexcept {
  using namespace detail;
  State& s = state();
  s.ending_value.store(value, std::memory_order_relaxed);
  s.ending_tid.store(thread_id(), std::memory_order_relaxed);
  s.ending_ns.store(now_ns(), std::memory_order_relaxed);
  s.ending_how.store(how, std::memory_order_release);
}

bool writer_running() noexcept { return detail::state().writer_started.load(std::memory_order_acquire); }

void set_ending_records(void (*make)(std::vector<Record>& out)) noexcept {
  detail::state().ending_records.store(make, std::memory_order_release);
}

bool flush_now(int timeout_ms, bool from_signal) noexcept {
  using namespace detail;
  State& s = state();
  const bool writer = s.writer_started.load(std::memory_order_acquire);
  const bool is_writer = writer && s.writer_tid.load(std::memory_order_acquire) == thread_id();
  if (!writer || is_writer) {
    // No writer to ask (memory only, or this is the writer): a handler, or a thread
    // interrupted inside the recorder, cannot drain safely.
    if (from_signal || tl_busy != 0) return false;
    flush();
    return true;
  }
  // Also when this thread was interrupted inside the recorder: the writer drains what the
  // other threads committed (and waits, bounded, for a lock this thread may hold).
  // The writer drains, not this thread: it may have been interrupted holding a lock
  // (malloc's, the program's) that a drain here would wait for forever.
  const std::uint64_t want = s.flush_requested.fetch_add(1, std::memory_order_acq_rel) + 1;
  wake_writer(s);
  long waited_ns = 0;
  const long limit_ns = static_cast<long>(timeout_ms) * 1'000'000;
  while (s.flush_done.load(std::memory_order_acquire) < want) {
    if (waited_ns >= limit_ns) return false;
    timespec ts{0, 200'000};
    (void)::nanosleep(&ts, nullptr);
    waited_ns += 200'000;
  }
  return true;
}

}  // namespace drvshim::recorder
