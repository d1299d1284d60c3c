// SPDX-License-Identifier: Apache-2.0
#pragma once
// The state of one loaded driver (DriverCore): its library, its function
// table, its version, and the registries of what drvshim made with it; and the
// per-thread facts a driver call is checked against (inside a host function,
// the context a ContextScope made current).
#include <drvshim/driver.hpp>
#include <drvshim/error.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "seam/api_table.hpp"
#include "seam/process.hpp"

namespace drvshim::detail {

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
  // The resolver itself (cuGetProcAddress_v2, else the 11.3 form), kept for
  // programs that ask the driver for its functions by name.
  AnyFn get_proc_v2 = nullptr;
  AnyFn get_proc_v1 = nullptr;
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
  // Captures begun through begin_capture and not yet ended: while any runs,
  // DRVSHIM_SYNC_EACH_OP synchronises the submitted stream only (a context
  // synchronisation during a capture ends it).
  mutable std::atomic<int> captures{0};

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

}  // namespace drvshim::detail
