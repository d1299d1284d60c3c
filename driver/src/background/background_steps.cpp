// SPDX-License-Identifier: Apache-2.0
// Background initialisation: the plan (options checked, steps laid out) and
// the helper thread that runs the steps in order.
#include <algorithm>

#include "background/background_state.hpp"
#include "support/test_hooks.hpp"

namespace drvshim::detail {
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
    test_hooks::at(test_hooks::Point::background_settle);
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
    case InitStepKind::task: o.tasks[g.item].run(); return;
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

// After an exception escaped run_steps (out of memory while reporting a
// step): every step not settled yet fails with it, so no caller waits forever.
void fail_unsettled(BackgroundState& s, const std::exception_ptr& error) noexcept {
  for (const auto& g : s.steps) {
    {
      std::lock_guard<std::mutex> lock(g->mutex);
      if (StepGate::is_settled(g->state)) continue;
      if (g->state == InitStepState::running) g->end_ns = trace_now_ns();
      g->error = error;
      g->code = code_of(error);
      g->state = InitStepState::failed;
    }
    g->settled_cv.notify_all();
  }
}

void run_steps(BackgroundState& s) {
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
      // A report that runs out of memory after run_step succeeded lands in
      // the catch below and marks the step failed, though what it made stays.
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
}

}  // namespace

void run_all(BackgroundState& s) noexcept {
  t_background_worker = true;
  try {
    run_steps(s);
  } catch (...) {
    fail_unsettled(s, std::current_exception());
  }
  // Woken under the lock: once the exit handler sees worker_done it may let
  // the state go (a static handle is destroyed after the exit handler ran),
  // so nothing of it may be touched after the unlock.
  std::lock_guard<std::mutex> lock(s.worker_mutex);
  s.worker_done = true;
  test_hooks::at(test_hooks::Point::background_done);
  s.worker_cv.notify_all();
}

namespace {

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

}  // namespace

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
    if (l.path.empty() && l.image.empty())
      bad_option(fmt::format("library \"{}\" has neither a path nor an image", l.name));
  }
  for (const auto& m : o.modules) {
    if (m.path.empty() && m.image.empty())
      bad_option(fmt::format("module \"{}\" has neither a path nor an image", m.name));
    if (std::find(seen.begin(), seen.end(), m.device) == seen.end()) {
      bad_option(
          fmt::format("module \"{}\" is for device {}, whose primary context is not in primary_contexts", m.name,
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
    add_step(s, "module " + o.modules[i].name, InitStepKind::module, o.modules[i].device, static_cast<int>(2 + retain),
             i);
  }
  for (std::size_t i = 0; i < o.tasks.size(); ++i)
    add_step(s, "task " + o.tasks[i].name, InitStepKind::task, -1, -1, i);
  s.primaries.resize(o.primary_contexts.size());
  s.taken.assign(o.primary_contexts.size(), false);
  s.libraries.resize(o.libraries.size());
  s.modules.resize(o.modules.size());
}

}  // namespace drvshim::detail
