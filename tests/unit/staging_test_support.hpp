// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the staging tests share (test_staging.cpp, test_staging_safety.cpp,
// test_core_safety.cpp, test_per_device.cpp).
#include <drvshim/staging_engine.hpp>

#include <chrono>

namespace drvshim_test {

// A small engine's options: 1 MiB blocks, a ring of three (3 MiB), `threads`
// threads, copies from 1 MiB staged, and helpers that sleep between copies
// (the wake-up path is what runs).
inline drvshim::StagingOptions small_staging(unsigned threads) {
  drvshim::StagingOptions o;
  o.chunk_bytes = 1 << 20;
  o.depth = 3;
  o.threads = threads;
  o.direct_below = 1 << 20;
  o.spin = std::chrono::microseconds(0);
  return o;
}

}  // namespace drvshim_test
