// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file recorder.hpp
/// The trace recorder shared by libdrvshim's in-process trace and
/// drvshim-trace's interposer (each links its own copy; hidden symbols).
///
/// Producers (any thread, at every driver call) append to a log owned by
/// their thread: no lock, no copy of earlier records, no file write. The log
/// is a chain of fixed-size chunks; a full chunk is followed by a new one, so
/// growing never moves what was recorded. A consumer (the writer thread when a
/// file is open, or whoever asks for records()) drains every thread's log
/// under the consumer lock, which producers never take, orders the drained
/// records by time, numbers them, and hands them to the sinks: the in-memory
/// store and the trace file.
///
/// Fork: handlers installed with pthread_atfork hold every lock of the
/// recorder across fork(); the child drops the parent's logs, takes its own
/// pid and numbers its records from 1 again.
#include <drvshim_recorder/call_desc.hpp>
#include <drvshim_recorder/clock.hpp>
#include <drvshim_recorder/record.hpp>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace drvshim::recorder {

// Set while any sink (memory or file) is on; read on every driver call.
extern std::atomic<bool> g_active;

/// Whether records are kept anywhere (one relaxed load).
inline bool active() noexcept { return g_active.load(std::memory_order_relaxed); }

// ---- configuration -------------------------------------------------------------

/// The absolute time (now_ns()) records are measured from. Default: the
/// recorder's first use. drvshim-trace gives every traced process the same epoch.
void set_epoch(std::int64_t absolute_ns) noexcept;
std::int64_t epoch() noexcept;

/// The link-map namespace the recording library was loaded into (dlmopen),
/// written with every record so two copies in one process stay apart. 0 (the
/// default): the main namespace.
void set_namespace(std::uint32_t ns) noexcept;

/// Keeps records in memory (records()) or stops keeping new ones.
void set_memory(bool on) noexcept;
bool memory() noexcept;

/// Appends every later record to `path` as JSON lines. The file is opened
/// without following a symbolic link, created with mode 0600, and refused
/// when it is not a regular file owned by this user; at `max_bytes` a last
/// record says the trace was truncated and nothing more is written. An empty
/// path writes what is pending and closes the file. Returns "" or why the
/// file was refused (nothing changes then).
std::string set_file(const std::string& path, std::uint64_t max_bytes);
bool file_open() noexcept;

/// The per-thread call counters of summary mode: slot i counts calls of descs[i].
/// Set once, before the first record; also calibrates ticks() (clock.hpp).
void set_counters(const CallDesc* descs, std::size_t n) noexcept;

/// Writes each record as soon as it is made (a forked child, which may _exit
/// at any time, uses this). Off by default.
void set_synchronous(bool on) noexcept;

// ---- producers (any thread; never block on a consumer) ------------------------------

/// A call whose arguments were rendered by the caller (libdrvshim's seam).
/// `api` must outlive the process (a string literal or static table).
void call_text(const char* api, std::int64_t start_ns, std::int64_t duration_ns, std::string_view args, int result,
               std::uintptr_t context) noexcept;

/// A call recorded as raw words (call_desc.hpp), rendered later by the consumer.
/// `desc` and `kinds` must outlive the process.
void call_words(const CallDesc* desc, const ArgKind* kinds, std::int64_t start_ns, std::int64_t duration_ns, int result,
                std::uintptr_t context, std::uintptr_t caller, std::uint64_t rt, const std::uint64_t* words,
                std::size_t nwords, std::string_view strings) noexcept;

/// An event (or a process/runtime record) with a name and a detail.
void event(Kind kind, std::string_view api, std::string_view detail, std::int64_t start_ns = 0,
           std::int64_t duration_ns = 0, std::uint64_t rt = 0, int result = 0) noexcept;

/// Summary mode: counts a call of counter slot `slot` (below the n given to
/// set_counters()) that took `duration_ticks` (ticks(), clock.hpp) without recording
/// it. On the hot path of every folded driver call: inline, no lock, no locked
/// instruction, no allocation (the thread's counters are made with its log, at its
/// first record or count), no clock read of its own.
[[gnu::always_inline]] inline void count(std::size_t slot, std::uint64_t duration_ticks) noexcept;

// ---- consumers ---------------------------------------------------------------------

