// SPDX-License-Identifier: Apache-2.0
#pragma once
// Process-wide state that decides how the seam behaves: whether anything
// observes driver calls (trace, trace-level log, a forked child), the fork
// generation, and whether the process is exiting.
#include <drvshim/export.hpp>

#include <atomic>
#include <cstdint>

namespace drvshim::detail {

// Read on every driver call; kept in one byte so the fast path is a load and a branch.
// Exported (with the seam's slow path in core.hpp) for the one runtime_compat
// file that calls the seam directly (runtime_compat/src/peer.cpp).
extern std::atomic<bool> g_slow_path;
extern std::atomic<std::uint64_t> g_fork_generation;
extern std::atomic<bool> g_exiting;

inline bool slow_path_active() noexcept { return g_slow_path.load(std::memory_order_relaxed); }
inline std::uint64_t current_fork_generation() noexcept { return g_fork_generation.load(std::memory_order_relaxed); }
// True once exit() has started running drvshim's handler: destructors then
// make no driver call (libcuda may already be tearing itself down).
inline bool process_exiting() noexcept { return g_exiting.load(std::memory_order_relaxed); }

// Recomputes g_slow_path from the trace, log and fork state.
void refresh_slow_path() noexcept;

// Installs the pthread_atfork child handler (once per process).
void install_fork_handler() noexcept;

// Registers the atexit handler that sets g_exiting (once per process). Called
// right after the first successful cuInit, so it runs before any handler the
// driver registered during cuInit.
void install_exit_handler() noexcept;

}  // namespace drvshim::detail
