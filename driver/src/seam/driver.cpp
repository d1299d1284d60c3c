// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <drvshim/device.hpp>
#include <drvshim/driver.hpp>

#include <climits>
#include <cstdlib>

#include "background/background_wait.hpp"
#include "dl_open.hpp"
#include "env.hpp"
#include "log_internal.hpp"
#include "seam/core.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace detail {

// ---- argument rendering for the observed path --------------------------------

void append_arg(std::string& out, long long v) { out += fmt::format("{}", v); }
void append_arg(std::string& out, unsigned long long v) { out += fmt::format("{}", v); }
void append_arg(std::string& out, const void* p) {
  if (p == nullptr) {
    out += "null";
  } else {
    out += fmt::format("{}", p);
  }
}
void append_arg(std::string& out, double v) { out += fmt::format("{}", v); }
void append_arg(std::string& out, const char* s) {
  if (s == nullptr) {
    out += "null";
  } else {
    out += fmt::format("\"{}\"", s);
  }
}

ObservedCall::ObservedCall(const DriverCore& c) noexcept
    : core(c), start_ns(trace_now_ns()), wanted(trace_active() || log_traces_calls()) {}

void ObservedCall::finish(Api id, CUresult result, std::string args) noexcept {
  if (!wanted) return;
  const std::int64_t duration = trace_now_ns() - start_ns;
  std::uintptr_t context = 0;
  if (const AnyFn raw = core.slots[index(Api::k_cuCtxGetCurrent)]; raw != nullptr && core.initialized.load()) {
    // Read directly, not through the seam, so the trace does not trace itself.
    PFN_cuCtxGetCurrent_v4000 get_current;
    std::memcpy(&get_current, &raw, sizeof(get_current));
    CUcontext ctx = nullptr;
    if (get_current(&ctx) == CUDA_SUCCESS) context = reinterpret_cast<std::uintptr_t>(ctx);
  }
  logf(log::Level::trace, "{}({}) -> {} ({}) in {:.3f} us [ctx 0x{:x}]", api_name(id), args,
       result_name(static_cast<int>(result)), static_cast<int>(result), static_cast<double>(duration) / 1000.0,
       context);
  trace_record_call(api_name(id), start_ns, duration, args, static_cast<int>(result), context);
}

// ---- errors -------------------------------------------------------------------

void throw_used_after_fork(const char* api) { throw UsedAfterForkError(api); }

namespace {

// The calling thread's current context, read directly (not traced): where a
// sticky error landed.
std::uintptr_t current_context_raw(const DriverCore& core) noexcept {
  const AnyFn raw = core.slots[index(Api::k_cuCtxGetCurrent)];
  if (raw == nullptr || !core.initialized.load()) return 0;
  PFN_cuCtxGetCurrent_v4000 get_current;
  std::memcpy(&get_current, &raw, sizeof(get_current));
  CUcontext ctx = nullptr;
  return get_current(&ctx) == CUDA_SUCCESS ? reinterpret_cast<std::uintptr_t>(ctx) : 0;
}

// Poisons `context`, else the context of the ContextScope around the failing
// call, else the thread's current context.
void poison(const DriverCore& core, int result, const char* api, std::uintptr_t context) noexcept {
  const std::uintptr_t ctx = context != 0            ? context
                             : t_scoped_context != 0 ? t_scoped_context
                                                     : current_context_raw(core);
  if (ctx == 0) return;
  try {
    std::lock_guard<std::mutex> lock(core.poison_mutex);
    if (core.poisoned.emplace(ctx, DriverCore::Poison{result, api}).second) {
      logf(log::Level::error,
           "context 0x{:x} is poisoned by {} ({}) reported at {}: later calls on it fail fast and its objects are "
           "leaked rather than destroyed",
           ctx, result_name(result), result, api);
      trace::mark("context-poisoned", fmt::format("context 0x{:x}, {} at {}", ctx, result_name(result), api));
    }
    core.any_poisoned.store(true);
  } catch (...) {
  }
}

}  // namespace

