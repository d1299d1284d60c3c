// SPDX-License-Identifier: Apache-2.0
#pragma once
// The recorder's process-wide state (one per hosting library), shared by
// recorder.cpp (producers, drain, sinks), writer.cpp and fork_handlers.cpp.
#include <drvshim_recorder/recorder.hpp>
#include <drvshim_recorder/trace_file.hpp>

#include <mutex>
#include <vector>

#include "caller_names.hpp"
#include "thread_log.hpp"

namespace drvshim::recorder::detail {

inline constexpr std::size_t kMaxRecords = std::size_t{1} << 20;
// Records a thread takes from the global budget at a time.
inline constexpr std::int64_t kBudgetBlock = 256;

struct State {
  // Lock order (fork handlers take all three): consumer, registry, writer.
  std::mutex consumer_mutex;  // drains, the memory store, the file, seq
  std::mutex registry_mutex;  // the list of thread logs
  std::mutex writer_mutex;    // the writer thread's wake-ups

  // Registry.
  ThreadLog* logs = nullptr;

  // Consumer side (drain.cpp). The vectors keep their capacity from drain to drain.
  struct Ref {
    std::int64_t ts;
    ThreadLog* log;
    const unsigned char* entry;
  };
  std::vector<Record> memory_store;
  std::vector<Ref> refs;                               // this drain's entries, put in time order
  std::vector<std::pair<ThreadLog*, Chunk*>> retired;  // chunks read to their end, recycled after emitting
  std::vector<Record> extras;                          // records the consumer makes (thread, counts)
  Record scratch;                                      // the entry being written out
  std::string lines;
  std::uint64_t next_seq = 0;
  std::uint64_t dropped = 0;     // drained from logs and lost at the sinks
  std::uint64_t unwritable = 0;  // records a batch could not write (said by the next one)
  TraceFile file;
  CallerNames callers;
  bool final_done = false;

  // Configuration and flags read by producers.
  std::atomic<std::int64_t> budget{static_cast<std::int64_t>(kMaxRecords)};
  std::atomic<bool> memory_on{false};
  std::atomic<bool> file_on{false};
  std::atomic<bool> synchronous{false};
  std::atomic<bool> after_final{false};
  std::int64_t epoch = 0;
  const CallDesc* counter_descs = nullptr;
  std::size_t counter_slots = 0;
  std::atomic<std::uint32_t> pid{0};
  std::uint32_t ns = 0;  // set_namespace()
  // Records made by a signal handler that interrupted its thread's first record (no log yet).
  std::atomic<std::uint64_t> reentrant_without_log{0};

  // Writer thread. It sleeps on a futex word, not a condition variable or a pipe: a signal
  // handler can wake it (a futex wake is async-signal-safe), a forked child inherits no
  // waiter count, and no descriptor of the program's is ever taken or written.
  bool writer_running = false;  // under writer_mutex
  std::atomic<std::uint32_t> writer_wake{0};
  // Read without the lock on every record: whether this process has a writer thread.
  std::atomic<bool> writer_started{false};
  std::atomic<std::uint64_t> writer_tid{0};
  // Drains asked for from a signal handler (which may take no lock) and drains done since.
  std::atomic<std::uint64_t> flush_requested{0};
  std::atomic<std::uint64_t> flush_done{0};
  // How the image is ending (note_ending(), from a signal handler or _exit): the consumer
  // writes the trace-end record for it, so the ending thread allocates nothing.
  std::atomic<const char*> ending_how{nullptr};
  std::atomic<int> ending_value{0};
  std::atomic<std::uint64_t> ending_tid{0};
  std::atomic<std::int64_t> ending_ns{0};
  bool ending_written = false;  // under consumer_mutex
  std::atomic<void (*)(std::vector<Record>&)> ending_records{nullptr};
};

// Set while the calling thread is inside the recorder (making a record or draining): a
// signal handler that calls the driver then must not touch the thread's log or locks.
extern constinit thread_local int tl_busy;
struct BusyScope {
  BusyScope() noexcept { ++tl_busy; }
  ~BusyScope() { --tl_busy; }
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;
};
// Counts a record lost because its thread was already inside the recorder.
void note_reentrant() noexcept;

// Never destroyed: driver calls made during exit can still be recorded.
State& state() noexcept;

// Drains every log into the sinks (consumer_mutex held).
void drain_locked(State& s) noexcept;
// Starts the writer thread when a file is open and none runs in this process.
void ensure_writer(State& s) noexcept;
// Asks the writer to drain soon.
void wake_writer(State& s) noexcept;
// pthread_atfork handlers (installed once, when the state is made).
void install_fork_handlers() noexcept;
// The calling thread's log (created on first use); nullptr when out of memory.
ThreadLog* current_log() noexcept;
// Forgets the calling thread's log pointer (a forked child's handler).
void forget_current_log() noexcept;

}  // namespace drvshim::recorder::detail
