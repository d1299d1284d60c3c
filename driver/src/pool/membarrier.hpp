// SPDX-License-Identifier: Apache-2.0
#pragma once
// The asymmetric fence behind the pinned pool's hot slots: membarrier(2).
#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace drvshim::detail {

// Hot slots need the kernel's membarrier(2): the pool's last handle must see
// a block parked by another thread at that moment, or that thread must see
// the pool closing, without either side paying a fence on every release. Off
// where it is missing (or refused by a sandbox): every reuse then takes the lock.
inline bool membarrier_ready() noexcept {
#if defined(__linux__) && defined(SYS_membarrier)
  static const bool ready = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  return ready;
#else
  return false;
#endif
}
// A full fence on every thread of the process that is running now.
inline void fence_every_thread() noexcept {
#if defined(__linux__) && defined(SYS_membarrier)
  syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
#endif
}

}  // namespace drvshim::detail
