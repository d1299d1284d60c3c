// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host's own start-up work for bench_startup: one definition for the
// drvshim child (bench_startup.cpp) and the nvcc program (bench_startup_cuda.cu),
// so every mode does the same work. A busy loop (parsing, hashing) or a sleep (I/O).
#include <chrono>
#include <thread>

namespace bench_startup {

inline long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void work(long long ms, bool busy) {
  const long long end = now_ns() + ms * 1000000LL;
  if (!busy) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return;
  }
  volatile unsigned long long x = 0;
  while (now_ns() < end) {
    for (int i = 0; i < 1000; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  }
}

}  // namespace bench_startup
