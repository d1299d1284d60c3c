// SPDX-License-Identifier: Apache-2.0
// The runtime's state: the driver and the policy, each device's primary
// context, the calling thread's current device, the registries (the calling
// thread's last error and the error numbers are errors.cpp's). The only runtime_compat file that includes a drvshim
// internal header (log_internal.hpp: the runtime logs through drvshim's logger).
#include "runtime.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "env.hpp"
#include "log_internal.hpp"

namespace drvshim::rt::impl {

// ---- logging ----------------------------------------------------------------------------------------

bool log_on(log::Level level) noexcept { return drvshim::log::enabled(level); }
void log_line(log::Level level, const std::string& message) noexcept { drvshim::log::write(level, message); }

void implicit(const char* trigger, const std::string& step) {
  logf(log::Level::info, "runtime_compat: {} -> {} (implicit)", trigger, step);
  trace::mark("rt-implicit", std::string(trigger) + " -> " + step);
}

// ---- the runtime --------------------------------------------------------------------------------------

std::atomic<bool> g_runtime_ready{false};

namespace {

// A child forked after the runtime started setting up (another thread may have
// held its locks at the fork, and CUDA cannot be initialised again there)
// answers cudaErrorInitializationError, as cudart does, instead of waiting on a
// lock nobody will release. A child of a process that never started can use it.
std::atomic<bool> g_started{false};
std::atomic<bool> g_forked_after_start{false};

void note_fork_child() noexcept {
  if (g_started.load(std::memory_order_relaxed)) {
    g_forked_after_start.store(true, std::memory_order_relaxed);
    g_runtime_ready.store(false, std::memory_order_relaxed);
  }
}

[[maybe_unused]] const int g_fork_handler = pthread_atfork(nullptr, nullptr, &note_fork_child);

void enter(const char* trigger) {
  if (g_forked_after_start.load(std::memory_order_relaxed)) throw UsedAfterForkError(trigger);
  g_started.store(true, std::memory_order_relaxed);
}

}  // namespace

namespace {

// Generations are unique in the process, so a thread's cached context can
// never match a slot that was reset or re-created since.
std::atomic<std::uint64_t> g_generations{1};
std::uint64_t next_generation() noexcept { return g_generations.fetch_add(1, std::memory_order_relaxed); }

// One device's primary context as the runtime holds it.
struct DeviceSlot {
  std::mutex mutex;  // guards `primary` (retain, reset)
  std::optional<PrimaryContext> primary;
  std::atomic<std::uint64_t> generation{next_generation()};  // renewed by each reset
  std::atomic<int> sticky{0};                                // a sticky error seen in its context
  // The primary context's handle once retained, kept after a reset (the
  // driver hands out the same handle again), so that a thread that still has
  // it current is known to be on this device.
  std::atomic<std::uintptr_t> primary_address{0};
};

struct Runtime {
  std::atomic<int> policy{-1};
  std::mutex driver_mutex;  // guards `driver` (load, cuInit) and `slots`
  std::optional<Driver> driver;
  // The background policy's set-up (started when the library loads, or by
  // set_policy), and the devices whose primary context the runtime took from
  // it or gave back. Lock order: driver_mutex, a slot's mutex, then this one.
  std::mutex background_mutex;
  std::optional<BackgroundInit> background;
  std::vector<int> background_consumed;
  bool background_blocked = false;             // during shutdown(): its last step must not start another
  std::atomic<const Driver*> ready{nullptr};   // set once loaded and initialised
  std::atomic<const Driver*> loaded{nullptr};  // set once loaded (initialised or not)
  std::atomic<int> init_error{0};              // the cudaError_t of a failed load or cuInit, for good
  std::exception_ptr init_failure;             // that failure (under driver_mutex), for every later caller
  std::atomic<bool> eager_done{false};
  std::vector<std::unique_ptr<DeviceSlot>> slots;  // one per device, made once cuInit succeeded
  Registries registries;
};

Runtime& runtime() noexcept {
  // Never destroyed: nvcc's generated code unregisters fatbins from atexit
  // handlers, after static destructors may have run.
  static Runtime* r = new Runtime;
  return *r;
}

DeviceSlot* slot(int device) noexcept {
  auto& r = runtime();
  if (r.ready.load(std::memory_order_acquire) == nullptr) return nullptr;
  if (device < 0 || static_cast<std::size_t>(device) >= r.slots.size()) return nullptr;
  return r.slots[static_cast<std::size_t>(device)].get();
}

void do_eager(const char* trigger);
void start_background(const char* trigger) noexcept;

// The driver the background set-up loaded (waiting for its load step, which
// throws the load's error), or nullopt when there is no background set-up.
std::optional<Driver> background_driver() {
  auto& r = runtime();
  std::lock_guard<std::mutex> lock(r.background_mutex);
  if (!r.background) return std::nullopt;
  return r.background->driver();
}

// Takes the background set-up's retain of `device`'s primary context (waiting
// for its step; its error is thrown, once), or nullopt when there is none to take.
std::optional<PrimaryContext> take_background_primary(int device) {
  auto& r = runtime();
  std::lock_guard<std::mutex> lock(r.background_mutex);
  if (!r.background || device != 0 ||
      std::find(r.background_consumed.begin(), r.background_consumed.end(), device) != r.background_consumed.end()) {
    return std::nullopt;
  }
  // Consumed whatever happens: after a failure the next call retains it itself.
  r.background_consumed.push_back(device);
  try {
    return r.background->take_primary_context(device);
  } catch (const Error&) {
    // Skipped because cuInit failed: that failure was the first call's to
    // report, and the runtime initialised since. A failed retain is this call's.
    const BackgroundInit& bg = *r.background;
    if (bg.step(bg.find(fmt::format("primary-context {}", device))).state == InitStepState::skipped)
      return std::nullopt;
    throw;
  }
}

// Loads libcuda unless it is loaded (the background set-up's, when there is
// one); the caller holds r.driver_mutex.
void load_locked(Runtime& r, const char* trigger) {
  if (r.driver) return;
  if (auto from_background = background_driver()) {
    r.driver.emplace(std::move(*from_background));
  } else {
    implicit(trigger, "load libcuda");
    r.driver.emplace(Driver::load());
  }
  r.loaded.store(&*r.driver, std::memory_order_release);
}

// Loads libcuda and runs cuInit, once; a failure is kept as the process's (initialise()).
// Under the background policy both are the background set-up's (the calls wait for what is left).
const Driver& load_and_init(const char* trigger) {
  auto& r = runtime();
  std::lock_guard<std::mutex> lock(r.driver_mutex);
  if (const Driver* d = r.ready.load(std::memory_order_acquire)) return *d;
  // Callers that waited for the lock while the first one failed get its
  // failure too: nothing retries it (initialise()).
  if (r.init_failure) std::rethrow_exception(r.init_failure);
  try {
    load_locked(r, trigger);
    if (!r.driver->initialized()) {
      implicit(trigger, "cuInit");
      r.driver->init();  // the background's cuInit: waits for it, and its error is thrown here
    }
  } catch (const Error& e) {
    // The process's answer from now on, as cudart's (initialise()).
    r.init_failure = std::current_exception();
    r.init_error.store(static_cast<int>(from_exception(e)), std::memory_order_release);
    throw;
  }
  if (r.slots.empty()) {
    const int n = r.driver->device_count();
    for (int i = 0; i < n; ++i) r.slots.push_back(std::make_unique<DeviceSlot>());
  }
  r.ready.store(&*r.driver, std::memory_order_release);
  g_runtime_ready.store(!g_forked_after_start.load(std::memory_order_relaxed), std::memory_order_release);
  return *r.driver;
}

}  // namespace

namespace {

constexpr const char* kPolicyNames[] = {"lazy", "eager", "background"};

// DRVSHIM_RT_POLICY, read once: lazy, eager or background in any case; anything
// else is reported (the value and what is accepted) and the lazy default applies.
int policy_from_environment() noexcept {
  const char* env = drvshim::detail::env::value("DRVSHIM_RT_POLICY");
  if (env == nullptr) return 0;
  const std::string value = drvshim::detail::env::lower(env);
  for (int i = 0; i < 3; ++i) {
    if (value == kPolicyNames[i]) return i;
  }
  logf(log::Level::warn,
       "DRVSHIM_RT_POLICY=\"{}\" is not one of the choices; accepted: lazy, eager, background; using "
       "the default: lazy",
       env);
  return 0;
}

}  // namespace

Policy current_policy() noexcept {
  auto& r = runtime();
  int p = r.policy.load();
  if (p < 0) {
    p = policy_from_environment();
    r.policy.store(p);
  }
  return p == 1 ? Policy::eager : p == 2 ? Policy::background : Policy::lazy;
}

const Driver& driver(const char* trigger) {
  enter(trigger);
  auto& r = runtime();
  // Ready, unless an eager set-up is still owed: a first call that only
  // initialised the driver (cudaGetDeviceFlags, cudaSetDeviceFlags) leaves it
  // to this one.
  if (const Driver* d = r.ready.load(std::memory_order_acquire);
      d != nullptr && (r.eager_done.load(std::memory_order_relaxed) || current_policy() != Policy::eager)) {
    return *d;
  }
  const Policy p = current_policy();
  if (p == Policy::eager && !r.eager_done.exchange(true)) do_eager(trigger);
  // After shutdown() the background set-up starts again at the first call (where it is eager in effect).
  if (p == Policy::background) start_background(trigger);
  return load_and_init(trigger);
}

const Driver& initialised_driver(const char* trigger) {
  enter(trigger);
  // The background set-up's early retain stays: flags change on an active
  // context as under cudart (cudaSetDeviceFlags then takes the retain over),
  // and reading them destroys nothing.
  const Driver* d = runtime().ready.load(std::memory_order_acquire);
  if (d == nullptr) {
    // After shutdown() the background set-up starts again at the first call.
    if (current_policy() == Policy::background) start_background(trigger);
    d = &load_and_init(trigger);
  }
  return *d;
}

int devices_known_before_fork() noexcept {
  return initialised_before_fork() ? static_cast<int>(runtime().slots.size()) : -1;
}

bool initialised_before_fork() noexcept {
  return g_forked_after_start.load(std::memory_order_relaxed) &&
         runtime().ready.load(std::memory_order_acquire) != nullptr;
}

cudaError_t initialise_slow(const char* api) noexcept {
  auto& r = runtime();
  if (r.ready.load(std::memory_order_acquire) != nullptr && !g_forked_after_start.load(std::memory_order_relaxed)) {
    return cudaSuccess;
  }
  if (const int e = r.init_error.load(std::memory_order_acquire); e != 0) {
    const auto code = static_cast<cudaError_t>(e);
    try {
      return fail(code, fmt::format("{}: the runtime's initialisation failed earlier in this process ({}: {}); "
                                    "it is not retried",
                                    api, cudaGetErrorName(code), cudaGetErrorString(code)));
    } catch (...) {
      thread().last = code;
      return code;
    }
  }
  return guarded(api, [&] {
    (void)initialised_driver(api);
    return cudaSuccess;
  });
}

const Driver& loaded_driver(const char* trigger) {
  // Once set up, no enter(): reading the version needs no initialisation, and
  // works in a child forked after the runtime started, as under cudart.
  auto& r = runtime();
  if (const Driver* d = r.ready.load(std::memory_order_acquire); d != nullptr) return *d;
  if (const Driver* d = r.loaded.load(std::memory_order_acquire); d != nullptr) return *d;
  enter(trigger);  // not loaded yet: a forked child must not wait on the lock
  std::lock_guard<std::mutex> lock(r.driver_mutex);
  load_locked(r, trigger);
  return *r.driver;
}

int device_count(const char* trigger) {
  driver(trigger);
  return static_cast<int>(runtime().slots.size());
}

cudaError_t check_device(const char* api, int device) {
  const int n = device_count(api);
  if (device >= 0 && device < n) return cudaSuccess;
  return fail(cudaErrorInvalidDevice, fmt::format("{}: device {} does not exist; pass an ordinal below "
                                                  "cudaGetDeviceCount ({})",
                                                  api, device, n));
}

ContextRef primary(int device, const char* trigger, std::uint64_t* generation) {
  const Driver& drv = driver(trigger);
  DeviceSlot* s = slot(device);
  if (s == nullptr) {
    if (device_count(trigger) == 0)
      throw CudaError(ErrorDetails{trigger, cudaErrorNoDevice, "no CUDA device", {}, false});
    throw CudaError(ErrorDetails{trigger, cudaErrorInvalidDevice, fmt::format("device {}", device), {}, false});
  }
  std::lock_guard<std::mutex> lock(s->mutex);
  if (!s->primary) {
    try {
      if (auto from_background = take_background_primary(device)) {
        implicit(trigger, fmt::format("take the primary context of device {} from the background set-up", device));
        s->primary.emplace(std::move(*from_background));
      } else {
        implicit(trigger, fmt::format("retain the primary context of device {}", device));
        s->primary.emplace(drv.device(device).retain_primary_context());
      }
    } catch (const CudaError& e) {
      // A device whose context died of a sticky error (a device-side assert)
      // cannot make a new one in this process: the driver's retain answers
      // the sticky code, cudart says cudaErrorDevicesUnavailable (H200,
      // kernel_assert.cu after cudaDeviceReset, 2026-12-01).
      if (!is_sticky_error(e.code())) throw;
      throw CudaError(ErrorDetails{
          trigger, cudaErrorDevicesUnavailable,  // 46, the driver's number too
          fmt::format("device {}: activating its primary context failed with {} ({})", device, e.code_name(), e.code()),
          "the device cannot be used again in this process; restart it", false});
    }
  }
  s->primary_address.store(s->primary->ref().address(), std::memory_order_release);
  // Read under the lock a reset takes to renew it: the generation is this context's.
  if (generation != nullptr) *generation = s->generation.load(std::memory_order_acquire);
  return s->primary->ref();
}

namespace {

// Each thread's view of the primary contexts it made current: the context and
// the generation it belongs to, so the hot path takes no lock.
struct CurrentCache {
  int device = -1;
  std::uint64_t generation = 0;
  std::optional<ContextRef> context;
};
thread_local CurrentCache t_current;

ContextRef current_for(int device, const char* trigger) {
  DeviceSlot* s = slot(device);
  auto& c = t_current;
  std::optional<ContextRef> ctx;
  if (s != nullptr && c.device == device && c.generation == s->generation.load(std::memory_order_acquire) &&
      c.context) {
    ctx = c.context;
  } else {
    // The generation is read before the context is taken: a reset in between
    // leaves a stale generation, which the next call misses, never a dead
    // context cached under the new generation.
    const std::uint64_t generation = s != nullptr ? s->generation.load(std::memory_order_acquire) : 0;
    ctx = primary(device, trigger);
    c.device = device;
    c.generation = generation;
    c.context = ctx;
  }
  const Driver& drv = driver(trigger);
  if (drv.current_context() != ctx->address()) {
    implicit(trigger, fmt::format("make the primary context of device {} current on this thread", device));
    // Also after a fault there, as cudart does: the calls that follow answer the sticky error.
    ctx->make_current(ContextRef::IfPoisoned::allow);
  }
  return *ctx;
}

}  // namespace

std::optional<std::uint64_t> context_id(const ContextRef& ctx) {
  try {
    return ctx.unique_id();
  } catch (const DriverTooOldError&) {
    return std::nullopt;
  }
}

int primary_device_of(std::uintptr_t address) noexcept {
  auto& r = runtime();
  if (r.ready.load(std::memory_order_acquire) == nullptr) return -1;
  for (std::size_t d = 0; d < r.slots.size(); ++d) {
    if (r.slots[d]->primary_address.load(std::memory_order_acquire) == address) return static_cast<int>(d);
  }
  return -1;
}

namespace {

// The context the program made current itself (cuCtxCreate) as this thread
// last saw it, with its unique id (checked at each use: another context can
// be created at a destroyed one's address) and the runtime's epoch (shutdown
// starts a new one: the view belongs to the driver of its epoch).
struct ForeignCache {
  std::uintptr_t address = 0;
  std::uint64_t id = 0;
  std::uint64_t epoch = 0;
  std::optional<ContextRef> context;
};
thread_local ForeignCache t_foreign;
std::atomic<std::uint64_t> g_epoch{1};

}  // namespace

ContextRef context(const char* trigger) {
  // As cudart: the calling thread's current context, whoever made it current;
  // the device's primary context only when none is.
  const Driver& drv = driver(trigger);
  const std::uintptr_t current = drv.current_context();
  if (current != 0) {
    const auto& c = t_current;
    if (c.context && c.context->address() == current) {
      DeviceSlot* s = slot(c.device);
      if (s != nullptr && c.generation == s->generation.load(std::memory_order_acquire)) return *c.context;
    }
    if (const int device = primary_device_of(current); device >= 0) {
      thread().device = device;
      return current_for(device, trigger);
    }
    auto& f = t_foreign;
    const std::uint64_t epoch = g_epoch.load(std::memory_order_acquire);
    if (f.context && f.address == current && f.epoch == epoch) {
      if (const auto id = context_id(*f.context); id && *id == f.id) return *f.context;
    }
    ContextRef view = *current_context(drv);
    const std::optional<std::uint64_t> id = context_id(view);
    const int device = view.device().ordinal();
    // A primary context the program retained and made current itself is the
    // device's primary context all the same: the runtime uses it as its own
    // (and retains it). Its handle is learnt with a retain given back at once,
    // which cannot destroy it: someone else holds it active.
    if (drv.device(device).primary_context_state().active) {
      std::uintptr_t handle = 0;
      {
        const PrimaryContext probe = drv.device(device).retain_primary_context();
        handle = probe.ref().address();
      }
      if (handle == current) {
        thread().device = device;
        return current_for(device, trigger);
      }
    }
    // Without cuCtxGetId (drivers before 12.0) a view cannot be told from a
    // later context at its address: it is not kept.
    if (id) f = ForeignCache{current, *id, epoch, view};
    logf(log::Level::info, "runtime_compat: {} uses the context 0x{:x} the program made current (device {})", trigger,
         current, device);
    return view;
  }
  return current_for(thread().device, trigger);
}

bool foreign_context_current(const char* trigger) {
  // The driver initialised first: a program's context can be current before
  // the runtime's first call (cuInit, cuCtxCreate, then the runtime).
  const Driver& drv = initialised_driver(trigger);
  const std::uintptr_t current = drv.current_context();
  if (current == 0 || primary_device_of(current) >= 0) return false;
  // A context the runtime has not seen: context() tells a primary context the
  // program retained itself from one the program created.
  return foreign(context(trigger));
}

int current_device() {
  const Driver* drv = runtime().ready.load(std::memory_order_acquire);
  if (drv == nullptr) return thread().device;
  const std::uintptr_t current = drv->current_context();
  if (current == 0) return thread().device;
  if (const int d = primary_device_of(current); d >= 0) return d;
  return current_context(*drv)->device().ordinal();  // whoever made it current: no retain, no activation
}

ContextRef make_current(int device, const char* trigger) { return current_for(device, trigger); }

std::uint64_t generation(int device) noexcept {
  DeviceSlot* s = slot(device);
  return s != nullptr ? s->generation.load(std::memory_order_acquire) : 0;
}

bool has_primary(int device) noexcept {
  DeviceSlot* s = slot(device);
  if (s == nullptr) return false;
  std::lock_guard<std::mutex> lock(s->mutex);
  return s->primary.has_value();
}

cudaError_t enter(const char* api, Prologue step) noexcept {
  std::optional<ContextRef> here;
  return enter(api, step, here);
}

cudaError_t enter(const char* api, Prologue step, std::optional<ContextRef>& here) noexcept {
  return guarded(api, [&] {
    int device = -1;  // whose sticky error to answer (-1: none)
    if (step == Prologue::driver || step == Prologue::device_sticky) {
      // The question cudart asks first: inside a host function the driver
      // (and drvshim, for the host functions it runs) refuses it.
      const std::uintptr_t current = driver(api).current_context();
      if (step == Prologue::driver) return cudaSuccess;
      device = current != 0 ? primary_device_of(current) : thread().device;
    } else {
      const ContextRef& ctx = here.emplace(context(api));
      if (step == Prologue::sticky) device = primary_device_of(ctx.address());
    }
    if (const cudaError_t sticky = sticky_error(device); sticky != cudaSuccess) {
      return fail(sticky, fmt::format("{}: device {} has a sticky error ({}): reset it (cudaDeviceReset)", api, device,
                                      static_cast<int>(sticky)));
    }
    return cudaSuccess;
  });
}

void note_sticky_where_poisoned(cudaError_t e) noexcept {
  auto& r = runtime();
  if (r.ready.load(std::memory_order_acquire) == nullptr) return;
  for (std::size_t d = 0; d < r.slots.size(); ++d) {
    DeviceSlot& s = *r.slots[d];
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.primary && s.primary->ref().sticky_error() != 0) s.sticky.store(static_cast<int>(e));
  }
}