void DriverCore::forget_poison(std::uintptr_t context) const noexcept {
  if (!any_poisoned.load()) return;
  std::lock_guard<std::mutex> lock(poison_mutex);
  if (poisoned.erase(context) != 0) {
    logf(log::Level::info, "context 0x{:x} is gone: it is no longer treated as poisoned", context);
    trace::mark("context-unpoisoned", fmt::format("context 0x{:x}", context));
  }
}

bool DriverCore::refuse_cleanup_in_host_function() noexcept {
  logf(log::Level::error,
       "a drvshim object was destroyed inside a host function, where CUDA forbids driver calls: its driver resource "
       "is leaked; destroy it after the stream has passed the host function (or let the closure own it)");
  return false;
}

void DriverCore::bury_spent_callbacks() const noexcept {
  if (!any_spent.load(std::memory_order_relaxed) || in_host_function()) return;
  std::vector<std::function<void()>> spent;
  {
    std::lock_guard<std::mutex> lock(spent_mutex);
    spent.swap(spent_callbacks);
    any_spent.store(false, std::memory_order_relaxed);
  }
  spent.clear();  // here, outside any host function, their captures may call the driver
}

bool DriverCore::is_poisoned(std::uintptr_t context) const noexcept {
  std::lock_guard<std::mutex> lock(poison_mutex);
  return poisoned.count(context) != 0;
}

