#pragma once
// Points in drvshim's concurrent code where a test can stop a thread, or make
// an operating-system call fail, to force an interleaving or a failure that
// is otherwise a few instructions wide or impossible to provoke. Not for
// users: the declarations live here, outside the public headers, and only
// drvshim's own tests include them.
#include <drvshim/export.hpp>

#include <atomic>

namespace drvshim::detail::test_hooks {

enum class Point {
  pool_park,             // a thread is parking a block in its hot slot (the pool's last handle must wait for it)
  pool_unpark,           // another thread found a parked block of the size it wants and is about to take it
  thread_start,          // a helper thread is about to be started: returning false makes the start fail (EAGAIN)
  peer_access_answered,  // PeerAccess::enable has the driver's answer and is about to record its owner
};

// Called at each point; for thread_start its result decides, elsewhere it is ignored.
using Hook = bool (*)(Point);

// Installs `hook` (null: none). Tests only.
DRVSHIM_API void set(Hook hook) noexcept;

// The CPU count usable_cpus() answers (0: the real one), so the staging
// engine's choices for a CPU budget larger than the test machine's can be
// tested. Tests only.
DRVSHIM_API extern std::atomic<unsigned> g_usable_cpus;

extern std::atomic<Hook> g_hook;

// One relaxed load and a branch when no test hook is installed.
inline bool at(Point point) noexcept {
  const Hook hook = g_hook.load(std::memory_order_relaxed);
  if (hook == nullptr) [[likely]]
    return true;
  return hook(point);
}

}  // namespace drvshim::detail::test_hooks
