// SPDX-License-Identifier: Apache-2.0
// Background initialisation (background.hpp): the handle and its accessors.
// The plan and the helper thread are in background_steps.cpp, the registry
// through which drvshim's own calls find the gate of a step they need
// (background_wait.hpp) in background_registry.cpp.
#include <pthread.h>
#include <drvshim/background.hpp>
#include <drvshim_recorder/recorder.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>

#include "background/background_state.hpp"
#include "support/test_hooks.hpp"
#include "support/threads.hpp"

namespace drvshim {

const char* to_string(InitStepKind kind) noexcept {
  switch (kind) {
    case InitStepKind::load: return "load";
    case InitStepKind::init: return "init";
    case InitStepKind::primary_context: return "primary-context";
    case InitStepKind::library: return "library";
    case InitStepKind::module: return "module";
    case InitStepKind::task: return "task";
  }
  return "?";
}

const char* to_string(InitStepState state) noexcept {
  switch (state) {
    case InitStepState::pending: return "pending";
    case InitStepState::running: return "running";
    case InitStepState::done: return "done";
    case InitStepState::failed: return "failed";
    case InitStepState::skipped: return "skipped";
  }
  return "?";
}

namespace detail {

std::atomic<int> g_background_live{0};

double ms(std::int64_t ns) noexcept { return static_cast<double>(ns) / 1e6; }

// An event with a start and a duration (a wait, a step), for the trace's
// timeline; the duration is in the text too, which format_timeline prints.
void trace_span(std::string_view event, const std::string& what, std::int64_t start_ns,
                std::int64_t duration_ns) noexcept {
  logf(log::Level::debug, "{}: {}", event, what);
  if (trace_active()) recorder::event(recorder::Kind::event, event, what, start_ns, duration_ns);
}

int code_of(const std::exception_ptr& e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const Error& error) {
    return error.code();
  } catch (...) {
  }
  return 0;
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
  }
  return "a non-standard exception";
}

}  // namespace detail

// ---- the handle ------------------------------------------------------------------------------------

using detail::BackgroundState;
using detail::StepGate;

BackgroundInit::BackgroundInit(std::shared_ptr<BackgroundState> state) noexcept : state_(std::move(state)) {}
BackgroundInit::BackgroundInit(BackgroundInit&& other) noexcept = default;
BackgroundInit& BackgroundInit::operator=(BackgroundInit&& other) noexcept {
  if (this != &other) {
    finish();
    state_ = std::move(other.state_);
  }
  return *this;
}
BackgroundInit::~BackgroundInit() { finish(); }

BackgroundInit BackgroundInit::start(BackgroundInitOptions options) {
  using namespace detail;
  install_fork_handler();
  auto state = std::make_shared<BackgroundState>();
  state->options = std::move(options);
  state->fork_generation = current_fork_generation();
  // Counted from here: the state's destructor takes it back, also when start fails below.
  g_background_live.fetch_add(1);
  plan(*state);
  std::string names;
  for (const auto& g : state->steps) names += (names.empty() ? "" : ", ") + g->name;
  logf(log::Level::info, "background initialisation starts: {}", names);
  trace::mark("background-start", names);
  BackgroundState* raw = state.get();
  // Listed before the thread starts: nothing that can throw may follow the
  // start (a failure after it would free the state under a running thread).
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    if (!test_hooks::at(test_hooks::Point::background_register)) throw std::bad_alloc();
    registry().states.push_back(state);
  }
  try {
    // The thread owns no share of the state: the handle joins it before letting go.
    std::thread thread = start_thread("BackgroundInit::start", [raw] {
      raw->worker_id.store(std::this_thread::get_id());
      run_all(*raw);
    });
    const std::lock_guard<std::mutex> lock(state->join_mutex);
    state->worker_id.store(thread.get_id());
    state->thread = std::move(thread);
  } catch (...) {
    // Listed already: an exit handler that found the state must not wait for a thread that never ran.
    {
      std::lock_guard<std::mutex> lock(state->worker_mutex);
      state->worker_done = true;
    }
    state->worker_cv.notify_all();
    throw;
  }
  return BackgroundInit(std::move(state));
}

