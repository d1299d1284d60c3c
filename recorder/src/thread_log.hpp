// SPDX-License-Identifier: Apache-2.0
#pragma once
// One thread's log: a chain of chunks written by the thread alone and read by
// the consumer. The producer publishes each entry with a release store of the
// chunk's committed size; a full chunk gets a successor and is never written
// again, so the consumer frees it once it has read it. Nothing recorded is
// ever moved.
#include <drvshim_recorder/recorder.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace drvshim::recorder::detail {

struct Chunk {
  std::atomic<Chunk*> next{nullptr};
  std::atomic<std::uint32_t> committed{0};
  std::uint32_t capacity = 0;
  std::uint32_t pad_ = 0;

  unsigned char* data() noexcept { return reinterpret_cast<unsigned char*>(this + 1); }
  // nullptr when out of memory.
  static Chunk* make(std::uint32_t capacity) noexcept;
  static void destroy(Chunk* chunk) noexcept;
};
static_assert(sizeof(Chunk) % 8 == 0);

inline constexpr std::uint32_t kChunkBytes = 64 * 1024;

struct ThreadLog {
  ThreadLog() = default;
  ThreadLog(const ThreadLog&) = delete;
  ThreadLog& operator=(const ThreadLog&) = delete;
  ~ThreadLog();

  // Creates a log with its first chunk and `counter_slots` counters; nullptr when out of memory.
  static ThreadLog* make(std::uint64_t tid, std::size_t counter_slots) noexcept;

  // ---- producer (the owning thread) ----
  // Space for an entry of `bytes` (a multiple of 8), or nullptr when no memory is left.
  unsigned char* reserve(std::uint32_t bytes) noexcept;
  // Publishes the entry reserved last.
  void commit(std::uint32_t bytes) noexcept;

  // ---- consumer (under the recorder's consumer lock) ----
  // Calls visit(const unsigned char* entry) for every published entry not yet seen, in
  // order, and retire(Chunk*) for each chunk read to its end (the entries visited stay
  // valid until the chunk is given back with recycle()).
  template <class Visit, class Retire>
  void drain(Visit&& visit, Retire&& retire) noexcept;
  // Hands a retired chunk back to the producer for reuse (one is kept), or frees it.
  void recycle(Chunk* chunk) noexcept;
  // Whether the consumer has read everything published.
  bool drained() noexcept;

  std::uint64_t tid = 0;
  char name[16] = {};

  // Producer state.
  Chunk* tail = nullptr;
  std::uint32_t pos = 0;
  std::int64_t budget = 0;  // records this thread may still add before asking the global budget

  // Shared.
  std::atomic<Chunk*> spare{nullptr};               // a chunk read to its end, for the producer's next one
  std::atomic<std::uint64_t> dropped{0};            // over the cap: the writer fell behind
  std::atomic<std::uint64_t> dropped_oom{0};        // no memory for a chunk
  std::atomic<std::uint64_t> dropped_reentrant{0};  // made while this thread was inside the recorder
  std::atomic<bool> exited{false};
  Counter* counters = nullptr;  // summary mode's, by slot (durations in ticks)
  std::size_t counter_slots = 0;

  // Consumer state.
  Chunk* head = nullptr;
  std::uint32_t read_pos = 0;
  bool announced = false;
  ThreadLog* next = nullptr;  // the registry's list
};

// Entries start with their size in bytes (std::uint32_t), see entry.hpp.
template <class Visit, class Retire>
void ThreadLog::drain(Visit&& visit, Retire&& retire) noexcept {
  for (;;) {
    std::uint32_t committed = head->committed.load(std::memory_order_acquire);
    while (read_pos < committed) {
      const unsigned char* entry = head->data() + read_pos;
      std::uint32_t size = 0;
      __builtin_memcpy(&size, entry, sizeof(size));
      visit(entry);
      read_pos += size;
    }
    Chunk* next_chunk = head->next.load(std::memory_order_acquire);
    if (next_chunk == nullptr) return;
    // The producer's last commit to this chunk happened before it linked the next one.
    if (read_pos < head->committed.load(std::memory_order_acquire)) continue;
    retire(head);
    head = next_chunk;
    read_pos = 0;
  }
}

}  // namespace drvshim::recorder::detail
