// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file background.hpp
/// Initialisation in the background: the third explicit choice next to
/// explicit steps (Driver::load, Driver::init, Device::retain_primary_context)
/// and runtime_compat's lazy policy. The same named, logged and traced steps
/// run on one helper thread while the program does its own start-up work
/// (reading a model, parsing a configuration):
///
///     auto bg = drvshim::BackgroundInit::start({.primary_contexts = {0},
///                                               .modules = {{.name = "k", .device = 0, .path = "k.cubin"}}});
///     read_model();                                  // the program's own work, meanwhile
///     auto ctx = bg.primary_context(0);              // waits only for what is left
///     auto kernel = bg.module("k").kernel("scale");
///
/// Steps, in this order: `load` (Driver::load), `init` (cuInit), `primary-context N`
/// for each device asked for (Device::retain_primary_context), `library NAME`
/// (Library::load), `module NAME` (Module::load into a primary context), `task NAME`
/// (a function of the program's, such as drvshim::nvrtc_warmup()).
///
/// Waiting. Every accessor waits for exactly the step it needs, and so do the
/// drvshim calls that need a step in progress: on a Driver from driver(),
/// Driver::init() and every call that needs init (device_count(), device(), ...)
/// wait for the `init` step, and Device::retain_primary_context() waits for the
/// `primary-context N` step of its device (then retains again, cheaply). A caller
/// that had to wait logs it (info) and leaves a trace event "background-wait"
/// naming the call, the step and the time waited; each step leaves a
/// "background-step" event (its outcome and duration) on the helper thread,
/// beside the driver calls it made.
///
/// Errors. A failed step keeps its exception (the original one: a CudaError with
/// the driver's code for cuInit or a retain, DriverNotFoundError for the load)
/// and steps that depend on it are skipped with the same error. It is rethrown by
/// the accessors and wait() of the handle, and by the first drvshim call that
/// needed the step: a call that needs init throws it for as long as the driver is
/// not initialised; Driver::init() and Device::retain_primary_context() throw it
/// once, unless the handle already reported it, and from then on perform the step
/// again themselves (the explicit retry). Tasks depend on no other step.
///
/// Destruction. Nothing is cancelled: the destructor lets the step in progress
/// finish (cuInit can take hundreds of milliseconds), skips the rest, joins the
/// helper thread and releases what the steps made (modules, libraries, primary
/// contexts, then its share of the Driver). Copies of the Driver stay valid. At
/// process exit a live handle's helper thread is stopped after its current step
/// before the driver's own exit handlers run; in a forked child the thread does
/// not exist: the accessors throw UsedAfterForkError instead of waiting, and the
/// handle makes no driver call and leaks its state.
#include <drvshim/context.hpp>
#include <drvshim/driver.hpp>
#include <drvshim/export.hpp>
#include <drvshim/module.hpp>

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace drvshim {

namespace detail {
struct BackgroundState;
}  // namespace detail

/// What a step of a background initialisation does.
enum class InitStepKind {
  load,             ///< Driver::load: dlopen, cuDriverGetVersion, the function table
  init,             ///< Driver::init: cuInit
  primary_context,  ///< Device::retain_primary_context of one device (its flags set first when asked)
  library,          ///< Library::load / load_file (context-independent code)
  module,           ///< Module::load / load_file into a primary context retained by an earlier step
  task,             ///< a function of the program's (BackgroundTask)
};
/// "load", "init", "primary-context", "library", "module", "task".
DRVSHIM_API const char* to_string(InitStepKind kind) noexcept;

/// Where a step is.
enum class InitStepState {
  pending,  ///< not started yet
  running,  ///< on the helper thread now
  done,     ///< finished successfully
  failed,   ///< threw: its error is kept and rethrown to whoever needs the step
  skipped,  ///< not run: a step it depends on failed (its error is kept), or the handle was destroyed or the process
            ///< exits
};
/// "pending", "running", "done", "failed", "skipped".
DRVSHIM_API const char* to_string(InitStepState state) noexcept;

/// One step as BackgroundInit::step() reports it. The string views stay valid
/// as long as the handle.
struct InitStepReport {
  std::string_view name;  ///< "load", "init", "primary-context 0", "library kernels", "task nvrtc-warmup"
  InitStepKind kind = InitStepKind::load;
  InitStepState state = InitStepState::pending;
  int device = -1;                       ///< the device of a primary-context or module step, else -1
  std::chrono::nanoseconds duration{0};  ///< how long it ran (so far, while running; 0 when it never ran)
  std::chrono::nanoseconds waited{0};    ///< how long callers were blocked waiting for it, summed over callers
  int code = 0;                          ///< the CUresult of a failed (or skipped) step's error when it has one, else 0
  std::string_view error;                ///< the error's message, why a step was skipped, or ""
};

/// Context-independent code to load in the background (needs only init).
struct BackgroundLibrary {
  std::string name{};              ///< how BackgroundInit::library() finds it
  std::string path{};              ///< a file to read (Library::load_file), or empty to use `image`
  std::vector<std::byte> image{};  ///< the image (CUBIN, fatbin or PTX) when `path` is empty
};

/// A module to load into a device's primary context; the device must be in
/// BackgroundInitOptions::primary_contexts.
struct BackgroundModule {
  std::string name{};  ///< how BackgroundInit::module() finds it
  int device = 0;
  std::string path{};  ///< a file to read (Module::load_file), or empty to use `image`
  std::vector<std::byte> image{};
};

/// A function of the program's, run as a named step on the helper thread after
/// the driver's steps (drvshim::nvrtc_warmup() in <drvshim/nvrtc_warmup.hpp>
/// makes one). It depends on no other step: it runs when a driver step failed.
/// What it throws is its step's error.
struct BackgroundTask {
  std::string name{};
  std::function<void()> run{};
};

/// What to initialise in the background.
struct BackgroundInitOptions {
  /// Where to load the driver from (as Driver::load).
  LoadOptions load{};
  /// Devices whose primary context to retain, in this order (each its own step).
  std::vector<int> primary_contexts{};
  /// Flags set on each of those primary contexts before it is retained
  /// (Device::set_primary_context_flags; refused when another component
  /// activated it with other flags). Unset: whatever it has.
  std::optional<ContextFlags> primary_context_flags{};
  std::vector<BackgroundLibrary> libraries{};
  std::vector<BackgroundModule> modules{};
  std::vector<BackgroundTask> tasks{};
};

/// A background initialisation (move-only owner of its helper thread and of
/// what its steps made). Thread-safe: its accessors and queries may be called
/// from any number of threads at once.
class DRVSHIM_API BackgroundInit {
 public:
  /// Checks `options` and starts the helper thread; returns at once. Throws
  /// InvalidArgumentError for options that cannot work (a name empty or given
  /// twice, a module on a device not in primary_contexts, a library or module
  /// with neither path nor image, a task without a function, a negative or
  /// repeated device) and SystemError when the system refuses a thread; the
  /// driver is not touched then.
  static BackgroundInit start(BackgroundInitOptions options = {});

  BackgroundInit(BackgroundInit&& other) noexcept;
  /// Finishes this handle's own work first (as the destructor), then takes `other`'s.
  BackgroundInit& operator=(BackgroundInit&& other) noexcept;
  BackgroundInit(const BackgroundInit&) = delete;
  BackgroundInit& operator=(const BackgroundInit&) = delete;
  /// Waits for the step in progress, skips the rest, joins the helper thread,
  /// releases what the steps made. Never throws.
  ~BackgroundInit();

  // ---- waiting: each waits only for the step(s) it needs ------------------------------------
  //
  // A task runs on the helper thread, after the steps before it and before
  // those after it: from a task, waiting for the task's own step or a later
  // one throws NotPermittedError (it would never end); the steps before it
  // are there. In a forked child the waits throw UsedAfterForkError.

  /// The loaded driver (after the `load` step; the `init` step may still be
  /// running: its calls wait for it). Throws the load's error.
  Driver driver() const;
  /// A view of device `device`'s primary context, retained by its step and held
  /// by this handle (valid while the handle holds it). Throws the step's error,
  /// InvalidArgumentError for a device not asked for or a context already taken.
  ContextRef primary_context(int device) const;
  /// Takes the handle's retain of `device`'s primary context: waits for its
  /// step and for the module steps on that device (nothing in the background
  /// uses the context afterwards). Errors as primary_context().
  PrimaryContext take_primary_context(int device);
  /// A library loaded by its step, owned by this handle. Throws the step's
  /// error, InvalidArgumentError for a name not asked for.
  const Library& library(std::string_view name) const;
  /// A module loaded by its step, owned by this handle. Errors as library().
  const Module& module(std::string_view name) const;
  /// Waits for the step named `name` (as InitStepReport::name, e.g.
  /// "task nvrtc-warmup"); throws its error, InvalidArgumentError for an unknown name.
  void wait(std::string_view name) const;
  /// Waits for every step; throws the first failed step's error.
  void wait() const;
  /// Waits at most `timeout` for every step; whether all have finished. Never
  /// throws. Answers at once, without waiting, in a forked child and in a task.
  bool wait_for(std::chrono::nanoseconds timeout) const noexcept;

  // ---- querying: no waiting, no throwing ----------------------------------------------------
  //
  // Also in a forked child, where the helper thread does not exist: a step
  // whose outcome was being written at the fork reads as running, with an
  // error text that says so.

  /// Whether every step has finished (done, failed or skipped).
  bool finished() const noexcept;
  /// The first failed step's error (the original exception), or null.
  std::exception_ptr error() const noexcept;
  /// The steps, in order.
  std::size_t step_count() const noexcept;
  /// Step `index` now; a default report for an index out of range or a moved-from handle.
  InitStepReport step(std::size_t index) const noexcept;
  /// The index of the step named `name`, or step_count() when there is none.
  std::size_t find(std::string_view name) const noexcept;
  /// One line per step: name, state, duration, time waited for it, error.
  std::string summary() const;

 private:
  explicit BackgroundInit(std::shared_ptr<detail::BackgroundState> state) noexcept;
  void finish() noexcept;
  std::shared_ptr<detail::BackgroundState> state_;
};

}  // namespace drvshim