void note_sticky(int device, cudaError_t e) noexcept {
  if (DeviceSlot* s = slot(device)) s->sticky.store(static_cast<int>(e));
}

cudaError_t sticky_error(int device) noexcept {
  DeviceSlot* s = slot(device);
  return s != nullptr ? static_cast<cudaError_t>(s->sticky.load()) : cudaSuccess;
}

void release_background_retain(int device) noexcept {
  // A retain the background set-up made and the program never used: a reset
  // leaves the primary context inactive, as under the other policies.
  try {
    if (auto early = take_background_primary(device)) early->release();
  } catch (const std::exception& e) {
    logf(log::Level::info, "runtime_compat: cudaDeviceReset: the background set-up's retain failed: {}", e.what());
  }
}

void reset_device(int device) {
  release_background_retain(device);
  DeviceSlot* s = slot(device);
  if (s == nullptr) return;
  drop_objects(device);
  std::optional<PrimaryContext> released;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->generation.store(next_generation(), std::memory_order_release);
    s->sticky.store(0);
    released = std::move(s->primary);
    s->primary.reset();
  }
  if (released) {
    logf(log::Level::info, "runtime_compat: cudaDeviceReset releases the primary context of device {}", device);
    trace::mark("rt-reset", fmt::format("device {}", device));
    released->release();  // outside the lock: the release waits for the context's work
  }
}

