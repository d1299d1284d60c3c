// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where drvshim's own calls meet a background initialisation (background.hpp):
// a call that needs a step the helper thread is running waits for it, visibly.
// Both functions cost one relaxed load when no BackgroundInit is alive, and do
// nothing on the helper thread itself (it is the one performing the step).
#include <atomic>

namespace drvshim::detail {

struct DriverCore;

// How many background initialisations are alive (the hooks' fast path).
extern std::atomic<int> g_background_live;

enum class StepNeed {
  use,   // the call cannot do the step itself: a failed step's error is thrown every time
  redo,  // the call is the step (Driver::init, a retain): the error is thrown once, then the call redoes it
};

// A background initialisation of `core` runs (or ran) its `init` step: waits
// for it, then throws its error as `need` says. `api` names the waiting call.
void wait_for_background_init_slow(const DriverCore& core, const char* api, StepNeed need);
inline void wait_for_background_init(const DriverCore& core, const char* api, StepNeed need) {
  if (g_background_live.load(std::memory_order_relaxed) != 0) [[unlikely]]
    wait_for_background_init_slow(core, api, need);
}

// The same for the `primary-context <device>` step (a StepNeed::redo call).
void wait_for_background_retain_slow(const DriverCore& core, int device, const char* api);
inline void wait_for_background_retain(const DriverCore& core, int device, const char* api) {
  if (g_background_live.load(std::memory_order_relaxed) != 0) [[unlikely]]
    wait_for_background_retain_slow(core, device, api);
}

}  // namespace drvshim::detail
