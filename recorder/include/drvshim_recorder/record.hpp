// SPDX-License-Identifier: Apache-2.0
#pragma once
// One decoded trace record: the unit of docs/trace-format.md, shared by the
// in-process trace (libdrvshim), drvshim-trace's interposer and the analysis.
#include <cstdint>
#include <string>
#include <string_view>

namespace drvshim::recorder {

enum class Kind : std::uint8_t {
  call,     // a driver function call
  event,    // a step of the recording component (load, init, a redirect, a warning)
  runtime,  // a Runtime-API call seen through CUPTI (encloses the driver calls it caused)
  counts,   // calls folded into a count (summary mode): count and total duration
  thread,   // a thread seen for the first time: args is its name
  process,  // a traced process started: args describes it
};

const char* kind_name(Kind kind) noexcept;
// False for an unknown name.
bool parse_kind(std::string_view name, Kind& kind) noexcept;

struct Record {
  std::uint64_t seq = 0;    // 1-based per process, in the order records were drained
  std::int64_t ts_ns = 0;   // start, ns since the recorder's epoch
  std::int64_t dur_ns = 0;  // time inside the call (0 for events)
  std::uint32_t pid = 0;    // process id (0: unknown, not written)
  std::uint64_t tid = 0;    // OS thread id
  Kind kind = Kind::call;
  std::string api;          // base name ("cuMemAlloc") or event name
  std::string symbol;       // the exported variant called ("cuMemAlloc_v2"); "" when not known (in-process trace)
  std::string args;         // rendered arguments (out parameters as ->value) or the event's detail
  int result = 0;           // CUresult of a call
  std::uintptr_t ctx = 0;   // the thread's current context after the call
  std::string lib;          // file name of the calling library ("" unknown)
  std::uint64_t rt = 0;     // correlation id of the enclosing Runtime-API call (0: none)
  std::uint64_t count = 0;  // counts records: number of calls folded
  std::uint32_t ns = 0;     // the link-map namespace (dlmopen) of the recording library; 0: the main one
};

}  // namespace drvshim::recorder