// ---- streams ------------------------------------------------------------------------------------------

StreamRef stream_of(cudaStream_t stream, DefaultStream zero, const char* trigger) {
  const auto handle = reinterpret_cast<std::uintptr_t>(stream);
  if (handle == 0) {
    const ContextRef ctx = context(trigger);
    return zero == DefaultStream::per_thread ? StreamRef::per_thread_default(ctx) : StreamRef::legacy_default(ctx);
  }
  if (handle == reinterpret_cast<std::uintptr_t>(cudaStreamLegacy)) return StreamRef::legacy_default(context(trigger));
  if (handle == reinterpret_cast<std::uintptr_t>(cudaStreamPerThread)) {
    return StreamRef::per_thread_default(context(trigger));
  }
  // A stream names its context: the calls that also make the thread's
  // context current, as cudart's do, do so in their prologue (enter()).
  const auto entry = registries().streams.find(handle);
  if (!entry) {
    // A stream the runtime did not create (cuStreamCreate, another library):
    // cudaStream_t is CUstream, and the driver knows its context.
    ContextRef ctx = context_of_stream(driver(trigger), handle);
    // A driver-made stream of a primary context the runtime holds: the
    // runtime's own view of that context (kernels bound there are reused).
    if (const int device = primary_device_of(ctx.address()); device >= 0) ctx = primary(device, trigger);
    return StreamRef::wrap(ctx, handle);
  }
  return entry->owner.ref();
}

