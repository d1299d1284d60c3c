// SPDX-License-Identifier: Apache-2.0
#pragma once
// Points in drvshim's concurrent code where a test can stop a thread, or make
// an operating-system call fail, to force an interleaving or a failure that
// is otherwise a few instructions wide or impossible to provoke. Not for
// users: the declarations live here, outside the public headers, and only
// drvshim's own tests include them.
#include <drvshim/export.hpp>

#include <atomic>
#include <string>

namespace drvshim::detail::test_hooks {

enum class Point {
  pool_park,             // a thread is parking a block in its hot slot (the pool's last handle must wait for it)
  pool_unpark,           // another thread found a parked block of the size it wants and is about to take it
  thread_start,          // a helper thread is about to be started: returning false makes the start fail (EAGAIN)
  peer_access_answered,  // PeerAccess::enable has the driver's answer and is about to record its owner
  background_register,   // BackgroundInit::start is about to list its state: returning false fails it (out of memory)
  background_settle,     // a background step's gate is locked while its outcome is written
  background_done,       // a background helper thread has said it is done and is about to wake the exit handler
  pool_locked,           // a pinned pool's lock is held by a block's return
  staging_dma_queued,    // a staged copy to the device queued a DMA on the caller's stream
  noexcept_alloc,        // an allocation in code that must not throw: returning false makes it throw std::bad_alloc
};

// Throws std::bad_alloc where a test makes `noexcept_alloc` fail: the
// out-of-memory paths of no-throw code are tested through it.
void fail_allocation_if_asked();

// Called at each point; for thread_start its result decides, elsewhere it is ignored.
using Hook = bool (*)(Point);

// Installs `hook` (null: none). Tests only.
DRVSHIM_API void set(Hook hook) noexcept;

// The CPU count usable_cpus() answers (0: the real one), so the staging
// engine's choices for a CPU budget larger than the test machine's can be
// tested. Tests only.
DRVSHIM_API extern std::atomic<unsigned> g_usable_cpus;

// Where usable_cpus() reads /proc/self/cgroup and /sys/fs/cgroup from: ""
// (the real files) or a test's fake tree. Tests only; set before the
// engine reads it, not while one may.
DRVSHIM_API void set_cgroup_root(const char* root);
DRVSHIM_API const std::string& cgroup_root() noexcept;

extern std::atomic<Hook> g_hook;

// One relaxed load and a branch when no test hook is installed.
inline bool at(Point point) noexcept {
  const Hook hook = g_hook.load(std::memory_order_relaxed);
  if (hook == nullptr) [[likely]]
    return true;
  return hook(point);
}

}  // namespace drvshim::detail::test_hooks
