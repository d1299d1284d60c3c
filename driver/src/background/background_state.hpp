// SPDX-License-Identifier: Apache-2.0
#pragma once
// Background initialisation's shared state (background.hpp): a step's gate,
// the state a BackgroundInit handle, its helper thread and the registry
// share, and what the three files need of each other: background.cpp (the
// handle), background_registry.cpp (the registry the wait hooks of
// background_wait.hpp search, and the exit handler), background_steps.cpp
// (the plan and the helper thread).
#include <drvshim/background.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "background/background_wait.hpp"
#include "log_internal.hpp"
#include "seam/core.hpp"
#include "trace_internal.hpp"

namespace drvshim::detail {

// Set on a helper thread: the hooks never make it wait for its own steps.
extern thread_local bool t_background_worker;
// Set by the exit handler: helper threads stop before their next step.
extern std::atomic<bool> g_exit_stop;

double ms(std::int64_t ns) noexcept;
// An event with a start and a duration (a wait, a step), for the trace's
// timeline; the duration is in the text too, which format_timeline prints.
void trace_span(std::string_view event, const std::string& what, std::int64_t start_ns,
                std::int64_t duration_ns) noexcept;
// The driver's result code of an Error, else 0.
int code_of(const std::exception_ptr& e) noexcept;
std::string message_of(const std::exception_ptr& e);

// One step's progress, shared by the helper thread, the handle and the calls
// that wait for it. Its name and kind never change; the rest is guarded by `mutex`.
struct StepGate {
  std::string name;
  InitStepKind kind = InitStepKind::load;
  int device = -1;
  int depends_on = -1;   // index of the step this one needs, or -1
  std::size_t item = 0;  // index into the options' list of its kind

  mutable std::mutex mutex;
  mutable std::condition_variable settled_cv;
  InitStepState state = InitStepState::pending;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  mutable std::int64_t waited_ns = 0;
  std::exception_ptr error;  // failed, or skipped because of a failure
  std::string message;       // error's text, or why it was skipped; never changed once settled
  int code = 0;
  mutable bool reported = false;  // the error reached someone (a waiting call, the handle)

  static bool is_settled(InitStepState s) noexcept {
    return s == InitStepState::done || s == InitStepState::failed || s == InitStepState::skipped;
  }

  // Blocks until the step has settled. A caller that had to wait logs it and
  // leaves a "background-wait" trace event naming `who`.
  void await(const char* who) const {
    std::unique_lock<std::mutex> lock(mutex);
    if (is_settled(state)) return;
    const std::int64_t t0 = trace_now_ns();
    const bool running = state == InitStepState::running;
    const std::int64_t so_far = running ? t0 - start_ns : 0;
    lock.unlock();
    logf(log::Level::info, "{} waits for the background step {} ({})", who, name,
         running ? fmt::format("running for {:.3f} ms", ms(so_far)) : std::string("not started yet"));
    lock.lock();
    settled_cv.wait(lock, [&] { return is_settled(state); });
    const std::int64_t waited = trace_now_ns() - t0;
    waited_ns += waited;
    const InitStepState outcome = state;
    lock.unlock();
    const std::string what = fmt::format("{} waited {:.3f} ms for {} ({})", who, ms(waited), name, to_string(outcome));
    logf(log::Level::info, "{}", what);
    trace_span("background-wait", what, t0, waited);
  }

  // After await(): rethrows a failed (or skipped-because-failed) step's error.
  // Returns whether the step is done.
  bool rethrow_if_failed() const {
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (state == InitStepState::done) return true;
      e = error;
      if (e) reported = true;
    }
    if (e) std::rethrow_exception(e);
    return false;
  }
};

struct BackgroundState {
  BackgroundInitOptions options;
  std::vector<std::shared_ptr<StepGate>> steps;
  std::uint64_t fork_generation = 0;
  std::atomic<bool> stop{false};

  // Written by the helper thread inside a step, read by others once that step
  // has settled (the gate's mutex orders them).
  std::optional<Driver> driver;
  std::vector<std::optional<PrimaryContext>> primaries;  // by index in options.primary_contexts
  std::vector<std::optional<Library>> libraries;
  std::vector<std::optional<Module>> modules;
  std::mutex take_mutex;  // guards moving a primary context out (take_primary_context)
  std::vector<bool> taken;

  std::mutex worker_mutex;
  std::condition_variable worker_cv;
  bool worker_done = false;
  // Set by the helper thread before its first step (and by start once the
  // thread exists): read without a lock by the exit handler, the handle and
  // the waits that refuse a task waiting for its own steps.
  std::atomic<std::thread::id> worker_id{};
  bool on_worker() const noexcept { return worker_id.load() == std::this_thread::get_id(); }
  std::mutex join_mutex;  // the handle joins `thread`, the exit handler may detach it
  std::thread thread;

  // Joins the helper thread unless it was joined or detached already.
  void join_thread() noexcept {
    const std::lock_guard<std::mutex> lock(join_mutex);
    if (thread.joinable()) thread.join();
  }
  // Lets the helper thread finish on its own (at exit, once its steps are done).
  void detach_thread() noexcept {
    const std::lock_guard<std::mutex> lock(join_mutex);
    if (thread.joinable()) thread.detach();
  }

  ~BackgroundState();

  StepGate& gate(std::size_t i) const noexcept { return *steps[i]; }
  std::size_t index_of(InitStepKind kind, std::size_t item) const noexcept {
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (steps[i]->kind == kind && steps[i]->item == item) return i;
    }
    return steps.size();
  }
};

// ---- the registry: live states, and the gates calls on a driver may need ----------------------

struct CoreEntry {
  const DriverCore* core = nullptr;
  const BackgroundState* owner = nullptr;
  std::shared_ptr<StepGate> init;
  std::vector<std::pair<int, std::shared_ptr<StepGate>>> retains;
};

struct Registry {
  std::mutex mutex;
  std::vector<CoreEntry> cores;
  std::vector<std::weak_ptr<BackgroundState>> states;
};

// The registry of live states and of the gates drvshim's calls may wait at.
Registry& registry();
// Registers stop_all_at_exit with atexit, once per process.
void register_exit_handler_once() noexcept;
// Makes `s`'s init and retain gates findable by calls on its driver.
void publish_core(BackgroundState& s);
// Checks the options and lays out the steps (throws InvalidArgumentError).
void plan(BackgroundState& s);
// The helper thread's body: runs every step in order.
void run_all(BackgroundState& s) noexcept;

}  // namespace drvshim::detail