// ---- registries ---------------------------------------------------------------------------------------

Registries& registries() noexcept { return runtime().registries; }

void drop_objects(std::optional<int> device) {
  drop_peer_access(device);
  auto& r = registries();
  const auto mine = [&](const auto& entry) { return !device || entry.device == *device; };
  // Removed under the registries' locks, destroyed after (destruction calls the driver).
  auto events = r.events.remove_if(mine);
  auto streams = r.streams.remove_if(mine);
  auto registrations = r.registrations.remove_if(mine);
  auto host = r.host_memory.remove_if(mine);
  auto memory = r.device_memory.remove_if(mine);
}

namespace {

void do_eager(const char* trigger) {
  logf(log::Level::info, "runtime_compat: eager set-up, triggered by {}", trigger);
  trace::mark("rt-eager", trigger);
  (void)load_and_init(trigger);
  if (device_count(trigger) == 0) return;
  (void)context(trigger);
  load_all_fatbins(trigger);
}

// The background set-up's last step: the registered fatbins, on a driver the
// background initialised (a failed cuInit is left for the first call to report).
void background_fatbins() {
  auto& r = runtime();
  {
    std::lock_guard<std::mutex> lock(r.background_mutex);
    if (!r.background) return;
    if (r.background->step(r.background->find("init")).state != InitStepState::done) return;
  }
  load_all_fatbins("the background set-up");
}

// The eager set-up on a helper thread (drvshim::BackgroundInit): load, cuInit,
// device 0's primary context (the default device, as the eager set-up), then
// the fatbins registered by then (later ones load at their first launch).
void start_background(const char* trigger) noexcept {
  auto& r = runtime();
  std::lock_guard<std::mutex> lock(r.background_mutex);
  if (r.background || r.background_blocked || r.ready.load(std::memory_order_acquire) != nullptr ||
      r.init_error.load(std::memory_order_acquire) != 0) {
    return;  // running, set up, or failed for good
  }
  try {
    BackgroundInitOptions options;
    options.primary_contexts = {0};
    options.tasks.push_back(BackgroundTask{"rt-fatbins", &background_fatbins});
    logf(log::Level::info, "runtime_compat: background set-up starts ({})", trigger);
    trace::mark("rt-background", trigger);
    r.background_consumed.clear();
    r.background.emplace(BackgroundInit::start(std::move(options)));
  } catch (const std::exception& e) {
    logf(log::Level::warn, "runtime_compat: the background set-up could not start ({}); the first call sets up",
         e.what());
  }
}

}  // namespace

}  // namespace drvshim::rt::impl

