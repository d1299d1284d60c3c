#include "view_checks.hpp"

#include <drvshim/error.hpp>

#include <atomic>
#include <mutex>
#include <unordered_set>

#include "log_internal.hpp"

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

void throw_stream_view_dead(const StreamRef& stream, const char* api) {
  throw InvalidArgumentError(
      api, fmt::format("a stream view (StreamRef of {}) was used after its Stream was destroyed", stream.name()),
      "keep the Stream alive while its StreamRefs are in use (checked in debug builds of "
      "libdrvshim; undefined behaviour in release builds)");
}

}  // namespace drvshim::detail
