// SPDX-License-Identifier: Apache-2.0
#pragma once
// The only way drvshim calls a driver function (DRVSHIM_CU / DRVSHIM_TRY): the
// fast path straight through the table, the observed path (fork check, timing,
// trace record, trace-level log line), and the errors a failed call throws.
#include <cstring>
#include <string>
#include <type_traits>

#include <drvshim_recorder/call_desc.hpp>

#include "seam/driver_core.hpp"
#include "seam/process.hpp"

namespace drvshim::detail {

// ---- the seam ---------------------------------------------------------------

// Renders one argument for the trace and the trace-level log.
void append_arg(std::string& out, long long v);
void append_arg(std::string& out, unsigned long long v);
void append_arg(std::string& out, const void* p);
void append_arg(std::string& out, const char* s);
void append_arg(std::string& out, double v);

template <class T>
void append_any(std::string& out, T v, bool ok) {
  if constexpr (recorder::is_out(recorder::arg_kind<T>())) {
    // An out parameter: the value the driver wrote (the trace format's "->value").
    if (v == nullptr) {
      append_arg(out, static_cast<const void*>(nullptr));
    } else if (!ok) {
      out += "->?";
    } else {
      out += "->";
      append_any(out, *v, ok);
    }
  } else if constexpr (std::is_same_v<T, const char*>) {
    append_arg(out, v);
  } else if constexpr (std::is_null_pointer_v<T>) {
    append_arg(out, static_cast<const void*>(nullptr));
  } else if constexpr (std::is_pointer_v<T> && std::is_function_v<std::remove_pointer_t<T>>) {
    append_arg(out, reinterpret_cast<const void*>(v));
  } else if constexpr (std::is_pointer_v<T>) {
    append_arg(out, static_cast<const void*>(v));
  } else if constexpr (std::is_floating_point_v<T>) {
    append_arg(out, static_cast<double>(v));
  } else if constexpr (std::is_class_v<T>) {
    out += "{struct}";  // passed by value (CUmemLocation, ...): not rendered
  } else if constexpr (std::is_enum_v<T>) {
    append_arg(out, static_cast<long long>(v));
  } else if constexpr (std::is_signed_v<T>) {
    append_arg(out, static_cast<long long>(v));
  } else {
    append_arg(out, static_cast<unsigned long long>(v));
  }
}

// Renders the arguments of a call that returned `ok` (out parameters show what was written).
template <class... A>
std::string render_args([[maybe_unused]] bool ok, A... a) {
  std::string out;
  bool first = true;
  ((out += (first ? "" : ", "), first = false, append_any(out, a, ok)), ...);
  return out;
}

[[noreturn]] void throw_used_after_fork(const char* api);

// The observed path: fork check, timing, trace record, trace-level log line.
struct ObservedCall {
  explicit ObservedCall(const DriverCore& core) noexcept;
  void finish(Api id, CUresult result, std::string args) noexcept;
  const DriverCore& core;
  std::int64_t start_ns;
  bool wanted;  // whether the arguments need rendering at all
};

template <Api id, class... A>
CUresult invoke_observed(const DriverCore& core, typename ApiType<id>::type fn, A... a) {
  // Driver state from before fork() is unusable in the child: refuse without calling.
  if (core.forked()) throw_used_after_fork(api_name(id));
  ObservedCall call(core);
  const CUresult result = fn(a...);
  std::string args;
  if (call.wanted) {
    try {
      args = render_args(result == CUDA_SUCCESS, a...);
    } catch (...) {
      // Out of memory while rendering: the record goes without arguments.
    }
  }
  call.finish(id, result, std::move(args));
  return result;
}

template <Api id, class... A>
inline CUresult invoke(const DriverCore& core, A... a) {
  typename ApiType<id>::type fn;
  static_assert(sizeof(fn) == sizeof(AnyFn));
  const AnyFn raw = core.slots[index(id)];
  std::memcpy(&fn, &raw, sizeof(fn));
  // The one branch the seam costs when nothing observes it.
  if (__builtin_expect(!slow_path_active(), 1)) return fn(a...);
  return invoke_observed<id>(core, fn, a...);
}

// Builds and throws the error for a failed call. `objects` names what was involved.
// A sticky result (is_sticky_error) poisons the calling thread's current
// context and is reported as an asynchronous error detected at `api`.
// `context`: the context the failing call was about, when it is known and no
// ContextScope made it current (0: the scoped context, else the current one).
[[noreturn]] void raise(const DriverCore& core, int result, const char* api, std::string objects, std::string hint = {},
                        std::uintptr_t context = 0);

// raise() for a call between two contexts (a copy from one to the other): a
// sticky result is charged to whichever of them the driver answers it for
// (each is asked with cuStreamQuery, which does not wait), not to the one
// that was current, so
// a fault in the source leaves a healthy destination usable and the other
// way round. When neither answers it, the current one is poisoned, as raise().
[[noreturn]] void raise_across(const DriverCore& core, int result, const char* api, std::string objects,
                               std::uintptr_t first, std::uintptr_t second);

// After a submitted operation: with DRVSHIM_SYNC_EACH_OP=1, synchronises
// `stream` and blames a failure on the operation `api` itself. `objects` is a
// callable giving the description; it runs only when the switch is on, so the
// hot path formats nothing.
void sync_after_submit(const DriverCore& core, CUstream stream, const char* api, const std::string& objects);
template <class Objects>
inline void after_submit(const DriverCore& core, CUstream stream, const char* api, Objects&& objects) {
  if (__builtin_expect(core.sync_each_op, 0)) sync_after_submit(core, stream, api, objects());
}

}  // namespace drvshim::detail

// Calls driver function `alias` through the table of `core`.
#define DRVSHIM_CU(core, alias, ...) \
  ::drvshim::detail::invoke<::drvshim::detail::Api::k_##alias>((core)__VA_OPT__(, ) __VA_ARGS__)

// Calls it and throws the matching drvshim error on failure. `objects` is an
// expression giving a std::string; it is evaluated only on failure.
#define DRVSHIM_TRY(core, alias, objects, ...)                                                             \
  do {                                                                                                     \
    const CUresult drvshim_r_ =                                                                            \
        ::drvshim::detail::invoke<::drvshim::detail::Api::k_##alias>((core)__VA_OPT__(, ) __VA_ARGS__);    \
    if (drvshim_r_ != CUDA_SUCCESS) [[unlikely]]                                                           \
      ::drvshim::detail::raise((core), static_cast<int>(drvshim_r_),                                       \
                               ::drvshim::detail::api_name(::drvshim::detail::Api::k_##alias), (objects)); \
  } while (0)