// ---- DRVSHIM_RT_TRACE ------------------------------------------------------------------------------------

namespace {

// DRVSHIM_RT_TRACE=1: record the trace from the first call and print the
// driver-call timeline to stderr at exit (no driver call is made then).
struct TraceAtExit {
  TraceAtExit() {
    const char* env = drvshim::detail::env::value("DRVSHIM_RT_TRACE");
    if (env == nullptr) return;
    const auto on = drvshim::detail::env::parse_flag(env);
    if (!on) {
      drvshim::detail::logf(
          drvshim::log::Level::warn,
          "DRVSHIM_RT_TRACE=\"{}\" is not a switch; accepted: 1/true/yes/on or 0/false/no/off; using the default: off",
          env);
      return;
    }
    if (!*on) return;
    drvshim::trace::enable(true);
    std::atexit([] {
      std::fprintf(stderr, "\nlibdrvshim_cudart: driver-call timeline (drvshim trace)\n%s",
                   drvshim::trace::format_timeline(drvshim::trace::records()).c_str());
    });
  }
};
const TraceAtExit g_trace_at_exit;

// DRVSHIM_RT_POLICY=background: the set-up starts on a helper thread as the
// library loads (after the trace above is on), while the program starts up.
struct BackgroundAtLoad {
  BackgroundAtLoad() {
    using namespace drvshim::rt::impl;
    if (current_policy() == drvshim::rt::Policy::background) start_background("libdrvshim_cudart load");
  }
};
const BackgroundAtLoad g_background_at_load;

}  // namespace

