// SPDX-License-Identifier: Apache-2.0
#pragma once
// The recorder's clocks.
//
// now_ns(): CLOCK_MONOTONIC in nanoseconds, shared by every process on the
// machine, so records of a parent and its children line up. Every record's
// start time.
//
// ticks(): a counter for durations that are only summed (summary mode's
// per-thread counts), read on every counted driver call: the CPU's time-stamp
// counter on x86-64 when the kernel says it runs at a constant rate through
// sleep states (constant_tsc and nonstop_tsc), the generic timer on AArch64,
// else now_ns(). One instruction where clock_gettime costs a call into the
// vDSO (and a system call where the clock source has no vDSO path, as in some
// virtual machines). ns_per_tick() converts a sum of ticks.
#include <time.h>

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace drvshim::recorder {

inline std::int64_t now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

namespace detail {
// Whether ticks() reads the hardware counter (set by calibrate_ticks(), before any tick is taken).
extern std::atomic<bool> g_hardware_ticks;
// now_ns() as ticks, out of line (the hot path inlines only the counter read).
[[gnu::cold, gnu::noinline]] std::uint64_t ticks_from_clock() noexcept;
}  // namespace detail

// Inlined into every wrapper of drvshim-trace's interposer.
[[gnu::always_inline]] inline std::uint64_t ticks() noexcept {
#if defined(__x86_64__)
  if (detail::g_hardware_ticks.load(std::memory_order_relaxed)) [[likely]]
    return __rdtsc();
#elif defined(__aarch64__)
  if (detail::g_hardware_ticks.load(std::memory_order_relaxed)) [[likely]] {
    std::uint64_t v;
    asm volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
  }
#endif
  return detail::ticks_from_clock();
}

/// Chooses what ticks() reads and takes the reference point ns_per_tick() measures
/// from. Called once, before the first ticks() (set_counters() does).
void calibrate_ticks() noexcept;

/// Nanoseconds per tick, measured between calibrate_ticks() and now against
/// CLOCK_MONOTONIC (1 when ticks() reads now_ns()). Within the first millisecond
/// after calibrate_ticks() it waits for that millisecond to pass, so the rate is
/// good to about 1e-4.
double ns_per_tick() noexcept;

}  // namespace drvshim::recorder
