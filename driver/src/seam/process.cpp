// SPDX-License-Identifier: Apache-2.0
#include "seam/process.hpp"

#include <pthread.h>

#include <cstdlib>
#include <mutex>

#include "log_internal.hpp"
#include "trace_internal.hpp"

namespace drvshim::detail {

std::atomic<bool> g_slow_path{false};
std::atomic<std::uint64_t> g_fork_generation{0};
std::atomic<bool> g_exiting{false};

void refresh_slow_path() noexcept {
  const bool slow = trace_active() || log_traces_calls() || g_fork_generation.load() != 0;
  g_slow_path.store(slow, std::memory_order_relaxed);
}

namespace {
void on_fork_child() noexcept {
  // Every DriverCore remembers the generation it was loaded in; a mismatch
  // means "created before fork", and the seam then refuses to call the driver.
  g_fork_generation.fetch_add(1);
  g_slow_path.store(true);
}

void mark_exiting() noexcept { g_exiting.store(true); }
}  // namespace

void install_fork_handler() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, &on_fork_child); });
}

void install_exit_handler() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(&mark_exiting); });
}

}  // namespace drvshim::detail