void BackgroundInit::finish() noexcept {
  if (!state_) return;
  BackgroundState& s = *state_;
  using namespace detail;
  if (s.fork_generation != current_fork_generation() || s.on_worker()) {
    // A forked child (the helper thread does not exist here and the parent's
    // locks may be held) or a task destroying its own handle: no join, no
    // driver call; the state is left as it is.
    new std::shared_ptr<BackgroundState>(std::move(state_));
    return;
  }
  s.stop.store(true);
  const std::int64_t t0 = trace_now_ns();
  const StepGate* running = nullptr;  // a step's name never changes after the plan: read it after the join
  std::size_t unfinished = 0;
  for (const auto& g : s.steps) {
    std::lock_guard<std::mutex> lock(g->mutex);
    if (g->state == InitStepState::running) running = g.get();
    if (!StepGate::is_settled(g->state)) ++unfinished;
  }
  s.join_thread();
  if (unfinished != 0) {
    try {
      const std::int64_t waited = trace_now_ns() - t0;
      const std::string what =
          running == nullptr ? fmt::format("destroyed before {} step(s) ran: skipped", unfinished)
                             : fmt::format("destroyed while {} ran: waited {:.3f} ms for it; {} later step(s) skipped",
                                           running->name, ms(waited), unfinished - 1);
      logf(log::Level::info, "BackgroundInit {}", what);
      trace_span("background-destroy", what, t0, waited);
    } catch (...) {
      // Out of memory for the report: the handle is destroyed all the same.
    }
  }
  state_.reset();
}

namespace {

[[noreturn]] void throw_moved_from(const char* api) {
  throw InvalidArgumentError(api, "this BackgroundInit is empty (moved from)");
}

// In a forked child the helper thread does not exist: waiting for it would never end.
void check_not_forked(const BackgroundState& s, const char* api) {
  if (s.fork_generation != detail::current_fork_generation()) throw UsedAfterForkError(api);
}

// Waits for step `i` for `api`; returns normally when it is done, throws its
// error when it failed or was skipped because of a failure.
// A task runs on the helper thread, which runs the steps in order: waiting
// there for its own step or a later one would never end.
void refuse_own_wait(const BackgroundState& s, const StepGate& g, const char* api) {
  if (!s.on_worker()) return;
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (StepGate::is_settled(g.state)) return;
  }
  throw NotPermittedError(api,
                          fmt::format("a background task waits for the step {}, which runs on the same helper thread "
                                      "after the task (or is the task itself): it would wait forever",
                                      g.name),
                          "wait only for the steps before the task's own (they run first), or do the work in the task");
}

void need(const BackgroundState& s, std::size_t i, const char* api) {
  check_not_forked(s, api);
  const StepGate& g = s.gate(i);
  refuse_own_wait(s, g, api);
  g.await(api);
  if (g.rethrow_if_failed()) return;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    why = g.message;
  }
  throw MissingStepError(api, fmt::format("the background step {}", g.name), "skipped: " + why);
}

std::size_t primary_index(const BackgroundState& s, int device, const char* api) {
  const auto& list = s.options.primary_contexts;
  const auto it = std::find(list.begin(), list.end(), device);
  if (it == list.end()) {
    throw InvalidArgumentError(api, fmt::format("device {} is not in this BackgroundInit's primary_contexts", device),
                               "retain it yourself (Driver::device(n).retain_primary_context()) or list it at start");
  }
  return static_cast<std::size_t>(it - list.begin());
}

template <class Items>
std::size_t item_index(const Items& items, std::string_view name, const char* api, const char* what) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].name == name) return i;
  }
  std::string known;
  for (const auto& item : items) known += (known.empty() ? "" : ", ") + item.name;
  throw InvalidArgumentError(api, fmt::format("no {} named \"{}\" was asked for", what, name),
                             known.empty() ? std::string("none was") : "the names are: " + known);
}

}  // namespace