// ---- the C++ controls (runtime_compat.hpp) ------------------------------------------------------------

namespace drvshim::rt {

using namespace impl;

void set_policy(Policy p) noexcept {
  runtime().policy.store(p == Policy::eager ? 1 : p == Policy::background ? 2 : 0);
  if (p == Policy::background) start_background("rt::set_policy");
}
Policy policy() noexcept { return current_policy(); }

int setup() {
  // A failed initialisation stays the process's, here too.
  if (const int e = runtime().init_error.load(std::memory_order_acquire); e != 0) return initialise_slow("setup");
  return static_cast<int>(guarded("setup", [] {
    runtime().eager_done.store(true);
    do_eager("setup");
    return cudaSuccess;
  }));
}

void shutdown() noexcept {
  auto& r = runtime();
  try {
    // The background set-up first: its destruction waits for its step in
    // progress (its last step uses the runtime's state), outside the lock it takes.
    std::optional<BackgroundInit> background;
    {
      std::lock_guard<std::mutex> lock(r.background_mutex);
      background = std::move(r.background);
      r.background.reset();
      r.background_consumed.clear();
      r.background_blocked = true;
    }
    background.reset();
    drop_objects(std::nullopt);
    unload_fatbins();
    std::lock_guard<std::mutex> lock(r.driver_mutex);
    for (auto& s : r.slots) {
      std::lock_guard<std::mutex> slot_lock(s->mutex);
      s->generation.store(next_generation());
      s->primary.reset();
      s->sticky.store(0);
    }
    g_runtime_ready.store(false, std::memory_order_release);
    r.ready.store(nullptr, std::memory_order_release);
    r.loaded.store(nullptr, std::memory_order_release);
    r.slots.clear();
    r.driver.reset();
    r.init_failure = nullptr;  // a failed initialisation too is tried again after a shutdown
    r.init_error.store(0, std::memory_order_release);
  } catch (...) {
    // Shutdown is best effort: what could not be released stays with the driver.
  }
  t_current = CurrentCache{};
  // The calling thread's last error belonged to the runtime shut down.
  thread().last = cudaSuccess;
  thread().detail.clear();
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
  r.eager_done.store(false);
  r.policy.store(-1);
  std::lock_guard<std::mutex> lock(r.background_mutex);
  r.background_blocked = false;
}

std::string last_error_detail() { return thread().detail; }

}  // namespace drvshim::rt
