// Background initialisation (background.hpp): the steps, the helper thread
// that runs them, the gates callers wait at, and the registry through which
// drvshim's own calls find the gate of a step they need (background_wait.hpp).
#include <drvshim/background.hpp>
#include <drvshim_recorder/recorder.hpp>
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "background_wait.hpp"
#include "core.hpp"
#include "log_internal.hpp"
#include "threads.hpp"
#include "trace_internal.hpp"

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

namespace {

// Set on a helper thread: the hooks never make it wait for its own steps.
thread_local bool t_background_worker = false;

double ms(std::int64_t ns) noexcept { return static_cast<double>(ns) / 1e6; }

// An event with a start and a duration (a wait, a step), for the trace's
// timeline; the duration is in the text too, which format_timeline prints.
void trace_span(std::string_view event, const std::string& what, std::int64_t start_ns, std::int64_t duration_ns) noexcept {
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

}  // namespace

// One step's progress, shared by the helper thread, the handle and the calls
// that wait for it. Its name and kind never change; the rest is guarded by `mutex`.
struct StepGate {
  std::string name;
  InitStepKind kind = InitStepKind::load;
  int device = -1;
  int depends_on = -1;  // index of the step this one needs, or -1
  std::size_t item = 0; // index into the options' list of its kind

  mutable std::mutex mutex;
  mutable std::condition_variable settled_cv;
  InitStepState state = InitStepState::pending;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  mutable std::int64_t waited_ns = 0;
  std::exception_ptr error;   // failed, or skipped because of a failure
  std::string message;        // error's text, or why it was skipped; never changed once settled
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
  std::thread::id worker_id;
  std::thread thread;

  ~BackgroundState();

  StepGate& gate(std::size_t i) const noexcept { return *steps[i]; }
  std::size_t index_of(InitStepKind kind, std::size_t item) const noexcept {
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (steps[i]->kind == kind && steps[i]->item == item) return i;
    }
    return steps.size();
  }
};

namespace {

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

Registry& registry() {
  // Never destroyed (exit handlers and late destructors use it). Its lock is
  // held across fork() so that no child inherits it locked by a thread that
  // does not exist there; the child forgets the parent's entries.
  static Registry* r = [] {
    auto* reg = new Registry;
    pthread_atfork([] { registry().mutex.lock(); }, [] { registry().mutex.unlock(); },
                   [] {
                     Registry& child = registry();
                     child.cores.clear();
                     child.states.clear();
                     g_background_live.store(0);
                     child.mutex.unlock();
                   });
    return reg;
  }();
  return *r;
}

std::atomic<bool> g_exit_stop{false};

// At exit (registered after the first successful background cuInit, so it runs
// before the driver's own exit handlers): every helper thread stops after its
// current step, and exit waits for that step, so no step runs while the driver
// tears itself down.
void stop_all_at_exit() noexcept {
  g_exit_stop.store(true);
  std::vector<std::shared_ptr<BackgroundState>> live;
  try {
    std::lock_guard<std::mutex> lock(registry().mutex);
    for (const auto& w : registry().states) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  } catch (...) {
    return;
  }
  for (auto& s : live) {
    if (s->worker_id == std::this_thread::get_id()) continue;  // exit() called from a task
    s->stop.store(true);
    std::unique_lock<std::mutex> lock(s->worker_mutex);
    if (!s->worker_cv.wait_for(lock, std::chrono::seconds(30), [&] { return s->worker_done; })) {
      logf(log::Level::error, "exit: a background initialisation's step still runs after 30 s; exiting without it");
    }
  }
}

void register_exit_handler_once() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(&stop_all_at_exit); });
}

void publish_core(BackgroundState& s) {
  CoreEntry entry;
  entry.core = s.driver->core().get();
  entry.owner = &s;
  for (const auto& g : s.steps) {
    if (g->kind == InitStepKind::init) entry.init = g;
    if (g->kind == InitStepKind::primary_context) entry.retains.emplace_back(g->device, g);
  }
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().cores.push_back(std::move(entry));
}