Driver BackgroundInit::driver() const {
  if (!state_) throw_moved_from("BackgroundInit::driver");
  need(*state_, 0, "BackgroundInit::driver");
  return *state_->driver;
}

ContextRef BackgroundInit::primary_context(int device) const {
  if (!state_) throw_moved_from("BackgroundInit::primary_context");
  const auto& s = *state_;
  const std::size_t k = primary_index(s, device, "BackgroundInit::primary_context");
  need(s, s.index_of(InitStepKind::primary_context, k), "BackgroundInit::primary_context");
  std::lock_guard<std::mutex> lock(state_->take_mutex);
  if (s.taken[k]) {
    throw InvalidArgumentError("BackgroundInit::primary_context",
                               fmt::format("the primary context of device {} was taken (take_primary_context)", device),
                               "use the PrimaryContext take_primary_context returned");
  }
  return s.primaries[k]->ref();
}

PrimaryContext BackgroundInit::take_primary_context(int device) {
  if (!state_) throw_moved_from("BackgroundInit::take_primary_context");
  auto& s = *state_;
  const std::size_t k = primary_index(s, device, "BackgroundInit::take_primary_context");
  need(s, s.index_of(InitStepKind::primary_context, k), "BackgroundInit::take_primary_context");
  // The modules loaded into it come first: nothing in the background may use the context after this.
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    if (s.gate(i).kind == InitStepKind::module && s.gate(i).device == device) {
      refuse_own_wait(s, s.gate(i), "BackgroundInit::take_primary_context");
      s.gate(i).await("BackgroundInit::take_primary_context");
    }
  }
  std::lock_guard<std::mutex> lock(s.take_mutex);
  if (s.taken[k]) {
    throw InvalidArgumentError("BackgroundInit::take_primary_context",
                               fmt::format("the primary context of device {} was already taken", device));
  }
  s.taken[k] = true;
  PrimaryContext out = std::move(*s.primaries[k]);
  s.primaries[k].reset();
  return out;
}

const Library& BackgroundInit::library(std::string_view name) const {
  if (!state_) throw_moved_from("BackgroundInit::library");
  const auto& s = *state_;
  const std::size_t k = item_index(s.options.libraries, name, "BackgroundInit::library", "library");
  need(s, s.index_of(InitStepKind::library, k), "BackgroundInit::library");
  return *s.libraries[k];
}

const Module& BackgroundInit::module(std::string_view name) const {
  if (!state_) throw_moved_from("BackgroundInit::module");
  const auto& s = *state_;
  const std::size_t k = item_index(s.options.modules, name, "BackgroundInit::module", "module");
  need(s, s.index_of(InitStepKind::module, k), "BackgroundInit::module");
  return *s.modules[k];
}

void BackgroundInit::wait(std::string_view name) const {
  if (!state_) throw_moved_from("BackgroundInit::wait");
  const std::size_t i = find(name);
  if (i == step_count()) {
    std::string known;
    for (const auto& g : state_->steps) known += (known.empty() ? "" : ", ") + g->name;
    throw InvalidArgumentError("BackgroundInit::wait", fmt::format("there is no step named \"{}\"", name),
                               "the steps are: " + known);
  }
  need(*state_, i, "BackgroundInit::wait");
}

void BackgroundInit::wait() const {
  if (!state_) throw_moved_from("BackgroundInit::wait");
  check_not_forked(*state_, "BackgroundInit::wait");
  for (std::size_t i = 0; i < state_->steps.size(); ++i)
    refuse_own_wait(*state_, state_->gate(i), "BackgroundInit::wait");
  for (std::size_t i = 0; i < state_->steps.size(); ++i) state_->gate(i).await("BackgroundInit::wait");
  for (std::size_t i = 0; i < state_->steps.size(); ++i) {
    const StepGate& g = state_->gate(i);
    bool failed = false;
    {
      std::lock_guard<std::mutex> lock(g.mutex);
      failed = g.state == InitStepState::failed;
    }
    if (failed) g.rethrow_if_failed();
  }
}

