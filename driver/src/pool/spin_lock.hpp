// SPDX-License-Identifier: Apache-2.0
#pragma once
// The pinned pool's lock.
#include <atomic>
#include <thread>

#include "support/cpu_pause.hpp"

namespace drvshim::detail {

// The pool's lock: held for a few pushes and pops (and, for blocks released
// after a stream, a cuEventQuery), so spinning beats a futex-backed mutex,
// whose lock + unlock pair costs as much as the whole reuse.
class SpinLock {
 public:
  void lock() noexcept {
    for (;;) {
      if (!held_.exchange(true, std::memory_order_acquire)) return;
      for (int spins = 0; held_.load(std::memory_order_relaxed); ++spins) {
        if (spins < 64) {
          cpu_pause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

}  // namespace drvshim::detail