std::shared_ptr<StepGate> find_gate(const DriverCore& core, int device) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  for (const auto& e : registry().cores) {
    if (e.core != &core) continue;
    if (device < 0) return e.init;
    for (const auto& [d, g] : e.retains) {
      if (d == device) return g;
    }
  }
  return nullptr;
}

// A call that needs `gate`'s step: waits, then throws its error as `need` says.
void need_step(const StepGate& gate, const char* api, StepNeed need) {
  gate.await(api);
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lock(gate.mutex);
    if (!gate.error || (need == StepNeed::redo && gate.reported)) return;
    e = gate.error;
    gate.reported = true;
  }
  logf(log::Level::info, "{}: the background step {} failed; its error is thrown here", api, gate.name);
  std::rethrow_exception(e);
}

}  // namespace

void wait_for_background_init_slow(const DriverCore& core, const char* api, StepNeed need) {
  if (t_background_worker || core.forked()) return;
  if (const auto gate = find_gate(core, -1)) need_step(*gate, api, need);
}

void wait_for_background_retain_slow(const DriverCore& core, int device, const char* api) {
  if (t_background_worker || core.forked()) return;
  if (const auto gate = find_gate(core, device)) need_step(*gate, api, StepNeed::redo);
}

BackgroundState::~BackgroundState() {
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    std::erase_if(registry().cores, [&](const CoreEntry& e) { return e.owner == this; });
    std::erase_if(registry().states, [](const std::weak_ptr<BackgroundState>& w) { return w.expired(); });
  }
  g_background_live.fetch_sub(1);
  // The thread was joined by the handle; only a forked child or a handle
  // destroyed on its own helper thread leaves it running, never joinable here.
  if (thread.joinable()) thread.detach();
  // What the steps made goes in reverse order of the members: modules,
  // libraries, primary contexts, then this share of the driver.
}

namespace {

// ---- the helper thread -------------------------------------------------------------------------

void settle(StepGate& g, InitStepState outcome, std::exception_ptr error, std::string message) {
  const std::int64_t end = trace_now_ns();
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.state == InitStepState::running) g.end_ns = end;
    g.error = std::move(error);
    g.message = std::move(message);
    g.code = g.error ? code_of(g.error) : 0;
    g.state = outcome;
  }
  g.settled_cv.notify_all();
}

void run_step(BackgroundState& s, StepGate& g) {
  const auto& o = s.options;
  switch (g.kind) {
    case InitStepKind::load:
      s.driver.emplace(Driver::load(o.load));
      // Before the step settles: whoever gets the Driver finds its gates.
      publish_core(s);
      return;
    case InitStepKind::init:
      s.driver->init();
      register_exit_handler_once();
      return;
    case InitStepKind::primary_context: {
      const Device device = s.driver->device(g.device);
      if (o.primary_context_flags) device.set_primary_context_flags(*o.primary_context_flags);
      s.primaries[g.item].emplace(device.retain_primary_context());
      return;
    }
    case InitStepKind::library: {
      const auto& l = o.libraries[g.item];
      s.libraries[g.item].emplace(l.path.empty() ? Library::load(*s.driver, l.image)
                                                 : Library::load_file(*s.driver, l.path));
      return;
    }
    case InitStepKind::module: {
      const auto& m = o.modules[g.item];
      const ContextRef ctx = s.primaries[s.gate(static_cast<std::size_t>(g.depends_on)).item]->ref();
      s.modules[g.item].emplace(m.path.empty() ? Module::load(ctx, m.image) : Module::load_file(ctx, m.path));
      return;
    }
    case InitStepKind::task:
      o.tasks[g.item].run();
      return;
  }
}

void skip_rest(BackgroundState& s, std::size_t from, const char* why) {
  for (std::size_t i = from; i < s.steps.size(); ++i) {
    StepGate& g = s.gate(i);
    // Traced before the gate opens, so whoever waited for the step finds its record.
    trace_span("background-step", fmt::format("{}: skipped ({})", g.name, why), trace_now_ns(), 0);
    settle(g, InitStepState::skipped, nullptr, why);
  }
}

