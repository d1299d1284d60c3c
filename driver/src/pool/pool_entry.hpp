// SPDX-License-Identifier: Apache-2.0
#pragma once
// The pinned pool's record of one allocation.
#include <drvshim/event.hpp>
#include <drvshim/memory.hpp>

#include <cstddef>
#include <optional>
#include <utility>

namespace drvshim::detail {

// One pinned allocation, for its whole life in the pool: in a free list (the
// pool owns it) or held by a PinnedBlock (which points at it). Keeping the
// record with the block makes acquire and release a push and a pop under one
// short lock, with no map and no heap allocation: the 1 MiB reuse target is a
// few tens of nanoseconds, next to the driver's own 4 µs for a small pinned
// alloc + free.
struct PoolEntry {
  explicit PoolEntry(PinnedBuffer b) noexcept : data(static_cast<std::byte*>(b.data())), buffer(std::move(b)) {}
  std::byte* data;  // buffer.data(), read on every reuse
  PinnedBuffer buffer;
  std::optional<Event> event;  // set: reusable once it has completed
};

}  // namespace drvshim::detail