void DriverCore::check_not_poisoned(std::uintptr_t context, const char* api) const {
  if (!any_poisoned.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(poison_mutex);
  const auto it = poisoned.find(context);
  if (it == poisoned.end()) return;
  throw ContextPoisonedError(api, it->second.code, it->second.api, fmt::format("context 0x{:x}", context));
}

void sync_after_submit(const DriverCore& core, CUstream stream, const char* api, const std::string& objects) {
  // Work submitted to a capturing stream was recorded, not run: there is
  // nothing to wait for, and waiting would end the capture.
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
  if (core.has(Api::k_cuStreamIsCapturing) &&
      DRVSHIM_CU(core, cuStreamIsCapturing, stream, &capturing) == CUDA_SUCCESS &&
      capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
    return;
  }
  // The whole context, not only the stream: work of any stream there that
  // fails then shows up at the operation that was submitted last.
  const CUresult r = t_scoped_context != 0 && core.captures.load(std::memory_order_relaxed) == 0
                         ? DRVSHIM_CU(core, cuCtxSynchronize)
                         : DRVSHIM_CU(core, cuStreamSynchronize, stream);
  if (r == CUDA_SUCCESS) return;
  if (is_sticky_error(static_cast<int>(r))) poison(core, static_cast<int>(r), api, 0);
  // Named on purpose: the synchronisation right after submission pins the failure on this operation.
  throw CudaError(ErrorDetails{
      api, static_cast<int>(r), objects + "; detected by DRVSHIM_SYNC_EACH_OP=1 right after submission", {}, true});
}

void raise_across(const DriverCore& core, int result, const char* api, std::string objects, std::uintptr_t first,
                  std::uintptr_t second) {
  if (!is_sticky_error(result)) raise(core, result, api, std::move(objects));
  std::uintptr_t charged = 0;
  for (const std::uintptr_t ctx : {first, second}) {
    if (ctx == 0 || (ctx == second && second == first)) continue;
    if (DRVSHIM_CU(core, cuCtxPushCurrent, reinterpret_cast<CUcontext>(ctx)) != CUDA_SUCCESS) continue;
    // A question that does not wait (a context's queued work may wait for
    // the caller): a faulted context answers every call with its error.
    const CUresult answer = DRVSHIM_CU(core, cuStreamQuery, CU_STREAM_LEGACY);
    CUcontext popped = nullptr;
    if (DRVSHIM_CU(core, cuCtxPopCurrent, &popped) != CUDA_SUCCESS) {
      logf(log::Level::error, "{}: popping context 0x{:x} after asking it for its error failed", api, ctx);
    }
    if (is_sticky_error(static_cast<int>(answer))) {
      poison(core, static_cast<int>(answer), api, ctx);
      if (charged == 0) charged = ctx;
    }
  }
  raise(core, result, api, std::move(objects), {}, charged);
}

void raise(const DriverCore& core, int result, const char* api, std::string objects, std::string hint,
           std::uintptr_t context) {
  logf(log::Level::debug, "{} failed with {} ({}) [{}]", api, result_name(result), result, objects);
  if (is_sticky_error(result)) {
    poison(core, result, api, context);
    if (hint.empty()) {
      hint =
          "this error was caused by earlier asynchronous work (a kernel or copy already queued), not by this "
          "call; the context is now unusable; run with DRVSHIM_SYNC_EACH_OP=1 to name the operation";
    }
    throw CudaError(ErrorDetails{api, result, std::move(objects), std::move(hint), true});
  }
  if (result == CUDA_ERROR_STUB_LIBRARY) throw StubLibraryError(api, core.loaded_path);
  if (result == CUDA_ERROR_NOT_INITIALIZED) {
    throw MissingStepError(api, "Driver::init()",
                           objects.empty() ? "the driver reports CUDA_ERROR_NOT_INITIALIZED"
                                           : objects + "; the driver reports CUDA_ERROR_NOT_INITIALIZED");
  }
  if (result == CUDA_ERROR_DEINITIALIZED) core.deinitialized.store(true);
  if (result == CUDA_ERROR_DEINITIALIZED && hint.empty()) {
    hint = "the driver is shutting down (process exit); drvshim objects destroyed from now on make no driver call";
  }
  if (result == CUDA_ERROR_NO_DEVICE && hint.empty()) {
    hint = "no CUDA device is visible to this process: check nvidia-smi and CUDA_VISIBLE_DEVICES";
  }
  throw CudaError(ErrorDetails{api, result, std::move(objects), std::move(hint), false});
}

// ---- the loaded driver ---------------------------------------------------------

DriverCore::~DriverCore() {
  // dlclose only a driver that was never initialised: an initialised libcuda
  // has started threads and registered exit handlers that must outlive us.
  if (handle != nullptr && !initialized.load() && !forked() && !process_exiting()) dlclose(handle);
}

void DriverCore::ensure_usable(const char* api) const {
  if (forked()) throw UsedAfterForkError(api);
  if (in_host_function()) [[unlikely]] {
    throw NotPermittedError(
        api, "called inside a host function, where CUDA forbids every driver call; the driver was not called",
        "do the work after the stream has passed the host function (synchronize, or an event), "
        "or from another thread the host function signals");
  }
}

void DriverCore::require_init(const char* api) const {
  ensure_usable(api);
  if (!initialized.load(std::memory_order_acquire)) [[unlikely]] {
    // A BackgroundInit running cuInit for this driver: wait for it (its error is thrown).
    wait_for_background_init(*this, api, StepNeed::use);
    if (!initialized.load(std::memory_order_acquire)) throw MissingStepError(api, "Driver::init()");
  }
}

void DriverCore::require_function(Api id, const char* feature) const {
  if (has(id)) return;
  const auto& info = kApiInfo[index(id)];
  throw DriverTooOldError(feature, version, {fmt::format("{} (ABI {})", info.name, info.version)},
                          "the driver does not provide this function");
}

namespace {

std::string version_text(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

template <class Fn>
Fn symbol(void* handle, const char* name) {
  void* p = dlsym(handle, name);
  Fn fn = nullptr;
  static_assert(sizeof(fn) == sizeof(p));
  std::memcpy(&fn, &p, sizeof(fn));
  return fn;
}

void resolve_table(DriverCore& core, PFN_cuGetProcAddress_v12000 v2, PFN_cuGetProcAddress_v11030 v1) {
  std::vector<std::string> required_missing;
  for (std::size_t i = 0; i < kApiCount; ++i) {
    const ApiInfo& info = kApiInfo[i];
    std::string reason;
    void* p = nullptr;
    if (info.version > core.version) {
      // Asking a driver for a version newer than itself is CUDA_ERROR_INVALID_VALUE.
      reason = fmt::format("needs driver >= {} (this is {})", version_text(info.version), version_text(core.version));
    } else {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      const CUresult r = v2 != nullptr ? v2(info.name, &p, info.version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status)
                                       : v1(info.name, &p, info.version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
      if (r == CUDA_ERROR_STUB_LIBRARY) throw StubLibraryError(core.resolver, core.loaded_path);
      if (r != CUDA_SUCCESS) {
        reason = fmt::format("{} returned {} ({})", core.resolver, result_name(r), static_cast<int>(r));
        p = nullptr;
      } else if (status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) {
        reason = "symbol not found";
        p = nullptr;
      } else if (status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) {
        reason = fmt::format("version {} not sufficient for this symbol", info.version);
        p = nullptr;
      } else if (status != CU_GET_PROC_ADDRESS_SUCCESS) {
        reason = fmt::format("unexpected query status {}", static_cast<int>(status));
        p = nullptr;
      } else if (p == nullptr) {
        reason = "resolver reported success but returned a null pointer";
      }
    }
    if (p != nullptr) {
      std::memcpy(&core.slots[i], &p, sizeof(p));
      ++core.resolved;
      continue;
    }
    core.missing.push_back(MissingFunction{info.name, info.version, info.required, reason});
    if (info.required) required_missing.push_back(fmt::format("{} (ABI {}: {})", info.name, info.version, reason));
    logf(info.required ? log::Level::error : log::Level::info, "driver function {} (ABI {}) unavailable: {}", info.name,
         info.version, reason);
  }
  if (!required_missing.empty()) {
    throw DriverTooOldError("Driver::load", core.version, std::move(required_missing),
                            "required driver functions are missing");
  }
}

std::vector<std::string> default_paths() {
  // The soname first (the dynamic linker's search), then where container
  // runtimes and WSL put the driver when it is not on the linker's path.
  return {"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"};
}

}  // namespace
}  // namespace detail

Driver::Driver(std::shared_ptr<detail::DriverCore> core) noexcept : core_(std::move(core)) {}

Driver Driver::load(const LoadOptions& options) {
  using namespace detail;
  env::warn_about_unknown_once();
  trace_init_from_env();
  install_fork_handler();
  refresh_slow_path();

  std::vector<std::string> candidates;
  if (!options.path.empty()) {
    candidates.push_back(options.path);
  } else if (auto env = options.use_environment ? env::raw("DRVSHIM_LIBCUDA") : std::nullopt) {
    candidates.push_back(std::move(*env));
  } else {
    candidates = default_paths();
  }

  auto core = std::make_shared<DriverCore>();
  core->fork_generation = current_fork_generation();
  std::vector<std::string> errors;
  auto opened = dlopen_first(candidates, errors);
  core->handle = opened.handle;
  core->requested_path = std::move(opened.path);
  if (core->handle == nullptr) {
    trace::mark("load-failed", fmt::format("tried {} path(s)", candidates.size()));
    throw DriverNotFoundError(candidates, errors);
  }
  core->loaded_path = loaded_file(core->handle, core->requested_path);
  if (env::flag("DRVSHIM_SYNC_EACH_OP", false)) {
    core->sync_each_op = true;
    logf(log::Level::warn, "DRVSHIM_SYNC_EACH_OP=1: every submitted operation is followed by a synchronisation");
  }
  trace::mark("load", fmt::format("dlopen(\"{}\") -> {}", core->requested_path, core->loaded_path));
  logf(log::Level::info, "loaded {} from {}", core->requested_path, core->loaded_path);

  auto get_version = symbol<PFN_cuDriverGetVersion_v2020>(core->handle, "cuDriverGetVersion");
  if (get_version == nullptr) {
    // Some other library (a typo in DRVSHIM_LIBCUDA): no driver was found, none is too old.
    trace::mark("load-failed", "not a CUDA driver");
    throw DriverNotFoundError(
        {core->requested_path},
        {fmt::format("loaded {}, which does not export cuDriverGetVersion: it is not a CUDA driver",
                     core->loaded_path)});
  }
  {
    // Before cuInit, by design: the version is readable even when init would fail.
    const std::int64_t t0 = trace_now_ns();
    const CUresult r = get_version(&core->version);
    trace_record_call("cuDriverGetVersion", t0, trace_now_ns() - t0, "", static_cast<int>(r), 0);
    if (r == CUDA_ERROR_STUB_LIBRARY) throw StubLibraryError("cuDriverGetVersion", core->loaded_path);
    if (r != CUDA_SUCCESS) raise(*core, static_cast<int>(r), "cuDriverGetVersion", core->loaded_path);
  }

  auto v2 = symbol<PFN_cuGetProcAddress_v12000>(core->handle, "cuGetProcAddress_v2");
  auto v1 = v2 == nullptr ? symbol<PFN_cuGetProcAddress_v11030>(core->handle, "cuGetProcAddress") : nullptr;
  if (v2 == nullptr && v1 == nullptr) {
    throw DriverTooOldError("Driver::load", core->version, {"cuGetProcAddress"},
                            "drvshim resolves every function through cuGetProcAddress (CUDA 11.3 and later)");
  }
  core->resolver = v2 != nullptr ? "cuGetProcAddress_v2" : "cuGetProcAddress";
  core->get_proc_v2 = reinterpret_cast<AnyFn>(v2);
  core->get_proc_v1 = reinterpret_cast<AnyFn>(v1);
  resolve_table(*core, v2, v1);
  trace::mark("resolve-table",
              fmt::format("{}: {}/{} resolved, driver {}", core->resolver, core->resolved, kApiCount, core->version));
  return Driver(std::move(core));
}

const std::string& Driver::requested_path() const noexcept { return core_->requested_path; }
const std::string& Driver::loaded_path() const noexcept { return core_->loaded_path; }
int Driver::version() const noexcept { return core_->version; }
int Driver::header_version() noexcept { return CUDA_VERSION; }
const std::string& Driver::resolver() const noexcept { return core_->resolver; }
std::size_t Driver::functions_total() const noexcept { return detail::kApiCount; }
std::size_t Driver::functions_resolved() const noexcept { return core_->resolved; }
const std::vector<MissingFunction>& Driver::missing_functions() const noexcept { return core_->missing; }

bool Driver::has_function(std::string_view base_name) const noexcept {
  for (std::size_t i = 0; i < detail::kApiCount; ++i) {
    if (base_name == detail::kApiInfo[i].name && core_->slots[i] != nullptr) return true;
  }
  return false;
}

namespace {
// Set by the first successful cuInit in this process, and inherited by a
// forked child: there, cuInit answers CUDA_ERROR_NOT_INITIALIZED for good.
std::atomic<bool> g_cuda_initialised{false};

// cuInit itself answered CUDA_ERROR_NOT_INITIALIZED: what the driver says in a
// child forked from a process that had initialised CUDA. The code is kept;
// the message says what happened instead of "call init first".
[[noreturn]] void throw_init_after_fork() {
  const bool parent_initialised = g_cuda_initialised.load() && detail::current_fork_generation() != 0;
  throw CudaError(ErrorDetails{
      "cuInit", CUDA_ERROR_NOT_INITIALIZED,
      parent_initialised ? fmt::format("process {} was forked from a process that had initialised CUDA", ::getpid())
                         : std::string("if this process was forked from one that had initialised CUDA (drvshim, the "
                                       "CUDA Runtime or a library), this is why"),
      "CUDA cannot be initialised again in a child forked after CUDA was initialised in the parent: start the child "
      "with exec (posix_spawn, subprocess, multiprocessing's 'spawn' or 'forkserver' method), or fork before "
      "anything initialises CUDA",
      false});
}
}  // namespace

void Driver::init() {
  using namespace detail;
  core_->ensure_usable("Driver::init");
  if (core_->initialized.load(std::memory_order_acquire)) return;
  // A BackgroundInit running cuInit for this driver: wait for it (its error is thrown once).
  wait_for_background_init(*core_, "Driver::init", StepNeed::redo);
  std::lock_guard<std::mutex> lock(core_->init_mutex);
  if (core_->initialized.load(std::memory_order_acquire)) return;
  const std::int64_t t0 = trace_now_ns();
  const CUresult r = DRVSHIM_CU(*core_, cuInit, 0u);
  const std::int64_t elapsed = trace_now_ns() - t0;
  if (r != CUDA_SUCCESS) {
    trace::mark("init-failed", result_name(static_cast<int>(r)));
    if (r == CUDA_ERROR_NOT_INITIALIZED) throw_init_after_fork();
    raise(*core_, static_cast<int>(r), "cuInit", "flags 0");
  }
  g_cuda_initialised.store(true);
  core_->init_ns.store(elapsed);
  core_->initialized.store(true, std::memory_order_release);
  install_exit_handler();
  trace::mark("init", fmt::format("cuInit(0) took {:.3f} ms", static_cast<double>(elapsed) / 1e6));
  logf(log::Level::info, "driver initialised (cuInit took {:.3f} ms)", static_cast<double>(elapsed) / 1e6);
}

bool Driver::initialized() const noexcept { return core_->initialized.load(std::memory_order_acquire); }
std::int64_t Driver::init_duration_ns() const noexcept { return core_->init_ns.load(); }

int Driver::device_count() const {
  core_->require_init("Driver::device_count");
  if (const int cached = core_->device_count.load(std::memory_order_relaxed); cached >= 0) return cached;
  int count = 0;
  DRVSHIM_TRY(*core_, cuDeviceGetCount, std::string(), &count);
  core_->device_count.store(count, std::memory_order_relaxed);
  return count;
}

std::uintptr_t Driver::current_context() const {
  core_->require_init("Driver::current_context");
  CUcontext ctx = nullptr;
  DRVSHIM_TRY(*core_, cuCtxGetCurrent, std::string(), &ctx);
  return reinterpret_cast<std::uintptr_t>(ctx);
}

const char* to_string(EntryPointStatus status) noexcept {
  switch (status) {
    case EntryPointStatus::found: return "found";
    case EntryPointStatus::not_found: return "not found";
    case EntryPointStatus::version_not_sufficient: return "version not sufficient";
  }
  return "unknown";
}

EntryPoint Driver::entry_point(std::string_view name, int cuda_version, std::uint64_t flags) const {
  if (name.empty()) throw InvalidArgumentError("Driver::entry_point", "an empty symbol name");
  if (flags > CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
    throw InvalidArgumentError("Driver::entry_point", fmt::format("flags 0x{:x}", flags),
                               "0 (default), 1 (legacy default stream) or 2 (per-thread default stream)");
  }
  const std::string symbol_name(name);
  void* p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  const std::int64_t t0 = detail::trace_now_ns();
  CUresult r = CUDA_SUCCESS;
  if (core_->get_proc_v2 != nullptr) {
    r = reinterpret_cast<PFN_cuGetProcAddress_v12000>(core_->get_proc_v2)(symbol_name.c_str(), &p, cuda_version, flags,
                                                                          &status);
  } else {
    r = reinterpret_cast<PFN_cuGetProcAddress_v11030>(core_->get_proc_v1)(symbol_name.c_str(), &p, cuda_version, flags);
    if (r == CUDA_ERROR_NOT_FOUND) {  // the 11.3 form's answer for an unknown symbol
      r = CUDA_SUCCESS;
      status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
  }
  const std::string args = fmt::format("\"{}\", version {}, flags {}", symbol_name, cuda_version, flags);
  detail::trace_record_call(core_->resolver.c_str(), t0, detail::trace_now_ns() - t0, args, static_cast<int>(r), 0);
  core_->note_result(r);
  if (r != CUDA_SUCCESS) detail::raise(*core_, static_cast<int>(r), core_->resolver.c_str(), args);
  EntryPoint out;
  switch (status) {
    case CU_GET_PROC_ADDRESS_SUCCESS: out.status = EntryPointStatus::found; break;
    case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: out.status = EntryPointStatus::version_not_sufficient; break;
    default: out.status = EntryPointStatus::not_found; break;
  }
  out.function = out.status == EntryPointStatus::found ? p : nullptr;
  return out;
}

}  // namespace drvshim
