// SPDX-License-Identifier: Apache-2.0
#pragma once
// The shared state of a StagingEngine (staging_engine.hpp): its pool, options,
// stream, events, crew and counters, and the choice between staging a copy
// and handing it straight to the driver.
#include <drvshim/event.hpp>
#include <drvshim/pinned_pool.hpp>
#include <drvshim/staging_engine.hpp>
#include <drvshim/stream.hpp>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

#include "seam/access.hpp"
#include "seam/core.hpp"
#include "staging/copy_crew.hpp"
#include "staging/cpu_budget.hpp"
#include "staging/staging_choice.hpp"

namespace drvshim::detail {

bool host_is_page_locked(const DriverCore& core, const void* address);

struct StagingCore {
  // DMAs of one copy that may be queued at once (each with its own event).
  static constexpr std::size_t kMaxInFlight = 8;

  PinnedPool pool;
  const bool automatic_threads;  // StagingOptions::threads was 0
  StagingOptions options;
  const bool stage_to_device;
  const bool stage_to_host;
  const std::size_t direct_below_to_device;
  Stream stream;
  std::mutex copy_mutex;             // one copy at a time: the ring, its events and the crew are per engine
  std::vector<Event> events;         // kMaxInFlight, created at the first staged copy and kept
  std::optional<Event> legacy_mark;  // recorded on the legacy stream by each synchronous copy
  CopyCrew crew;
  mutable std::mutex stats_mutex;
  StagingStats stats;

  StagingCore(const PinnedPool& p, const StagingOptions& o)
      : pool(p),
        automatic_threads(o.threads == 0),
        options(resolved(o)),
        stage_to_device(stages_to_device(o, options)),
        stage_to_host(stages_to_host(options)),
        direct_below_to_device(direct_below_to_device_for(o, options)),
        stream(Stream::create(p.context(), StreamFlags::non_blocking)),
        crew(stage_to_device || stage_to_host ? options.threads - 1 : 0, options.spin) {}

  // The thread count for the CPUs this process may use now (staging_choice.hpp).
  static StagingOptions resolved(const StagingOptions& o) { return resolved_options(o, usable_cpus()); }

  // Before any lock: in a forked child (a lock may be held by a thread that
  // is not there) and inside a host function, the engine is refused.
  void ensure_usable(const char* api) const { detail::Access::core(pool.context().device())->ensure_usable(api); }

  // Whether this copy goes straight to the driver, and counts it.
  bool direct(const void* host, std::size_t bytes, bool to_device) {
    bool go_direct = !(to_device ? stage_to_device : stage_to_host) ||
                     bytes < (to_device ? direct_below_to_device : options.direct_below);
    if (!go_direct) go_direct = host_is_page_locked(*detail::Access::core(pool.context().device()), host);
    count(go_direct, bytes);
    return go_direct;
  }

  // How a stream-ordered copy to the device goes. It must have read its
  // source on return: the driver's own path does that for pageable memory
  // only (it reads page-locked memory when the DMA runs), so page-locked
  // memory is staged at any size, a small copy through one block of its size.
  enum class AsyncToDevice { driver, one_block, ring };
  AsyncToDevice route_async_to_device(const void* host, std::size_t bytes) {
    const bool locked = host_is_page_locked(*detail::Access::core(pool.context().device()), host);
    const bool small = bytes < direct_below_to_device;
    // Pageable memory goes to the driver when small or when this direction is not staged at all.
    const bool to_driver = !locked && (small || !stage_to_device);
    count(to_driver, bytes);
    if (to_driver) return AsyncToDevice::driver;
    // Page-locked memory is staged at any size, also where the crew is too small to stage pageable
    // copies (the caller then copies alone): one block when small, else the ring.
    return small && locked ? AsyncToDevice::one_block : AsyncToDevice::ring;
  }

  void count(bool went_direct, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(stats_mutex);
    ++(went_direct ? stats.direct_copies : stats.staged_copies);
    if (!went_direct) stats.bytes_staged += bytes;
  }
};

}  // namespace drvshim::detail
