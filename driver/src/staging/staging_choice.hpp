// SPDX-License-Identifier: Apache-2.0
#pragma once
// The staging engine's choices that depend only on its options and the CPUs
// the process may use: how many copy threads, and which copies go straight
// to the driver's own pageable path because staging would not beat it
// (H200 measurements behind each number: docs/staging.md, "The CPU budget").
#include <drvshim/staging_engine.hpp>

#include <algorithm>
#include <cstddef>

namespace drvshim::detail {

// Whether staging can beat the driver's own pageable path with this many
// threads, per direction (one thread copies pageable memory about as fast as
// the driver's path alone; with the process restricted to 2 CPUs, two threads
// won to the host but not to the device; three won both ways from 16 MiB).
// Below these counts every copy in that direction goes straight to the
// driver. An explicit StagingOptions::threads is the caller's choice: it
// stages from two threads either way.
inline constexpr unsigned kThreadsToStageToDevice = 3;
inline constexpr unsigned kThreadsToStageToHost = 2;

// Below this many threads (automatic count), small copies to the device still
// lose to the driver's path: a staged copy's fixed start (~50 µs: the first
// piece copied, the first DMA queued, the helpers joined) against the
// driver's ~16 µs. H200, 4 CPUs (3 threads), timed until the data is on the
// device: 1 MiB 0.8x the driver, 16 MiB 1.3x; a line through both crosses at
// ~2 MiB, so such copies go direct below 4 MiB.
inline constexpr unsigned kThreadsForSmallCopiesToDevice = 4;
inline constexpr std::size_t kDirectBelowToDeviceWithFewThreads = std::size_t{4} << 20;

// The options with the thread count settled: asked for, or three quarters of
// `cpus` rounded up, at most 12; never more than `cpus`.
constexpr StagingOptions resolved_options(StagingOptions o, unsigned cpus) {
  cpus = std::max(cpus, 1u);
  if (o.threads == 0) o.threads = std::clamp((cpus * 3 + 3) / 4, 1u, 12u);
  o.threads = std::min(o.threads, cpus);
  return o;
}

// Copies this large are bound by the bus, not by the crew: nine threads
// already keep it busy both ways, and more only compete with the DMAs for the
// host's memory. H100 machine (16 CPUs, automatic crew of 12), bench_staging
// crew, medians of interleaved rounds: 256 MiB to the host 52.5 GB/s with 12
// threads against 53.3-53.4 with 8 or 9 (their slowest rounds above the 12
// threads' fastest but one), to the device 51.1 against 51.4-51.9; 1 GiB
// within 0.6 % either way. Smaller copies keep the whole crew (on the H200, 16
// MiB to the device: 42.7 GB/s with 12 threads, 34.6 with 8).
inline constexpr std::size_t kLargeCopy = std::size_t{128} << 20;
inline constexpr unsigned kThreadsForLargeCopies = 9;

// How many threads (the caller included) work on one copy of `bytes`: the
// resolved count, or for large copies with an automatic count at most
// kThreadsForLargeCopies. An explicit count is the caller's choice.
constexpr unsigned threads_for_copy(const StagingOptions& asked, unsigned resolved_threads, std::size_t bytes) {
  if (asked.threads != 0 || bytes < kLargeCopy) return resolved_threads;
  return std::min(resolved_threads, kThreadsForLargeCopies);
}

// `asked` is what the caller passed, `resolved` the same after resolved_options().
constexpr bool stages_to_device(const StagingOptions& asked, const StagingOptions& resolved) {
  return resolved.threads >= (asked.threads != 0 ? kThreadsToStageToHost : kThreadsToStageToDevice);
}
constexpr bool stages_to_host(const StagingOptions& resolved) { return resolved.threads >= kThreadsToStageToHost; }

// The size below which copies to the device go straight to the driver: the
// caller's direct_below, raised when the thread count is automatic and too
// small to win on small copies.
constexpr std::size_t direct_below_to_device_for(const StagingOptions& asked, const StagingOptions& resolved) {
  if (asked.threads != 0 || resolved.threads >= kThreadsForSmallCopiesToDevice) return resolved.direct_below;
  return std::max(resolved.direct_below, kDirectBelowToDeviceWithFewThreads);
}

}  // namespace drvshim::detail
