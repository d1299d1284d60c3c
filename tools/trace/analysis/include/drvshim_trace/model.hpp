// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file model.hpp
/// Context-state reasoning over a record stream: a pure function of the
/// records (no driver, no clock, no environment), so recorded streams can be
/// replayed in tests. Per process it follows driver initialisation, each
/// device's primary context (active, flags, retains as seen, by library),
/// every context (creator, lifetime), each thread's context stack, objects
/// created and released (modules, libraries, memory, streams, events, graphs),
/// and errors; it folds all other calls into counts per thread and API. A
/// process that exec's another program is one ProcessInfo per program image.
#include <drvshim_recorder/record.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace drvshim::trace_analysis {

using recorder::Kind;
using recorder::Record;

struct ContextInfo {
  std::uintptr_t handle = 0;
  int device = -1;  // -1: unknown
  bool primary = false;
  std::string flags;  // as rendered ("0x0"), "" unknown
  std::uint64_t creator_tid = 0;
  std::string creator_lib;
  std::string created_by;  // the call that created (or first activated) it
  std::int64_t created_ns = 0;
  std::int64_t ended_ns = -1;  // -1: alive at the end of the trace
  std::string ended_by;        // "cuCtxDestroy_v2 by tid 12 (libfoo.so)", "released (last retain)", "reset"
  std::size_t create_index = 0;
};

struct PrimaryState {
  bool active = false;
  int retains = 0;  // retains minus releases as seen
  std::string flags = "0x0";
  std::uintptr_t handle = 0;
  std::map<std::string, int> retains_by_lib;
  std::int64_t inactive_since = -1;  // released to zero or reset
  std::string ended_by_lib;
};

struct CurrentChange {
  std::int64_t ts_ns;
  std::uintptr_t context;  // 0: none
  std::string via;         // the call that made it current
};

struct ThreadInfo {
  std::uint64_t tid = 0;
  std::string name;
  std::vector<std::uintptr_t> stack;  // top = current
  // Per entry of `stack`: the record (index) that pushed it (cuCtxPushCurrent, cuCtxCreate), -1 when it
  // was set rather than pushed (cuCtxSetCurrent replaces the top entry, the recorded current context).
  std::vector<long> pushed_by;
  std::vector<CurrentChange> history;
  std::set<std::uintptr_t> used;  // contexts this thread has used
  std::uintptr_t shown = 0;       // the current context as the timeline last showed it
  std::int64_t first_ns = 0;
  std::int64_t last_ns = 0;
};

struct ObjectInfo {
  std::string kind;    // "module", "library", "device memory", "host memory", "registration", "stream", "event", ...
  std::string handle;  // as rendered
  std::uint64_t bytes = 0;
  std::uintptr_t context = 0;
  std::uint64_t tid = 0;
  std::string lib;
  std::string created_by;
  std::int64_t created_ns = 0;
  std::size_t create_index = 0;
};

struct Folded {
  std::uint64_t calls = 0;
  std::int64_t total_ns = 0;
};

// One line of the context-state timeline: a record and what it changed.
struct TimelineEntry {
  std::size_t index;   // into Analysis::records
  std::string note;    // "device 0 primary: inactive -> active, retains 0 -> 1"
  std::string text{};  // shown instead of the record itself when set (a line standing for several records)
};

// An entry point the real driver resolved (cuGetProcAddress) but does not export, which the
// interposer has no wrapper for (cuGL*, cuEGL*, cuVDPAU* in a driver without graphics interop).
struct UntracedEntryInfo {
  std::string key;            // "cuGLInit@2000 flags 0": symbol, version and flags asked
  std::string symbol;         // "cuGLInit"
  std::size_t first = 0;      // its first untraced-entry-point record
  std::uint64_t lookups = 0;  // untraced-entry-point records for it (one per lookup in older traces)
  std::uint64_t calls = 0;    // calls through what was handed out (untraced-entry-point-called), when counted
  long called_index = -1;     // that record, -1 none
};

// One program image of a process: a pid that exec's has one per program it ran, in order.
struct ProcessInfo {
  std::uint32_t pid = 0;
  std::uint32_t ns = 0;  // the link-map namespace of a driver copy loaded with dlmopen (0: the main one)
  std::uint32_t ppid = 0;
  std::size_t first_record = 0, end_record = 0;  // its records: [first_record, end_record) of Analysis::records
  int image = 0;                                 // 0: the pid's first image; 1 after its first exec, ...
  std::string exec_path;                         // what this image exec'd ("" none)
  std::string ended;  // the trace-end record's reason ("exit", "_exit", "signal 11 (SIGSEGV)", "exec"), "" none
  std::string exe;
  std::string cmdline;
  std::string driver;
  std::string mode;
  bool forked = false;              // a fork() child (no exec)
  bool parent_initialized = false;  // its parent had initialised CUDA before the fork
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;

  std::vector<std::size_t> inits;  // every cuInit call
  long first_init = -1;            // the first successful cuInit (index), -1 none
  std::map<int, PrimaryState> primaries;
  std::map<std::uintptr_t, ContextInfo> contexts;  // by handle: the latest context the handle named
  std::vector<std::uintptr_t> context_order;       // the handles of `contexts`, each once, in creation order
  // Ended contexts whose handle the driver later handed out again (contexts_in_creation_order lists all).
  std::vector<ContextInfo> replaced_contexts;
  std::map<std::uint64_t, ThreadInfo> threads;
  std::vector<ObjectInfo> live;  // created and never released
  std::size_t released_objects = 0;
  std::vector<std::size_t> errors;                                // failed calls
  std::map<std::uint64_t, std::map<std::string, Folded>> folded;  // tid -> api -> count
  std::vector<TimelineEntry> timeline;
  std::vector<std::size_t> notices;  // events worth showing (redirects, untraced, truncation, drops, CUPTI, ends)
  std::vector<UntracedEntryInfo> untraced_entries;  // in the order first seen
  std::uint64_t untraced = 0;                       // lookups answered untraced
  std::uint64_t dropped = 0;                        // records the recorder could not keep (records-dropped)
  std::map<std::uint64_t, std::uint64_t> dropped_by_thread;
  std::map<std::string, std::uint64_t> dropped_by_reason;  // "writer-behind", "reentrant", ...
};

// Every context of a process (those whose handle was reused too), in creation order.
std::vector<const ContextInfo*> contexts_in_creation_order(const ProcessInfo& process);

struct Diagnostic {
  std::string id;           // "init-race", "no-current-context", ...
  std::string title;        // one line: what happened
  std::string explanation;  // one line: why it matters
  std::string fix;          // one line: what to do
  std::uint32_t pid = 0;
  int image = 0;                      // the program image of pid (ProcessInfo::image)
  std::vector<std::size_t> evidence;  // record indexes (the first few occurrences)
  std::size_t occurrences = 1;        // how often the same thing (same title) happened
};

struct Analysis {
  std::vector<Record> records;         // ordered by process, then time
  std::vector<ProcessInfo> processes;  // one per program image; a pid's images are adjacent, in order
  std::vector<Diagnostic> diagnostics;
  std::uint32_t root_pid = 0;  // the first process seen
  std::int64_t start_ns = 0;   // the earliest record's time: reports count from here
};

/// Analyses a record stream (any order; records are sorted by process, time, seq).
Analysis analyse(std::vector<Record> records);

}  // namespace drvshim::trace_analysis
