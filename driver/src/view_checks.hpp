#pragma once
// The debug build's view checks (DRVSHIM_CHECK_VIEWS: Debug builds, or the
// CMake option): owners (DeviceBuffer, PinnedBuffer, Stream, a Module's
// globals) register an id, their views carry it, and every operation on a view
// checks that the owner is still alive before the driver sees the address or
// handle. Release builds compile the checks out; the ids stay unique there too
// (per-stream state is keyed by them).
//
// Event views need no registry: an Event and its EventRefs share one state,
// whose handle the owner clears when it destroys the event, so they are
// checked in every build (live_event_handle).
#include <drvshim/stream.hpp>

#include <cstdint>

#include "access.hpp"

namespace drvshim {
class EventRef;
}

namespace drvshim::detail {

// A new owner id: unique in the process, never 0; registered as alive in debug builds.
std::uint64_t new_owner_id() noexcept;
// The owner is gone: views carrying `id` fail their next check.
void retire_owner_id(std::uint64_t id) noexcept;
// Whether the owner of `id` is alive. True for id 0 (views made by hand, the
// default streams), in release builds, and after the registry ran out of memory
// (unchecked rather than a false refusal).
bool owner_alive(std::uint64_t id) noexcept;

[[noreturn]] void throw_stream_view_dead(const StreamRef& stream, const char* api);

// Refuses a StreamRef whose Stream was destroyed (debug builds; a no-op otherwise).
inline void check_stream_view([[maybe_unused]] const StreamRef& stream, [[maybe_unused]] const char* api) {
#ifdef DRVSHIM_CHECK_VIEWS
  if (!owner_alive(detail::Access::owner_id(stream))) throw_stream_view_dead(stream, api);
#endif
}

// The CUevent of `event` for a call of `api`. Throws InvalidArgumentError,
// before the driver is called, when its Event was destroyed (every build).
std::uintptr_t live_event_handle(const EventRef& event, const char* api);

}  // namespace drvshim::detail