void run_all(BackgroundState& s) noexcept {
  t_background_worker = true;
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    StepGate& g = s.gate(i);
    if (s.stop.load() || g_exit_stop.load() || process_exiting()) {
      skip_rest(s, i, s.stop.load() ? "the BackgroundInit was destroyed first" : "the process is exiting");
      break;
    }
    if (g.depends_on >= 0) {
      const StepGate& cause = s.gate(static_cast<std::size_t>(g.depends_on));
      std::exception_ptr error;
      bool ok = false;
      {
        std::lock_guard<std::mutex> lock(cause.mutex);
        ok = cause.state == InitStepState::done;
        error = cause.error;
      }
      if (!ok) {
        const std::string why = fmt::format("{} did not succeed", cause.name);
        trace_span("background-step", fmt::format("{}: skipped ({})", g.name, why), trace_now_ns(), 0);
        settle(g, InitStepState::skipped, error, why);
        continue;
      }
    }
    const std::int64_t t0 = trace_now_ns();
    {
      std::lock_guard<std::mutex> lock(g.mutex);
      g.start_ns = t0;
      g.state = InitStepState::running;
    }
    try {
      run_step(s, g);
      const std::int64_t took = trace_now_ns() - t0;
      // Logged and traced before the gate opens: a caller that waited for the
      // step (and then reads the trace) finds its record.
      logf(log::Level::info, "background step {} done in {:.3f} ms", g.name, ms(took));
      trace_span("background-step", fmt::format("{}: done in {:.3f} ms", g.name, ms(took)), t0, took);
      settle(g, InitStepState::done, nullptr, {});
    } catch (...) {
      const std::int64_t took = trace_now_ns() - t0;
      std::exception_ptr error = std::current_exception();
      std::string what;
      try {
        what = message_of(error);
      } catch (...) {
      }
      logf(log::Level::warn,
           "background step {} failed after {:.3f} ms: {} (rethrown by the BackgroundInit and by the first call "
           "that needs the step)",
           g.name, ms(took), what);
      trace_span("background-step", fmt::format("{}: failed in {:.3f} ms: {}", g.name, ms(took), what), t0, took);
      settle(g, InitStepState::failed, std::move(error), std::move(what));
    }
  }
  {
    std::lock_guard<std::mutex> lock(s.worker_mutex);
    s.worker_done = true;
  }
  s.worker_cv.notify_all();
}

// ---- options -------------------------------------------------------------------------------------

[[noreturn]] void bad_option(const std::string& what, const std::string& hint = {}) {
  throw InvalidArgumentError("BackgroundInit::start", what, hint);
}

void add_step(BackgroundState& s, std::string name, InitStepKind kind, int device, int depends_on, std::size_t item) {
  auto g = std::make_shared<StepGate>();
  g->name = std::move(name);
  g->kind = kind;
  g->device = device;
  g->depends_on = depends_on;
  g->item = item;
  s.steps.push_back(std::move(g));
}

template <class Items>
void check_names(const Items& items, const char* what) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].name.empty()) bad_option(fmt::format("{} {} has no name", what, i), "give each a name to find it by");
    for (std::size_t j = 0; j < i; ++j) {
      if (items[j].name == items[i].name) bad_option(fmt::format("two {}s are named \"{}\"", what, items[i].name));
    }
  }
}

