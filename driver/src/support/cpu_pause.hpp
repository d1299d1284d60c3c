// SPDX-License-Identifier: Apache-2.0
#pragma once
// The spin-wait hint shared by drvshim's spinning waits (the pool's lock, the
// staging crew's waits).
#include <thread>

namespace drvshim::detail {

// A spin-wait hint to the CPU (lets a sibling hyperthread run).
inline void cpu_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace drvshim::detail
