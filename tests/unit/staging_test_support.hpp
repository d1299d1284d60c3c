// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the staging tests share (test_staging.cpp, test_staging_safety.cpp,
// test_core_safety.cpp, test_per_device.cpp).
#include <drvshim/staging_engine.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace drvshim_test {

// Byte i of test data `seed`: the low byte of splitmix64(i, seed). No period a
// copy could hide behind: data that repeats every few KiB (a linear pattern
// repeats every 2 KiB) makes bytes one ring lap or one block apart equal, and
// a copy that mixes them up passes.
inline std::uint8_t test_byte(std::size_t i, unsigned seed) noexcept {
  std::uint64_t z = (static_cast<std::uint64_t>(seed) << 40) + i + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<std::uint8_t>(z ^ (z >> 31));
}

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
