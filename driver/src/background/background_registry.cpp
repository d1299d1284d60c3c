// SPDX-License-Identifier: Apache-2.0
// Background initialisation: the registry of live states and of the gates
// drvshim's own calls wait at (background_wait.hpp), and the exit handler
// that stops every helper thread.
#include <pthread.h>

#include <algorithm>
#include <cstdlib>

#include "background/background_state.hpp"
#include "seam/access.hpp"

namespace drvshim::detail {

thread_local bool t_background_worker = false;

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

namespace {

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
    if (s->on_worker()) continue;  // exit() called from a task
    s->stop.store(true);
    std::unique_lock<std::mutex> lock(s->worker_mutex);
    if (!s->worker_cv.wait_for(lock, std::chrono::seconds(30), [&] { return s->worker_done; })) {
      logf(log::Level::error, "exit: a background initialisation's step still runs after 30 s; exiting without it");
      continue;
    }
    lock.unlock();
    // A handle never destroyed (runtime_compat's) leaves a finished thread
    // behind, which TSan's thread-leak check reports at exit: detached here,
    // it is not. Not joined: after its step the thread still runs the
    // program's thread_local destructors, and one of them may wait for a lock
    // the thread calling exit() holds.
    s->detach_thread();
  }
}

}  // namespace

void register_exit_handler_once() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(&stop_all_at_exit); });
}

void publish_core(BackgroundState& s) {
  CoreEntry entry;
  entry.core = detail::Access::core(*s.driver).get();
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

namespace {

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

}  // namespace drvshim::detail