void plan(BackgroundState& s) {
  const auto& o = s.options;
  std::vector<int> seen;
  for (const int d : o.primary_contexts) {
    if (d < 0) bad_option(fmt::format("device {} in primary_contexts is negative", d));
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) {
      bad_option(fmt::format("device {} is listed twice in primary_contexts", d));
    }
    seen.push_back(d);
  }
  check_names(o.libraries, "library");
  check_names(o.modules, "module");
  check_names(o.tasks, "task");
  for (const auto& l : o.libraries) {
    if (l.path.empty() && l.image.empty()) bad_option(fmt::format("library \"{}\" has neither a path nor an image", l.name));
  }
  for (const auto& m : o.modules) {
    if (m.path.empty() && m.image.empty()) bad_option(fmt::format("module \"{}\" has neither a path nor an image", m.name));
    if (std::find(seen.begin(), seen.end(), m.device) == seen.end()) {
      bad_option(fmt::format("module \"{}\" is for device {}, whose primary context is not in primary_contexts", m.name,
                             m.device),
                 "add the device to primary_contexts: a module is loaded into a primary context retained by an earlier step");
    }
  }
  for (const auto& t : o.tasks) {
    if (!t.run) bad_option(fmt::format("task \"{}\" has no function", t.name));
  }

  add_step(s, "load", InitStepKind::load, -1, -1, 0);
  add_step(s, "init", InitStepKind::init, -1, 0, 0);
  for (std::size_t i = 0; i < o.primary_contexts.size(); ++i) {
    add_step(s, fmt::format("primary-context {}", o.primary_contexts[i]), InitStepKind::primary_context,
             o.primary_contexts[i], 1, i);
  }
  for (std::size_t i = 0; i < o.libraries.size(); ++i) {
    add_step(s, "library " + o.libraries[i].name, InitStepKind::library, -1, 1, i);
  }
  for (std::size_t i = 0; i < o.modules.size(); ++i) {
    const auto retain = std::find(o.primary_contexts.begin(), o.primary_contexts.end(), o.modules[i].device) -
                        o.primary_contexts.begin();
    add_step(s, "module " + o.modules[i].name, InitStepKind::module, o.modules[i].device,
             static_cast<int>(2 + retain), i);
  }
  for (std::size_t i = 0; i < o.tasks.size(); ++i) add_step(s, "task " + o.tasks[i].name, InitStepKind::task, -1, -1, i);
  s.primaries.resize(o.primary_contexts.size());
  s.taken.assign(o.primary_contexts.size(), false);
  s.libraries.resize(o.libraries.size());
  s.modules.resize(o.modules.size());
}

}  // namespace
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
  // The thread owns no share of the state: the handle joins it before letting go.
  state->thread = start_thread("BackgroundInit::start", [raw] { run_all(*raw); });
  state->worker_id = state->thread.get_id();
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().states.push_back(state);
  }
  return BackgroundInit(std::move(state));
}

void BackgroundInit::finish() noexcept {
  if (!state_) return;
  BackgroundState& s = *state_;
  using namespace detail;
  if (s.fork_generation != current_fork_generation() || s.worker_id == std::this_thread::get_id()) {
    // A forked child (the helper thread does not exist here and the parent's
    // locks may be held) or a task destroying its own handle: no join, no
    // driver call; the state is left as it is.
    new std::shared_ptr<BackgroundState>(std::move(state_));
    return;
  }
  s.stop.store(true);
  const std::int64_t t0 = trace_now_ns();
  std::string running;
  std::size_t unfinished = 0;
  for (const auto& g : s.steps) {
    std::lock_guard<std::mutex> lock(g->mutex);
    if (g->state == InitStepState::running) running = g->name;
    if (!StepGate::is_settled(g->state)) ++unfinished;
  }
  if (s.thread.joinable()) s.thread.join();
  if (unfinished != 0) {
    const std::int64_t waited = trace_now_ns() - t0;
    const std::string what =
        running.empty() ? fmt::format("destroyed before {} step(s) ran: skipped", unfinished)
                        : fmt::format("destroyed while {} ran: waited {:.3f} ms for it; {} later step(s) skipped", running,
                                      ms(waited), unfinished - 1);
    logf(log::Level::info, "BackgroundInit {}", what);
    trace_span("background-destroy", what, t0, waited);
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
void need(const BackgroundState& s, std::size_t i, const char* api) {
  check_not_forked(s, api);
  const StepGate& g = s.gate(i);
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
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& g : state_->steps) {
    std::unique_lock<std::mutex> lock(g->mutex);
    if (!g->settled_cv.wait_until(lock, deadline, [&] { return StepGate::is_settled(g->state); })) return false;
  }
  return true;
}

bool BackgroundInit::finished() const noexcept {
  if (!state_) return true;
  for (const auto& g : state_->steps) {
    std::lock_guard<std::mutex> lock(g->mutex);
    if (!StepGate::is_settled(g->state)) return false;
  }
  return true;
}

std::exception_ptr BackgroundInit::error() const noexcept {
  if (!state_) return nullptr;
  for (const auto& g : state_->steps) {
    std::lock_guard<std::mutex> lock(g->mutex);
    if (g->state == InitStepState::failed) {
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
  std::lock_guard<std::mutex> lock(g.mutex);
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
