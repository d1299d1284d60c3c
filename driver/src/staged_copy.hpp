#pragma once
// A staged copy, run by the calling thread (staged_copy.cpp).
#include <drvshim/memory.hpp>
#include <drvshim/stream.hpp>

#include <cstddef>
#include <span>

namespace drvshim::detail {

struct StagingCore;

// Copies `src` to `dst` through the engine's ring on `stream`. With
// `wait_at_end`, ordered after the legacy default stream and complete on
// return; otherwise the source has been read on return and the DMAs follow
// on `stream`. Throws the first error, after the crew has left the copy and
// no DMA still uses a staging block.
void stage_to_device(StagingCore& c, const DeviceSpan<std::byte>& dst, std::span<const std::byte> src,
                     const StreamRef& stream, bool wait_at_end);
// Copies `src` to `dst` through the engine's ring on `stream`, ordered after
// the legacy default stream; complete on return. Errors as stage_to_device.
void stage_to_host(StagingCore& c, std::span<std::byte> dst, const DeviceSpan<const std::byte>& src,
                   const StreamRef& stream);

}  // namespace drvshim::detail
