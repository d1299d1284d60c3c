// SPDX-License-Identifier: Apache-2.0
#pragma once
// The driver seam: the function table, the state of one loaded driver, and
// the only way drvshim calls a driver function (DRVSHIM_CU / DRVSHIM_TRY).
#include <cuda.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>

#include <drvshim/driver.hpp>
#include <drvshim/error.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <drvshim_recorder/call_desc.hpp>

#include "seam/api_list.hpp"
#include "seam/process.hpp"

namespace drvshim::detail {

enum class Need { Required, Optional };

enum class Api : std::uint16_t {
#define DRVSHIM_X(alias, name, ver, need) k_##alias,
  DRVSHIM_DRIVER_FUNCTIONS(DRVSHIM_X)
#undef DRVSHIM_X
      count_
};
inline constexpr std::size_t kApiCount = static_cast<std::size_t>(Api::count_);
constexpr std::size_t index(Api id) noexcept { return static_cast<std::size_t>(id); }

struct ApiInfo {
  const char* alias;
  const char* name;  // base name given to cuGetProcAddress
  int version;       // ABI version asked for
  bool required;
};
inline constexpr std::array<ApiInfo, kApiCount> kApiInfo{{
#define DRVSHIM_X(alias, name, ver, need) {#alias, #name, ver, Need::need == Need::Required},
    DRVSHIM_DRIVER_FUNCTIONS(DRVSHIM_X)
#undef DRVSHIM_X
}};
inline const char* api_name(Api id) noexcept { return kApiInfo[index(id)].name; }

template <Api id>
struct ApiType;
#define DRVSHIM_X(alias, name, ver, need) \
  template <>                             \
  struct ApiType<Api::k_##alias> {        \
    using type = PFN_##name##_v##ver;     \
  };
DRVSHIM_DRIVER_FUNCTIONS(DRVSHIM_X)
#undef DRVSHIM_X

using AnyFn = void (*)();

// Whether the calling thread runs a host function now (a callback the driver
// runs on its own thread; StreamRef::launch_host_func). CUDA forbids every
// driver call there: drvshim refuses its own calls with NotPermittedError and
// its destructors skip theirs.
[[gnu::tls_model("initial-exec")]] inline thread_local int t_in_host_function = 0;
inline bool in_host_function() noexcept { return t_in_host_function != 0; }
struct HostFunctionScope {
  HostFunctionScope() noexcept { ++t_in_host_function; }
  ~HostFunctionScope() { --t_in_host_function; }
  HostFunctionScope(const HostFunctionScope&) = delete;
  HostFunctionScope& operator=(const HostFunctionScope&) = delete;
};

// The context a ContextScope made current for the call in progress on this
// thread (0: none): what a sticky error reported inside it poisons.
[[gnu::tls_model("initial-exec")]] inline thread_local std::uintptr_t t_scoped_context = 0;

struct PrimaryLedger {
  std::uint64_t retains = 0;
  std::uint64_t releases = 0;
  std::uintptr_t address = 0;  // the primary context's address at drvshim's last retain
  // Whether the activation drvshim's outstanding retains share was another
  // component's (set by the retain that found the context active while drvshim
  // held none).
  bool activation_adopted = false;
};

// One loaded driver library. Shared (shared_ptr) by Driver and every object
// created from it, so the library stays loaded while anything uses it.
struct DriverCore {
  DriverCore() = default;
  DriverCore(const DriverCore&) = delete;
  DriverCore& operator=(const DriverCore&) = delete;
  ~DriverCore();

  void* handle = nullptr;
  std::string requested_path;
  std::string loaded_path;
  std::string resolver;
  int version = 0;
  std::array<AnyFn, kApiCount> slots{};
  std::vector<MissingFunction> missing;
  std::size_t resolved = 0;
  std::uint64_t fork_generation = 0;

  std::mutex init_mutex;
  std::atomic<bool> initialized{false};
  std::atomic<std::int64_t> init_ns{0};
  // The device count is fixed once cuInit ran (CUDA_VISIBLE_DEVICES is read
  // there), so it is asked once: -1 until then.
  mutable std::atomic<int> device_count{-1};

  // Latched when the driver answers CUDA_ERROR_DEINITIALIZED: cleanup then
  // makes no further driver call.
  mutable std::atomic<bool> deinitialized{false};

  mutable std::mutex ledger_mutex;
  std::map<int, PrimaryLedger> ledgers;

  // DRVSHIM_SYNC_EACH_OP=1 (read at load): synchronise after each submitted operation.
  bool sync_each_op = false;

  // Contexts poisoned by a sticky error: address -> (code, API that reported it).
  struct Poison {
    int code;
    std::string api;
  };
  mutable std::mutex poison_mutex;
  mutable std::map<std::uintptr_t, Poison> poisoned;
  mutable std::atomic<bool> any_poisoned{false};
  // Throws ContextPoisonedError when `context` is poisoned.
  void check_not_poisoned(std::uintptr_t context, const char* api) const;
  bool is_poisoned(std::uintptr_t context) const noexcept;
  // Forgets a poisoned context once it is gone (destroyed, or a primary
  // context deactivated or reset): a real driver hands the same address back
  // for the primary context's next activation.
  void forget_poison(std::uintptr_t context) const noexcept;

  // Closures of host callbacks that have run. They are destroyed outside any
  // host function (their captures may own drvshim objects whose release calls
  // the driver): at the next synchronize, stream destruction or host-function
  // launch, or with this core.
  mutable std::mutex spent_mutex;
  mutable std::vector<std::function<void()>> spent_callbacks;
  mutable std::atomic<bool> any_spent{false};
  void bury_spent_callbacks() const noexcept;
  // Whether a destructor of an object in `context` may call the driver.
  bool cleanup_allowed_in(std::uintptr_t context) const noexcept {
    return cleanup_allowed() && !(any_poisoned.load() && is_poisoned(context));
  }

  // Exceptions thrown by host callbacks, by stream, reported at the next synchronize.
  mutable std::mutex callback_mutex;
  mutable std::map<std::pair<std::uintptr_t, std::uint64_t>, std::string> callback_errors;  // by StreamRef::key()

  bool has(Api id) const noexcept { return slots[index(id)] != nullptr; }
  bool forked() const noexcept { return fork_generation != current_fork_generation(); }
  // Whether a destructor may call the driver: not during exit, not in a forked
  // child, not after the driver reported it is deinitialised.
  // Inside a host function it is refused, with an error logged: the resource
  // is leaked (release it after the stream has passed the host function).
  bool cleanup_allowed() const noexcept {
    if (in_host_function()) [[unlikely]]
      return refuse_cleanup_in_host_function();
    return !process_exiting() && !forked() && !deinitialized.load();
  }
  static bool refuse_cleanup_in_host_function() noexcept;
  // Records a CUDA_ERROR_DEINITIALIZED answer.
  void note_result(CUresult r) const noexcept {
    if (r == CUDA_ERROR_DEINITIALIZED) deinitialized.store(true);
  }
  // Throws UsedAfterForkError in a forked child.
  void ensure_usable(const char* api) const;
  // Throws UsedAfterForkError, or MissingStepError when init() has not succeeded.
  void require_init(const char* api) const;
  // Throws DriverTooOldError naming the function when the table entry is missing.
  void require_function(Api id, const char* feature) const;
};

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