bool BackgroundInit::wait_for(std::chrono::nanoseconds timeout) const noexcept {
  if (!state_) return true;
  if (state_->fork_generation != detail::current_fork_generation()) return finished();
  // A task waiting for its own steps gets its answer at once: they cannot settle while it waits.
  if (state_->on_worker()) return finished();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& g : state_->steps) {
    std::unique_lock<std::mutex> lock(g->mutex);
    if (!g->settled_cv.wait_until(lock, deadline, [&] { return StepGate::is_settled(g->state); })) return false;
  }
  return true;
}

namespace {

// A gate's lock for a query that must not wait: in a forked child the
// helper thread does not exist, and it may have held the lock at the fork, so
// the lock is only tried there (not taken: the query answers without it).
std::unique_lock<std::mutex> query_lock(const BackgroundState& s, const StepGate& g) {
  if (s.fork_generation == detail::current_fork_generation()) return std::unique_lock<std::mutex>(g.mutex);
  return std::unique_lock<std::mutex>(g.mutex, std::try_to_lock);
}

}  // namespace

bool BackgroundInit::finished() const noexcept {
  if (!state_) return true;
  for (const auto& g : state_->steps) {
    const auto lock = query_lock(*state_, *g);
    // In a forked child a gate locked at the fork was being written: that step had not settled before the fork.
    if (!lock.owns_lock() || !StepGate::is_settled(g->state)) return false;
  }
  return true;
}

std::exception_ptr BackgroundInit::error() const noexcept {
  if (!state_) return nullptr;
  for (const auto& g : state_->steps) {
    const auto lock = query_lock(*state_, *g);
    if (lock.owns_lock() && g->state == InitStepState::failed) {
      g->reported = true;
      return g->error;
    }
  }
  return nullptr;
}

std::size_t BackgroundInit::step_count() const noexcept { return state_ ? state_->steps.size() : 0; }

InitStepReport BackgroundInit::step(std::size_t index) const noexcept {
  InitStepReport r;
  if (!state_ || index >= state_->steps.size()) return r;
  const StepGate& g = state_->gate(index);
  r.name = g.name;
  r.kind = g.kind;
  r.device = g.device;
  const std::int64_t now = detail::trace_now_ns();
  const auto lock = query_lock(*state_, g);
  if (!lock.owns_lock()) {
    // A forked child whose parent was writing this step's outcome at the fork: the fields may be half written.
    r.state = InitStepState::running;
    r.error = "unknown: the process forked while the background thread was updating this step";
    return r;
  }
  r.state = g.state;
  if (g.state == InitStepState::running) r.duration = std::chrono::nanoseconds(now - g.start_ns);
  if (g.state == InitStepState::done || g.state == InitStepState::failed) {
    r.duration = std::chrono::nanoseconds(g.end_ns - g.start_ns);
  }
  r.waited = std::chrono::nanoseconds(g.waited_ns);
  r.code = g.code;
  if (StepGate::is_settled(g.state)) r.error = g.message;
  return r;
}

std::size_t BackgroundInit::find(std::string_view name) const noexcept {
  if (!state_) return 0;
  for (std::size_t i = 0; i < state_->steps.size(); ++i) {
    if (state_->steps[i]->name == name) return i;
  }
  return state_->steps.size();
}

std::string BackgroundInit::summary() const {
  std::string out;
  for (std::size_t i = 0; i < step_count(); ++i) {
    const InitStepReport r = step(i);
    out += fmt::format("{:<24} {:<8} {:9.3f} ms  waited {:9.3f} ms", r.name, to_string(r.state),
                       static_cast<double>(r.duration.count()) / 1e6, static_cast<double>(r.waited.count()) / 1e6);
    if (!r.error.empty()) out += fmt::format("  ({})", r.error);
    out += '\n';
  }
  return out;
}

}  // namespace drvshim
