// SPDX-License-Identifier: Apache-2.0
#pragma once
// The runtime's state, shared by the API-area files: the loaded driver and
// the policy, each device's primary context, the calling thread's device and
// last error, cudart's error numbers for drvshim's exceptions, and the
// registries of what the program allocated and created.
//
// Locking: each piece of state has its own small lock, held only to read or
// change that state and never across a driver call that can block
// (synchronisation, blocking copies, frees): such calls run on objects the
// caller holds by shared_ptr after the lock is dropped. One-time steps
// (loading libcuda, cuInit, retaining a primary context, loading a fatbin)
// run under the lock of what they set up, so concurrent first users wait for
// the one that performs the step, and nobody else does.
// Declares the legacy and the per-thread-default-stream (_ptsz/_ptds) form of
// every entry point, as when cudart itself is built, so the compiler checks
// both against the toolkit's declarations.
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <drvshim/drvshim.hpp>
#include <drvshim/runtime_compat.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

// Every cudart entry point runtime_compat defines: C linkage, exported.
#define DRVSHIM_CUDART extern "C" __attribute__((visibility("default")))

namespace drvshim::rt::impl {

// ---- logging (runtime_compat's one door into drvshim's logger: log.cpp) ------------------------

bool log_on(log::Level level) noexcept;
void log_line(log::Level level, const std::string& message) noexcept;
template <class... A>
void logf(log::Level level, fmt::format_string<A...> format, A&&... args) noexcept {
  if (!log_on(level)) return;
  try {
    log_line(level, fmt::format(format, std::forward<A>(args)...));
  } catch (...) {
    // Logging never fails the call being logged.
  }
}

// An implicit step: logged at info with the call that triggered it, marked "rt-implicit".
void implicit(const char* trigger, const std::string& step);

// ---- errors ----------------------------------------------------------------------------------------

// Where runtime_compat raises a driver-style error itself (a CudaError with
// a CUresult number) it passes the cudaError_t of the same number: for these
// results the numbers are shared (cudart_errors.inc).
// cudart's number for a CUresult (generated from the toolkit's headers).
cudaError_t from_driver(int cu_result) noexcept;
// cudart's number for a drvshim exception.
cudaError_t from_exception(const drvshim::Error& e) noexcept;
// Sets the calling thread's last error and its detail; returns `e`.
cudaError_t fail(cudaError_t e, std::string detail);
// A null pointer argument (cudaErrorInvalidValue).
cudaError_t null_argument(const char* api, const char* what);
// A call outside the subset: logged at error naming it, cudaErrorNotSupported.
cudaError_t not_supported(const char* api, const char* why = nullptr);
// Records a sticky error (illegal address, assert, ...) against `device`.
void note_sticky(int device, cudaError_t e) noexcept;
// Records a sticky error against each device whose primary context drvshim
// saw poisoned (the context the faulting work ran in, whichever device the
// calling thread is on); none when the fault was in a context the program created.
void note_sticky_where_poisoned(cudaError_t e) noexcept;
// The sticky error of `device`, or cudaSuccess.
cudaError_t sticky_error(int device) noexcept;

// Runs `body` (which returns a cudaError_t) turning drvshim's exceptions into
// cudart's numbers and the thread's last error. Takes no lock.
template <class F>
cudaError_t guarded(const char* api, F&& body) noexcept;

// ---- the calling thread ---------------------------------------------------------------------------

struct ThreadState {
  int device = 0;  // cudaSetDevice's choice; device 0 until then
  cudaError_t last = cudaSuccess;
  std::string detail;  // what the last error was about
};
ThreadState& thread() noexcept;

// ---- the driver, the devices, their primary contexts ------------------------------------------------

Policy current_policy() noexcept;

// The loaded and initialised driver (loading it and running cuInit on first
// use, or the whole eager set-up under the eager policy).
const Driver& driver(const char* trigger);
// The same without the eager set-up, for the calls that configure or read a
// device's flags (cudaSetDeviceFlags, cudaGetDeviceFlags, cudaInitDevice):
// under the eager policy the set-up follows at the next call (driver()).
const Driver& initialised_driver(const char* trigger);
// The driver, loaded but maybe not initialised (cudaDriverGetVersion).
const Driver& loaded_driver(const char* trigger);
// Number of devices (0 when there are none).
int device_count(const char* trigger);
// cudaErrorInvalidDevice for `device`, or cudaSuccess.
cudaError_t check_device(const char* api, int device);

// Device `device`'s primary context, retained once for the process;
// `generation`, when given, receives the reset generation it belongs to.
ContextRef primary(int device, const char* trigger, std::uint64_t* generation = nullptr);
// The calling thread's device's primary context, retained and made current
// on this thread (cuCtxSetCurrent only when another one is current), as cudart does.
ContextRef context(const char* trigger);
// Whether `ctx` is a context the program made current itself (cuCtxCreate),
// not a device's primary context (whoever retained it: context() gives the
// runtime's own view of a primary context).
inline bool foreign(const ContextRef& ctx) noexcept { return !ctx.is_primary(); }
// The context's unique id (cuCtxGetId), or nullopt on a driver without it (before 12.0).
std::optional<std::uint64_t> context_id(const ContextRef& ctx);
// The device whose primary context the runtime retained has this handle
// (also after a reset), or -1.
int primary_device_of(std::uintptr_t address) noexcept;
// Whether a context the program created itself is current on this thread
// (initialising the driver if the runtime has not yet).
bool foreign_context_current(const char* trigger);
// The calling thread's device: the current context's when the program made
// one current itself, else cudaSetDevice's choice (no driver call before the
// runtime set up).
int current_device();
// The primary context of `device` made current on this thread (cudaSetDevice).
ContextRef make_current(int device, const char* trigger);
// The reset generation of `device` (bumped by cudaDeviceReset and shutdown):
// what is bound to a primary context is valid for one generation.
std::uint64_t generation(int device) noexcept;
// Whether `device`'s primary context is retained by the runtime now.
bool has_primary(int device) noexcept;
// Releases what the runtime holds on `device` (cudaDeviceReset).
void reset_device(int device);
// Releases only the background set-up's retain of `device`'s primary context,
// if the program never used it (part of reset_device).
void release_background_retain(int device) noexcept;

// ---- cudart's prologue -----------------------------------------------------------------------------

// cudart's first step in every entry point but the five that need no device
// (cudaDriverGetVersion, cudaRuntimeGetVersion, cudaGetErrorName,
// cudaGetErrorString, cudaCreateChannelDesc): the process's initialisation
// (load libcuda, cuInit), once. Its failure is the process's: every later call
// answers it before looking at its arguments, cudaGetLastError returns it
// every time, and nothing retries it (with CUDA_VISIBLE_DEVICES="", an H100
// and cudart 13.0 answer cudaErrorNoDevice from every call, 2026-12-07). A
// child forked after the runtime started answers cudaErrorInitializationError
// the same way. cudaSuccess, or that error (recorded as the thread's last error).
cudaError_t initialise_slow(const char* api) noexcept;
// Whether this process is a child forked after the runtime initialised in its parent.
bool initialised_before_fork() noexcept;
// In such a child, the number of devices the parent's initialisation found; else -1.
int devices_known_before_fork() noexcept;
// Whether initialise() has nothing to do: the runtime initialised in this
// process (not in a parent before a fork) and was not shut down since.
extern std::atomic<bool> g_runtime_ready;
inline cudaError_t initialise(const char* api) noexcept {
  // Every call passes here (cudaGetLastError after each launch too): one load.
  if (g_runtime_ready.load(std::memory_order_acquire)) [[likely]]
    return cudaSuccess;
  return initialise_slow(api);
}

// What cudart 13.0 does at the start of an entry point, before it reads the
// call's arguments (measured per function by tests/runtime_api/conformance on
// an H100: a new thread, the first call of a process, a host function, a
// context with a sticky error):
//   driver   loads and initialises the driver and asks it for the thread's
//            context: an initialisation error, or cudaErrorNotPermitted
//            inside a host function, is the call's answer whatever its arguments
//   context  also makes the thread's context current (the device's primary
//            context, retained, when none is), as every call that works in a
//            context does: a call refused for its arguments leaves it current
//   sticky   also answers the device's sticky error, for the calls cudart
//            refuses with it before looking at their arguments
//   device_sticky  `driver`, then the sticky error of the thread's device,
//            making no context current (calls that work through a stream or
//            an event of their own)
// Each entry point calls enter() at the place cudart does (some check an
// output pointer or an enum first).
enum class Prologue { driver, context, sticky, device_sticky };
// cudaSuccess, or the error the call returns (recorded as the thread's last error).
cudaError_t enter(const char* api, Prologue step) noexcept;
// enter() for Prologue::context or Prologue::sticky that also hands back the
// calling thread's context it took (set once the prologue got that far).
cudaError_t enter(const char* api, Prologue step, std::optional<ContextRef>& here) noexcept;

// ---- streams ---------------------------------------------------------------------------------------

// How a stream argument of 0 is read: the legacy default stream, or the
// per-thread default stream (programs built with --default-stream per-thread,
// which call the _ptsz/_ptds entry points).
enum class DefaultStream { legacy, per_thread };
// The stream a cudart handle names: 0, cudaStreamLegacy (0x1),
// cudaStreamPerThread (0x2), or a stream from cudaStreamCreate*. Throws
// InvalidArgumentError (cudaErrorInvalidResourceHandle) for other handles.
StreamRef stream_of(cudaStream_t stream, DefaultStream zero, const char* trigger);

// ---- registries ------------------------------------------------------------------------------------

// What the program allocated and created through the runtime, by address or
// handle. Entries are shared_ptr so a caller can use one after the registry
// lock is dropped while another thread removes it: the owner (and its driver
// object) goes when the last user lets go.
template <class T>
class Registry {
 public:
  void add(std::uintptr_t key, std::shared_ptr<T> item) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_[key] = std::move(item);
  }
  std::shared_ptr<T> find(std::uintptr_t key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = items_.find(key);
    return it != items_.end() ? it->second : nullptr;
  }
  // The entry whose [key, key + size(entry)) contains `address`, and its key.
  template <class Size>
  std::pair<std::uintptr_t, std::shared_ptr<T>> find_containing(std::uintptr_t address, Size&& size) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = items_.upper_bound(address);
    if (it == items_.begin()) return {0, nullptr};
    --it;
    if (address - it->first < size(*it->second)) return {it->first, it->second};
    return {0, nullptr};
  }
  std::shared_ptr<T> remove(std::uintptr_t key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = items_.find(key);
    if (it == items_.end()) return nullptr;
    auto item = std::move(it->second);
    items_.erase(it);
    return item;
  }
  template <class Pred>
  std::vector<std::shared_ptr<T>> remove_if(Pred&& pred) {
    std::vector<std::shared_ptr<T>> out;
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = items_.begin(); it != items_.end();) {
      if (pred(*it->second)) {
        out.push_back(std::move(it->second));
        it = items_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::shared_ptr<T>> items_;
};

// Only what the runtime made in primary contexts is recorded: what it makes
// in a context the program made current itself (cuCtxCreate) is the
// program's, as under cudart, and the calls that take it back (cudaFree,
// cudaStreamDestroy, ...) hand it to the driver like any handle the runtime
// does not know. A registry is a cache: the driver's handle is the truth.
// Device memory: cudaMalloc, cudaMallocPitch, cudaMallocManaged, cudaMallocAsync.
struct DeviceAllocation {
  int device = 0;
  std::size_t bytes = 0;
  std::variant<DeviceBuffer, ManagedBuffer, AsyncDeviceBuffer> owner;
};
// Page-locked host memory: cudaHostAlloc / cudaMallocHost.
struct HostAllocation {
  int device = 0;
  unsigned flags = 0;
  PinnedBuffer owner;
};
// Registered host memory: cudaHostRegister.
struct HostRegistration {
  int device = 0;
  unsigned flags = 0;
  RegisteredRange owner;
};
struct StreamEntry {
  int device = 0;
  unsigned flags = 0;
  int priority = 0;
  Stream owner;
};
struct EventEntry {
  int device = 0;
  unsigned flags = 0;
  Event owner;
};

struct Registries {
  Registry<DeviceAllocation> device_memory;
  Registry<HostAllocation> host_memory;
  Registry<HostRegistration> registrations;
  Registry<StreamEntry> streams;
  Registry<EventEntry> events;
};
Registries& registries() noexcept;

// Drops every registered object of `device` (cudaDeviceReset), or all of them.
void drop_objects(std::optional<int> device);
// Drops the peer accesses cudaDeviceEnablePeerAccess made from or to `device` (all: nullopt) (peer.cpp).
void drop_peer_access(std::optional<int> device);

// ---- registration (registration.cpp) --------------------------------------------------------------

// Loads every registered fatbin (the eager policy); failures are logged and
// reported again at the launch that needs the fatbin.
void load_all_fatbins(const char* trigger) noexcept;
// Forgets what is bound to contexts and the loaded libraries (shutdown).
void unload_fatbins() noexcept;

// ---- the implementation of guarded ------------------------------------------------------------------

cudaError_t fail_exception(const char* api, const drvshim::Error& e) noexcept;
cudaError_t fail_other(const char* api, const char* what, bool out_of_memory) noexcept;

template <class F>
cudaError_t guarded(const char* api, F&& body) noexcept {
  try {
    return body();
  } catch (const drvshim::Error& e) {
    return fail_exception(api, e);
  } catch (const std::bad_alloc&) {
    return fail_other(api, "host allocation failed", true);
  } catch (const std::exception& e) {
    return fail_other(api, e.what(), false);
  }
}

}  // namespace drvshim::rt::impl
