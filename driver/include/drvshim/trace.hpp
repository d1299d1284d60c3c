// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file trace.hpp
/// The trace recorder at the driver seam. When enabled, every driver call made
/// through drvshim produces a Record (sequence, timestamp, duration, thread,
/// API, short arguments, result, current context), and drvshim's own steps
/// (library load, table resolution, adopting an active primary context, ...)
/// produce event records. Records are readable in-process (records()) and, with
/// DRVSHIM_TRACE_FILE=path or set_file(), written as JSON lines: one object
/// per record, the text to_json() returns, with the Record's fields under the
/// keys seq, ts_ns, dur_ns, tid, pid, kind, api, args, result, result_name
/// (the CUresult's name) and ctx (hex). drvshim-trace writes the same format,
/// and `drvshim-trace --analyse FILE` reads either.
///
/// Each thread records into a log of its own, without a lock; the records are
/// gathered when records() is called, and a writer thread appends them to the
/// file every few milliseconds and at exit.
///
/// With tracing off (and the log level above trace) a driver call costs one
/// predictable branch more than the raw function-pointer call.
#include <drvshim/export.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace drvshim::trace {

/// What a record describes.
enum class Kind {
  call,   ///< a driver function called through the seam
  event,  ///< a step taken by drvshim itself (load, resolve, adopt, ...)
};

/// One trace entry.
struct Record {
  std::uint64_t seq = 0;          ///< 1-based, per process, in time order
  std::int64_t timestamp_ns = 0;  ///< start, nanoseconds since the recorder's epoch (steady clock)
  std::int64_t duration_ns = 0;   ///< time inside the driver (0 for events)
  std::uint64_t thread = 0;       ///< OS thread id (gettid)
  std::uint32_t pid = 0;          ///< process id (0: unknown); a forked child has its own
  Kind kind = Kind::call;
  std::string api;             ///< "cuInit", or the event name ("load", "adopt-primary-context")
  std::string args;            ///< short rendering of the arguments, or the event's detail
  int result = 0;              ///< CUresult of a call (0 for events)
  std::uintptr_t context = 0;  ///< the calling thread's current context after the call (0: none)
};

/// Starts or stops in-process recording. DRVSHIM_TRACE=1 in the environment
/// turns it on at the first driver load; DRVSHIM_TRACE_FILE turns it on too.
DRVSHIM_API void enable(bool on = true);

/// Whether in-process recording or a trace file is active.
DRVSHIM_API bool enabled() noexcept;

/// A copy of the records kept so far (at most max_records(); later ones are
/// counted in dropped()).
DRVSHIM_API std::vector<Record> records();

/// Forgets the records kept so far and resets dropped(). Sequence numbers keep counting.
DRVSHIM_API void clear();

/// The in-memory cap on kept records.
DRVSHIM_API std::size_t max_records() noexcept;

/// Records not kept because the cap was reached.
DRVSHIM_API std::uint64_t dropped() noexcept;

/// Writes every following record to `path` as JSON lines (appending), or stops
/// writing (after writing what is pending) when `path` is empty. The file is
/// never opened through a symbolic link, is created with mode 0600, must be a
/// regular file owned by this user, and stops at DRVSHIM_TRACE_MAX_BYTES
/// (default 1 GiB) with a last "trace-truncated" record. Throws
/// drvshim::InvalidArgumentError naming the path and the reason when the file
/// is refused.
DRVSHIM_API void set_file(const std::string& path);

/// Records a drvshim step as an event record (when tracing is on) and logs it
/// at debug level.
DRVSHIM_API void mark(std::string_view event, std::string_view what);

/// One record as a single JSON object (no trailing newline), the same text the
/// trace file holds.
DRVSHIM_API std::string to_json(const Record& record);

/// Renders records for people, one per line, with the time since the first
/// record: "+  0.012 ms  call   cuInit(0) -> CUDA_SUCCESS  [103.028 ms]".
DRVSHIM_API std::string format_timeline(const std::vector<Record>& records);

/// The name of a kind ("call", "event").
DRVSHIM_API const char* kind_name(Kind kind) noexcept;

}  // namespace drvshim::trace
