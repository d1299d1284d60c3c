// SPDX-License-Identifier: Apache-2.0
#include "support/view_checks.hpp"

#include <drvshim/error.hpp>

#include <atomic>
#include <mutex>
#include <new>
#include <unordered_set>
#include <vector>

#include "log_internal.hpp"
#include "support/fork_guarded.hpp"

namespace drvshim::detail {
namespace {

std::atomic<std::uint64_t> g_next_owner_id{1};

#ifdef DRVSHIM_CHECK_VIEWS
struct LiveOwners {
  std::mutex mutex;
  std::unordered_set<std::uint64_t> ids;
  // An id could not be registered (out of memory): unknown ids are then let
  // through, so a live owner is never refused.
  bool incomplete = false;
};
LiveOwners& live_owners() {
  static auto* owners = new LiveOwners;  // never destroyed: owners may die during exit
  return *owners;
}
#endif

}  // namespace

std::uint64_t new_owner_id() noexcept {
  const std::uint64_t id = g_next_owner_id.fetch_add(1, std::memory_order_relaxed);
#ifdef DRVSHIM_CHECK_VIEWS
  auto& owners = live_owners();
  std::lock_guard<std::mutex> lock(owners.mutex);
  try {
    owners.ids.insert(id);
  } catch (...) {
    owners.incomplete = true;
  }
#endif
  return id;
}

void retire_owner_id([[maybe_unused]] std::uint64_t id) noexcept {
#ifdef DRVSHIM_CHECK_VIEWS
  if (id == 0) return;
  auto& owners = live_owners();
  std::lock_guard<std::mutex> lock(owners.mutex);
  owners.ids.erase(id);
#endif
}

bool owner_alive([[maybe_unused]] std::uint64_t id) noexcept {
#ifdef DRVSHIM_CHECK_VIEWS
  if (id == 0) return true;
  auto& owners = live_owners();
  std::lock_guard<std::mutex> lock(owners.mutex);
  return owners.incomplete || owners.ids.count(id) != 0;
#else
  return true;
#endif
}

std::atomic<std::atomic<std::uint32_t>*> g_stream_slots[kStreamSlotChunks] = {};

namespace {

struct StreamSlots {
  std::mutex mutex;
  std::uint32_t chunks = 0;         // made so far
  std::vector<std::uint32_t> free;  // slots whose stream was destroyed
};
// Its lock is held across fork(): a child destroys the Streams it inherited.
StreamSlots& stream_slots() { return fork_guarded<StreamSlots>(); }
std::atomic<std::uint64_t> g_unchecked_streams{0};

}  // namespace

std::uint64_t new_stream_id() noexcept {
  auto& s = stream_slots();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::uint32_t slot = 0;
  if (!s.free.empty()) {
    slot = s.free.back();
    s.free.pop_back();
  } else {
    // A new chunk; its slots go to the free list, the first one is taken.
    if (s.chunks == kStreamSlotChunks) return kUncheckedStream | g_unchecked_streams.fetch_add(1);
    try {
      // Room for every slot of every chunk: retiring a slot never allocates.
      s.free.reserve(static_cast<std::size_t>(s.chunks + 1) * kStreamSlotsPerChunk);
      auto* chunk = new std::atomic<std::uint32_t>[kStreamSlotsPerChunk];
      // Generations start at 1, so that no id is 0.
      for (std::uint32_t i = 0; i < kStreamSlotsPerChunk; ++i) chunk[i].store(1, std::memory_order_relaxed);
      g_stream_slots[s.chunks].store(chunk, std::memory_order_release);
    } catch (const std::bad_alloc&) {
      return kUncheckedStream | g_unchecked_streams.fetch_add(1);  // unchecked rather than refused
    }
    const std::uint32_t first = s.chunks * kStreamSlotsPerChunk;
    ++s.chunks;
    for (std::uint32_t i = kStreamSlotsPerChunk; i-- > 1;) s.free.push_back(first + i);
    slot = first;
  }
  const std::uint32_t generation =
      g_stream_slots[slot / kStreamSlotsPerChunk].load(std::memory_order_relaxed)[slot % kStreamSlotsPerChunk].load(
          std::memory_order_relaxed);
  return (std::uint64_t{generation} << 32) | slot;
}

void retire_stream_id(std::uint64_t id) noexcept {
  if (id == 0 || (id & kUncheckedStream) != 0) return;
  auto& s = stream_slots();
  const auto slot = static_cast<std::uint32_t>(id);
  std::lock_guard<std::mutex> lock(s.mutex);
  auto& generation =
      g_stream_slots[slot / kStreamSlotsPerChunk].load(std::memory_order_relaxed)[slot % kStreamSlotsPerChunk];
  if (generation.load(std::memory_order_relaxed) != static_cast<std::uint32_t>(id >> 32)) return;  // retired already
  // Never 0 again after a wrap (ids are never 0), nor above 31 bits (the unchecked mark).
  std::uint32_t next = (generation.load(std::memory_order_relaxed) + 1) & 0x7fffffffu;
  if (next == 0) next = 1;
  generation.store(next, std::memory_order_relaxed);
  // The free list has room for every slot of every chunk (reserved with it).
  s.free.push_back(slot);
}

void throw_stream_view_dead(const StreamRef& stream, const char* api) {
  throw InvalidArgumentError(
      api, fmt::format("a stream view (StreamRef of {}) was used after its Stream was destroyed", stream.name()),
      "keep the Stream alive while its StreamRefs are in use; the driver is not called with the dead handle, which "
      "may already name another stream");
}

}  // namespace drvshim::detail
