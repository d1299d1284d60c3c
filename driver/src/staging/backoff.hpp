// SPDX-License-Identifier: Apache-2.0
#pragma once
// How the threads of one staged copy wait for each other.
#include <chrono>
#include <thread>

#include "support/cpu_pause.hpp"

namespace drvshim::detail {

// Waiting for another thread of the same copy: spin briefly (the wait is
// usually a few microseconds), then give the CPU away, since the thread
// waited for may need this very CPU (a process restricted to fewer CPUs than
// it has threads, or other work of the program; spinning alone made staged
// copies on one allowed CPU several times slower: docs/staging.md).
class Backoff {
 public:
  void wait() noexcept {
    if (++rounds_ < 1024) {
      cpu_pause();
    } else if (rounds_ < 1024 + 256) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  void reset() noexcept { rounds_ = 0; }

 private:
  unsigned rounds_ = 0;
};

}  // namespace drvshim::detail
