// SPDX-License-Identifier: Apache-2.0
#pragma once
// A staged copy, run by the calling thread (staged_copy.cpp).
#include <drvshim/memory.hpp>
#include <drvshim/pinned_pool.hpp>
#include <drvshim/stream.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace drvshim::detail {

struct StagingCore;

// How a staged copy to the device ends.
enum class DeviceCopyEnd {
  // Ordered after the legacy default stream, complete on return (the synchronous form).
  complete_after_legacy,
  // Complete on return, ordered on `stream` only.
  complete,
  // The source has been read on return; the DMAs follow on `stream` and the
  // staging blocks go back to the pool once it has passed them. The call
  // never waits for `stream`: the copy must fit the ring (fits_ring).
  in_flight,
};

// Whether a copy of `bytes` fits the engine's ring without reusing a block.
bool fits_ring(const StagingCore& c, std::size_t bytes) noexcept;

// Copies `src` to `dst` through the engine's ring on `stream`, ending as
// `end` says. Throws the first error, after the crew has left the copy and no
// DMA still uses a staging block the pool may hand out.
//
// The staging blocks go to `spent` at the end, for the caller to give back
// once it no longer holds the engine's lock (a block over the pool's cap is
// freed, and freeing pinned memory waits for the device).
void stage_to_device(StagingCore& c, const DeviceSpan<std::byte>& dst, std::span<const std::byte> src,
                     const StreamRef& stream, DeviceCopyEnd end, std::vector<PinnedBlock>& spent);
// Copies `src` to `dst` through the engine's ring on `stream`, ordered after
// the legacy default stream; complete on return. Errors as stage_to_device.
void stage_to_host(StagingCore& c, std::span<std::byte> dst, const DeviceSpan<const std::byte>& src,
                   const StreamRef& stream, std::vector<PinnedBlock>& spent);

}  // namespace drvshim::detail
