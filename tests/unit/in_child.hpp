// SPDX-License-Identifier: Apache-2.0
#pragma once
// Runs a test's body in a forked child: fork-safety tests and anything that
// must not leave state in the test process.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#if defined(__SANITIZE_THREAD__)
#define DRVSHIM_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DRVSHIM_TEST_TSAN 1
#endif
#endif

namespace drvshim_test {

#ifdef DRVSHIM_TEST_TSAN
inline constexpr bool kTsan = true;
#else
inline constexpr bool kTsan = false;
#endif

// Busy threads and forks, also under ThreadSanitizer. TSan's runtime (as
// shipped with GCC 12) does not lock its own allocator around fork(): a child
// forked while another thread was inside malloc deadlocks at its first
// allocation (LLVM fixed it in 2024, llvm/llvm-project pull request 96600,
// "[tsan] Lock/Unlock allocator and stacks on fork"). So under TSan the busy
// threads are stopped at a checkpoint of their loop, where they allocate
// nothing, before each fork; elsewhere they run on. Locks held at the fork
// are tested under TSan by test hooks that stop a thread inside drvshim.
class ForkQuiescer {
 public:
  // Called by each busy thread at the top of its loop.
  void checkpoint() {
    if (!kTsan) return;
    if (!pause_.load()) return;
    parked_.fetch_add(1);
    while (pause_.load()) std::this_thread::yield();
    parked_.fetch_sub(1);
  }
  // Around each fork: stops the `busy` threads at their checkpoint (TSan only).
  void stop(int busy) {
    if (!kTsan) return;
    pause_.store(true);
    while (parked_.load() < busy) std::this_thread::yield();
  }
  void go() { pause_.store(false); }

 private:
  std::atomic<bool> pause_{false};
  std::atomic<int> parked_{0};
};

// Runs `child` in a forked process and returns its exit code: what `child`
// returned, 98 when it threw, 128 + the signal when it died (a deadlock ends
// after 20 s as SIGALRM, not as a hung test).
template <class F>
int in_child(F&& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    int code = 99;
    try {
      code = child();
    } catch (...) {
      code = 98;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Forks `forks` children in turn, each running `child` (as in_child), with
// `quiet`'s `busy` threads stopped around each fork under TSan; returns how
// many children failed or hung.
template <class F>
int failed_children(ForkQuiescer& quiet, int busy, int forks, F&& child) {
  int failed = 0;
  for (int i = 0; i < forks; ++i) {
    quiet.stop(busy);
    failed += in_child(child) != 0 ? 1 : 0;
    quiet.go();
  }
  return failed;
}

}  // namespace drvshim_test
