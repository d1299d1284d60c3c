// SPDX-License-Identifier: Apache-2.0
#pragma once
// View checks. Streams are checked in every build: a Stream takes a slot
// in a table that is never freed, its id carries the slot and the slot's
// generation, and destroying the Stream moves the generation on, so a
// StreamRef's check is two loads and a compare (docs/benchmarks.md: within
// the launch benchmark's spread). The other owners (DeviceBuffer,
// PinnedBuffer, a Module's globals) are checked in debug builds
// (DRVSHIM_CHECK_VIEWS: Debug builds, or the CMake option): they register an
// id, their views carry it, and every operation on a view checks that the
// owner is still alive before the driver sees the address. Release builds
// compile those checks out; the ids stay unique there too (per-stream state
// is keyed by them).
//
// Event views need no registry: an Event and its EventRefs share one state,
// whose handle the owner clears when it destroys the event, so they are
// checked in every build (live_event_handle).
#include <drvshim/stream.hpp>

#include <atomic>
#include <cstdint>

#include "seam/access.hpp"

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

// ---- stream ids: slot (low 32 bits) and generation (high 32 bits) -------------------------------

inline constexpr std::uint32_t kStreamSlotsPerChunk = 4096;
inline constexpr std::uint32_t kStreamSlotChunks = 16384;  // 64 Mi streams alive at once
// Chunks of generations, made on demand and never freed (a view may be checked at any time).
extern std::atomic<std::atomic<std::uint32_t>*> g_stream_slots[kStreamSlotChunks];
// Set on an id given out without a slot (none could be allocated): never refused.
inline constexpr std::uint64_t kUncheckedStream = std::uint64_t{1} << 63;

// A new Stream's id: unique in the process, never 0.
std::uint64_t new_stream_id() noexcept;
// The Stream is destroyed: views carrying `id` fail their next check.
void retire_stream_id(std::uint64_t id) noexcept;
// Whether the Stream of `id` is alive (always for 0, the default streams).
inline bool stream_alive(std::uint64_t id) noexcept {
  if (id == 0 || (id & kUncheckedStream) != 0) return true;
  const auto slot = static_cast<std::uint32_t>(id);
  const std::atomic<std::uint32_t>* chunk = g_stream_slots[slot / kStreamSlotsPerChunk].load(std::memory_order_acquire);
  return chunk[slot % kStreamSlotsPerChunk].load(std::memory_order_relaxed) == static_cast<std::uint32_t>(id >> 32);
}

[[noreturn]] void throw_stream_view_dead(const StreamRef& stream, const char* api);

// Refuses a StreamRef whose Stream was destroyed (every build), before the
// driver sees a handle that may already name another stream.
inline void check_stream_view(const StreamRef& stream, const char* api) {
  if (!stream_alive(detail::Access::owner_id(stream))) [[unlikely]]
    throw_stream_view_dead(stream, api);
}

// The CUevent of `event` for a call of `api`. Throws InvalidArgumentError,
// before the driver is called, when its Event was destroyed (every build).
std::uintptr_t live_event_handle(const EventRef& event, const char* api);

}  // namespace drvshim::detail
