// SPDX-License-Identifier: Apache-2.0
#pragma once
// drvshim-trace's interposer: a libcuda.so.1 whose every export (generated
// from the toolkit, driver_api_table.inc) records the call and forwards it to
// the real driver. Internal to the interposer.
#include <cuda.h>

#include <drvshim_recorder/recorder.hpp>

#include <atomic>
#include <cstdint>
#include <string_view>
#include <vector>

// The wrappers' addresses by id (generated, wrappers.cpp).
extern void* const drvshim_trace_wrapper_table[];

namespace drvshim::trace_interposer {

enum Mode : int { kOff = 0, kSummary = 1, kFull = 2 };

struct FnInfo {
  const char* symbol;  // exported name
  const char* base;    // cuGetProcAddress name
  int version;         // cuGetProcAddress version of this variant (0: none)
  int flags;           // 1 legacy stream, 2 per-thread default stream
  bool interesting;    // recorded one by one in summary mode
};

inline constexpr FnInfo kFns[] = {
#define DRVSHIM_TRACE_FN(id, sym, base, ver, flags, interesting, n, names, hex) \
  {#sym, #base, ver, flags, interesting != 0},
#include "driver_api_table.inc"
#undef DRVSHIM_TRACE_FN
};
inline constexpr std::size_t kFnCount = std::size(kFns);

constexpr std::size_t id_of(std::string_view symbol) {
  for (std::size_t i = 0; i < kFnCount; ++i) {
    if (symbol == kFns[i].symbol) return i;
  }
  return kFnCount;
}

// How each call renders (names and radix per parameter), by id.
extern const recorder::CallDesc kDescs[kFnCount];

// The real driver's entry points by id (nullptr: the real driver has none): the
// export, else what its cuGetProcAddress_v2 returns for the variant's key.
extern void* g_real[kFnCount];
// What the real cuGetProcAddress_v2 returns for each variant's key (nullptr: nothing).
extern void* g_lookup[kFnCount];
// kOff forwards without recording.
extern std::atomic<int> g_mode;
// A cuInit succeeded in this process: the current context can be read after each call.
extern std::atomic<bool> g_initialized;
// Lookups answered with a pointer the interposer could not name (handed out untraced).
extern std::atomic<std::uint64_t> g_untraced;

// The id whose real entry point is `fn`, or -1 (proc_address.cpp).
int id_of_real(const void* fn) noexcept;
// For a lookup whose pointer is no known address: the variant the driver's rule names
// (same base and stream flavour, the newest version at or below the one asked), or -1.
int id_for_lookup(const char* symbol, int version, unsigned long long flags) noexcept;
// Says (once per name) that a lookup was mapped by name and version.
void lookup_matched_by_name(const char* symbol, int version, unsigned long long flags, std::size_t id) noexcept;
// Indexes the real entry points (after real_driver.cpp resolved them).
void build_pointer_map() noexcept;

// Loads the real driver and resolves every entry point (real_driver.cpp).
// Returns "" or why the real driver could not be used.
std::string load_real_driver(std::string& path_out);

// What the wrappers call at special points (session.cpp).
void before_init() noexcept;
void after_init(CUresult result) noexcept;
// A call of a function the real driver does not have.
CUresult missing_function(std::size_t id) noexcept;
// A lookup returned a pointer `fn` that is no export of the real driver and names no
// wrapper: says so (once per symbol, version and flags) and returns what to hand out.
void* untraced_lookup(const char* symbol, int version, unsigned long long flags, void* fn) noexcept;

// The entries untraced_lookup() handed out (untraced_entries.cpp).
struct UntracedEntry {
  void* handed_out;  // a counting trampoline to the driver's function, or that function
  bool fresh;        // the first lookup of this symbol, version and flags
};
UntracedEntry untraced_entry(const void* real, const char* symbol, int version, unsigned long long flags) noexcept;
// At exit: an event for each entry called through what was handed out, and the summary.
void report_untraced_calls() noexcept;
// The same as records, made by the recorder's consumer when an image ends by _exit or a
// signal (the ending thread may not allocate).
void untraced_call_records(std::vector<recorder::Record>& out);
// A forked child counts its own calls.
void reset_untraced_calls() noexcept;

// The endings of a traced image (endings.cpp): registers the exec and _exit hooks with the
// preload library and handles fatal signals the program left at their default; the last
// record at a normal exit.
void install_endings() noexcept;
void record_exit() noexcept;

// CUPTI (optional, cupti_bridge.cpp): starts it when DRVSHIM_TRACE_CUPTI asks; the
// correlation id of the Runtime-API call the calling thread is inside (0: none).
void cupti_start() noexcept;
std::uint64_t current_runtime_call() noexcept;

}  // namespace drvshim::trace_interposer
