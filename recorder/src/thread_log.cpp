// SPDX-License-Identifier: Apache-2.0
#include "thread_log.hpp"

#include <new>

namespace drvshim::recorder::detail {

Chunk* Chunk::make(std::uint32_t capacity) noexcept {
  void* raw = ::operator new(sizeof(Chunk) + capacity, std::nothrow);
  if (raw == nullptr) return nullptr;
  auto* chunk = new (raw) Chunk;
  chunk->capacity = capacity;
  return chunk;
}

void Chunk::destroy(Chunk* chunk) noexcept {
  if (chunk == nullptr) return;
  chunk->~Chunk();
  ::operator delete(static_cast<void*>(chunk));
}

ThreadLog::~ThreadLog() {
  Chunk::destroy(spare.exchange(nullptr));
  Chunk* c = head;
  while (c != nullptr) {
    Chunk* n = c->next.load(std::memory_order_relaxed);
    Chunk::destroy(c);
    c = n;
  }
  delete[] counters;
}

ThreadLog* ThreadLog::make(std::uint64_t tid, std::size_t counter_slots) noexcept {
  auto* log = new (std::nothrow) ThreadLog;
  if (log == nullptr) return nullptr;
  log->tid = tid;
  log->head = log->tail = Chunk::make(kChunkBytes);
  if (log->head == nullptr) {
    delete log;
    return nullptr;
  }
  if (counter_slots > 0) {
    log->counters = new (std::nothrow) Counter[counter_slots];
    if (log->counters != nullptr) log->counter_slots = counter_slots;
  }
  return log;
}

unsigned char* ThreadLog::reserve(std::uint32_t bytes) noexcept {
  if (pos + bytes <= tail->capacity) [[likely]]
    return tail->data() + pos;
  // A chunk the consumer has finished with is reused: no allocation, no fresh pages.
  Chunk* fresh = spare.exchange(nullptr, std::memory_order_acquire);
  if (fresh != nullptr && fresh->capacity < bytes) {
    Chunk::destroy(fresh);
    fresh = nullptr;
  }
  if (fresh != nullptr) {
    fresh->next.store(nullptr, std::memory_order_relaxed);
    fresh->committed.store(0, std::memory_order_relaxed);
  } else {
    fresh = Chunk::make(bytes > kChunkBytes ? bytes : kChunkBytes);
    if (fresh == nullptr) return nullptr;
  }
  tail->next.store(fresh, std::memory_order_release);
  tail = fresh;
  pos = 0;
  return tail->data();
}

void ThreadLog::commit(std::uint32_t bytes) noexcept {
  pos += bytes;
  tail->committed.store(pos, std::memory_order_release);
}

void ThreadLog::recycle(Chunk* chunk) noexcept {
  Chunk* expected = nullptr;
  if (!spare.compare_exchange_strong(expected, chunk, std::memory_order_release)) Chunk::destroy(chunk);
}

bool ThreadLog::drained() noexcept {
  return head->next.load(std::memory_order_acquire) == nullptr &&
         read_pos == head->committed.load(std::memory_order_acquire);
}

}  // namespace drvshim::recorder::detail