/// Drains every thread's log and returns a copy of the in-memory store.
std::vector<Record> records();
/// Drains, then calls `visit` for each record of the in-memory store (under the
/// consumer lock, which no producer takes): a copy in the caller's own type.
template <class Visit>
void for_each_record(Visit&& visit);
/// Forgets the in-memory store (and anything not yet drained) and resets dropped().
void clear();
/// Whether more than a quarter of the record budget is left: below that,
/// callers fold optional records (summary mode's failed calls) into counts so
/// the rest stays for the records that change state.
bool room_for_optional() noexcept;
/// The cap on records kept in memory or waiting to be written.
std::size_t max_records() noexcept;
/// Records lost since the last clear(): over the cap (the writer fell behind),
/// no memory, made by a signal handler while its thread was inside the
/// recorder, or not written (the file's cap, a full disk). The trace file
/// says so too: a "records-dropped" event per thread and reason
/// (docs/trace-format.md), and "trace-truncated" when the file stopped.
std::uint64_t dropped() noexcept;
/// Drains and writes now.
void flush() noexcept;
/// At exit: drains, writes the summary counters, and from then on writes
/// every further record synchronously (calls made by later exit handlers).
void final_flush() noexcept;
/// Drains and writes what every thread has committed, before the process
/// image ends without running exit handlers (exec, _exit, a fatal signal).
/// The writer thread does the drain while the caller waits at most
/// `timeout_ms`: the caller may be a signal handler that interrupted code
/// holding a lock a drain needs (malloc's). Without a writer, drains on the
/// calling thread, unless `from_signal`. Async-signal-safe with `from_signal`
/// (atomics, a futex wake and nanosleep). False when the records could not
/// be written in time, or the calling thread was interrupted inside the
/// recorder (its own pending records are then left to the writer).
bool flush_now(int timeout_ms, bool from_signal) noexcept;
/// Says how this image ends, for the consumer to write as its last record
/// ("trace-end"): `how` is "signal" (`value` the signal number) or a string
/// literal naming the exit path ("_exit", `value` the status). Async-signal-
/// safe: stores only; the record is made by the next drain (flush_now()).
void note_ending(const char* how, int value) noexcept;
/// Whether this process has a writer thread (a forked child starts one only
/// once it fills a chunk): without one, flush_now() from a signal handler
/// cannot write anything.
bool writer_running() noexcept;
/// Records the consumer adds before the trace-end of such an ending, made by
/// `make` on the writer thread (where allocating is safe): what a normal exit
/// would have recorded at its end.
void set_ending_records(void (*make)(std::vector<Record>& out)) noexcept;

namespace detail {
// One counter slot of a thread: written by that thread only, read by the consumer.
struct Counter {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> ticks{0};
};
// The calling thread's counters (nullptr until its log exists, and again once it ended).
extern constinit thread_local Counter* tl_counters;
// Makes the calling thread's log and returns its counters; nullptr without counters.
Counter* counters_slow() noexcept;
// for_each_record's engine: `visit(ctx, record)` for each stored record.
void visit_records(void (*visit)(void*, const Record&), void* ctx);
}  // namespace detail

[[gnu::always_inline]] inline void count(std::size_t slot, std::uint64_t duration_ticks) noexcept {
  detail::Counter* c = detail::tl_counters;
  if (c == nullptr) [[unlikely]] {
    c = detail::counters_slow();
    if (c == nullptr) return;
  }
  // Only this thread writes its counters: a plain load and store, no locked instruction.
  detail::Counter& k = c[slot];
  k.calls.store(k.calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  k.ticks.store(k.ticks.load(std::memory_order_relaxed) + duration_ticks, std::memory_order_relaxed);
}

template <class Visit>
void for_each_record(Visit&& visit) {
  detail::visit_records([](void* ctx, const Record& r) { (*static_cast<Visit*>(ctx))(r); }, &visit);
}

namespace testing {
/// Takes `n` records from the budget (gives them back when negative): tests of
/// what happens when the writer falls behind.
void take_budget(std::int64_t n) noexcept;
}  // namespace testing

/// The OS thread id of the caller (gettid), cached per thread.
std::uint64_t thread_id() noexcept;
/// This process's id as the recorder knows it (updated in a forked child).
std::uint32_t process_id() noexcept;

}  // namespace drvshim::recorder
