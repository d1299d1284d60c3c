// SPDX-License-Identifier: Apache-2.0
#include <drvshim/context.hpp>

#include <mutex>
#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "seam/access.hpp"
#include "seam/core.hpp"
#include "support/test_hooks.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace {

CUcontext native(std::uintptr_t address) noexcept { return reinterpret_cast<CUcontext>(address); }

std::string ctx_objects(const ContextRef& c) {
  return fmt::format("{}context 0x{:x} on device {}", c.is_primary() ? "primary " : "", c.address(),
                     c.device().ordinal());
}

}  // namespace

// ---- ContextRef ----------------------------------------------------------------

bool ContextRef::is_current() const {
  const auto& core = *detail::Access::core(device_);
  core.require_init("ContextRef::is_current");
  CUcontext current = nullptr;
  DRVSHIM_TRY(core, cuCtxGetCurrent, ctx_objects(*this), &current);
  return current == native(address_);
}

std::uint64_t ContextRef::unique_id() const {
  const auto& core = *detail::Access::core(device_);
  core.require_function(detail::Api::k_cuCtxGetId, "ContextRef::unique_id");
  unsigned long long id = 0;
  DRVSHIM_TRY(core, cuCtxGetId, ctx_objects(*this), native(address_), &id);
  return id;
}

void ContextRef::make_current() const { make_current(IfPoisoned::refuse); }

void ContextRef::make_current(IfPoisoned if_poisoned) const {
  const auto& core = *detail::Access::core(device_);
  core.require_init("ContextRef::make_current");
  if (if_poisoned == IfPoisoned::refuse) core.check_not_poisoned(address_, "ContextRef::make_current");
  DRVSHIM_TRY(core, cuCtxSetCurrent, ctx_objects(*this), native(address_));
}

void ContextRef::synchronize() const {
  const auto& core = *detail::Access::core(device_);
  detail::ContextScope scope(core, address_, "ContextRef::synchronize");
  DRVSHIM_TRY(core, cuCtxSynchronize, ctx_objects(*this));
  core.bury_spent_callbacks();  // closures of host callbacks that ran (outside any host function)
}

MemoryInfo ContextRef::memory_info() const {
  const auto& core = *detail::Access::core(device_);
  detail::ContextScope scope(core, address_, "ContextRef::memory_info");
  MemoryInfo info;
  DRVSHIM_TRY(core, cuMemGetInfo, ctx_objects(*this), &info.free, &info.total);
  return info;
}

unsigned ContextRef::api_version() const {
  const auto& core = *detail::Access::core(device_);
  core.require_init("ContextRef::api_version");
  unsigned version = 0;
  DRVSHIM_TRY(core, cuCtxGetApiVersion, ctx_objects(*this), native(address_), &version);
  return version;
}

int ContextRef::sticky_error() const noexcept {
  const auto& core = *detail::Access::core(device_);
  if (!core.any_poisoned.load(std::memory_order_relaxed)) return 0;
  std::lock_guard<std::mutex> lock(core.poison_mutex);
  const auto it = core.poisoned.find(address_);
  return it != core.poisoned.end() ? it->second.code : 0;
}

ContextFlags ContextRef::flags() const {
  const auto& core = *detail::Access::core(device_);
  detail::ContextScope scope(core, address_, "ContextRef::flags");
  unsigned flags = 0;
  DRVSHIM_TRY(core, cuCtxGetFlags, ctx_objects(*this), &flags);
  return static_cast<ContextFlags>(flags);
}

static_assert(static_cast<int>(Limit::persisting_l2_cache_size) == CU_LIMIT_PERSISTING_L2_CACHE_SIZE);

void ContextRef::set_limit(Limit limit, std::size_t value) const {
  const auto& core = *detail::Access::core(device_);
  core.require_function(detail::Api::k_cuCtxSetLimit, "ContextRef::set_limit");
  detail::ContextScope scope(core, address_, "ContextRef::set_limit");
  DRVSHIM_TRY(core, cuCtxSetLimit,
              fmt::format("{}, limit {}, value {}", ctx_objects(*this), static_cast<int>(limit), value),
              static_cast<CUlimit>(limit), value);
}

std::size_t ContextRef::limit(Limit limit) const {
  const auto& core = *detail::Access::core(device_);
  core.require_function(detail::Api::k_cuCtxGetLimit, "ContextRef::limit");
  detail::ContextScope scope(core, address_, "ContextRef::limit");
  std::size_t value = 0;
  DRVSHIM_TRY(core, cuCtxGetLimit, fmt::format("{}, limit {}", ctx_objects(*this), static_cast<int>(limit)), &value,
              static_cast<CUlimit>(limit));
  return value;
}

void ContextRef::reset_persisting_l2_cache() const {
  const auto& core = *detail::Access::core(device_);
  core.require_function(detail::Api::k_cuCtxResetPersistingL2Cache, "ContextRef::reset_persisting_l2_cache");
  detail::ContextScope scope(core, address_, "ContextRef::reset_persisting_l2_cache");
  DRVSHIM_TRY(core, cuCtxResetPersistingL2Cache, ctx_objects(*this));
}

void ContextRef::profiler_start() const {
  const auto& core = *detail::Access::core(device_);
  core.require_function(detail::Api::k_cuProfilerStart, "ContextRef::profiler_start");
  detail::ContextScope scope(core, address_, "ContextRef::profiler_start");
  DRVSHIM_TRY(core, cuProfilerStart, ctx_objects(*this));
}

void ContextRef::profiler_stop() const {
  const auto& core = *detail::Access::core(device_);
  core.require_function(detail::Api::k_cuProfilerStop, "ContextRef::profiler_stop");
  detail::ContextScope scope(core, address_, "ContextRef::profiler_stop");
  DRVSHIM_TRY(core, cuProfilerStop, ctx_objects(*this));
}

// ---- ScopedCurrentContext ---------------------------------------------------------

ScopedCurrentContext::ScopedCurrentContext(const ContextRef& context)
    : core_(detail::Access::core(context.device())), pushed_(context.address()) {
  core_->require_init("ScopedCurrentContext");
  // The same refusal as make_current(): code inside the scope would otherwise
  // run driver calls in a context whose every call fails.
  core_->check_not_poisoned(pushed_, "ScopedCurrentContext");
  DRVSHIM_TRY(*core_, cuCtxPushCurrent, ctx_objects(context), native(pushed_));
}

ScopedCurrentContext::~ScopedCurrentContext() {
  if (!core_->cleanup_allowed()) return;
  CUcontext popped = nullptr;
  CUresult r = DRVSHIM_CU(*core_, cuCtxPopCurrent, &popped);
  if (r != CUDA_SUCCESS) r = DRVSHIM_CU(*core_, cuCtxPopCurrent, &popped);  // once more, as ContextScope does
  core_->note_result(r);
  if (r != CUDA_SUCCESS) {
    detail::logf(log::Level::error, "ScopedCurrentContext: cuCtxPopCurrent failed with {} ({})",
                 result_name(static_cast<int>(r)), static_cast<int>(r));
  } else if (popped != native(pushed_)) {
    detail::logf(log::Level::error,
                 "ScopedCurrentContext: popped context {} but had pushed 0x{:x}: someone changed the context stack "
                 "inside the scope without restoring it",
                 static_cast<const void*>(popped), pushed_);
  }
}

// ---- PrimaryContext ---------------------------------------------------------------

PrimaryContext::PrimaryContext(Device device, std::uintptr_t address, bool adopted) noexcept
    : handle_({std::move(device), address, adopted}) {}

PrimaryContext::PrimaryContext(PrimaryContext&&) noexcept = default;
PrimaryContext& PrimaryContext::operator=(PrimaryContext&&) noexcept = default;
PrimaryContext::~PrimaryContext() = default;

ContextRef PrimaryContext::ref() const& {
  const auto& v = handle_.get();
  if (v.address == 0) {
    throw InvalidArgumentError("PrimaryContext::ref", "this PrimaryContext is empty (moved from or released)",
                               "retain the primary context again with Device::retain_primary_context()");
  }
  return ContextRef(v.device, v.address, true);
}

void PrimaryContext::release() { handle_.release(); }

Status PrimaryContext::release(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void PrimaryContextTraits::release_or_throw(value_type& v) {
  detail::Access::core(v.device)->ensure_usable("PrimaryContext::release");  // the no-throw twin skips silently
  const Status s = release(v);
  if (!s.ok())
    raise(*detail::Access::core(v.device), s.code(), s.api(),
          fmt::format("primary context of device {}", v.device.ordinal()));
}

Status PrimaryContextTraits::release(value_type& v) noexcept {
  const auto address = std::exchange(v.address, 0);
  const auto& core = *detail::Access::core(v.device);
  if (!core.cleanup_allowed()) {
    // Exit, fork or a deinitialised driver: the retain dies with the process.
    logf(log::Level::debug,
         "device {}: primary context 0x{:x} not released (process exiting, forked or driver deinitialised)",
         v.device.ordinal(), address);
    return {};
  }
  const CUresult r = DRVSHIM_CU(core, cuDevicePrimaryCtxRelease, v.device.native());
  core.note_result(r);
  if (r == CUDA_SUCCESS) {
    std::uint64_t left = 0;
    {
      std::lock_guard<std::mutex> lock(core.ledger_mutex);
      auto& ledger = detail::Access::core(v.device)->ledgers[v.device.ordinal()];
      ++ledger.releases;
      left = ledger.retains - ledger.releases;
    }
    // With several devices the trace shows each primary context's whole life:
    // activate (or adopt) at the first retain, this at every release.
    try {
      test_hooks::fail_allocation_if_asked();
      trace::mark("release-primary-context", fmt::format("device {}, context 0x{:x}, drvshim's retains left {}",
                                                         v.device.ordinal(), address, left));
    } catch (...) {
      // Out of memory for the mark: the release happened; only its record is lost.
    }
    // A poisoned primary context is gone once its last retain (anyone's) is
    // released; its next activation gets a fresh context at the same address.
    if (core.any_poisoned.load() && core.is_poisoned(address)) {
      unsigned flags = 0;
      int active = 1;
      if (DRVSHIM_CU(core, cuDevicePrimaryCtxGetState, v.device.native(), &flags, &active) == CUDA_SUCCESS &&
          active == 0) {
        core.forget_poison(address);
      }
    }
  } else {
    logf(log::Level::warn, "device {}: cuDevicePrimaryCtxRelease failed with {} ({})", v.device.ordinal(),
         result_name(static_cast<int>(r)), static_cast<int>(r));
  }
  return Status("cuDevicePrimaryCtxRelease", static_cast<int>(r));
}

}  // namespace detail

// ---- Context ----------------------------------------------------------------------

Context::Context(Device device, std::uintptr_t address) noexcept : handle_({std::move(device), address}) {}

Context::Context(Context&&) noexcept = default;
Context& Context::operator=(Context&&) noexcept = default;
Context::~Context() = default;

ContextRef Context::ref() const& {
  const auto& v = handle_.get();
  if (v.address == 0) {
    throw InvalidArgumentError("Context::ref", "this Context is empty (moved from or destroyed)",
                               "create a new one with Device::create_context()");
  }
  return ContextRef(v.device, v.address, false);
}

void Context::destroy() { handle_.release(); }

Status Context::destroy(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void ContextTraits::release_or_throw(value_type& v) {
  const auto address = v.address;
  detail::Access::core(v.device)->ensure_usable("Context::destroy");  // the no-throw twin skips silently
  const Status s = release(v);
  if (!s.ok()) {
    raise(*detail::Access::core(v.device), s.code(), s.api(),
          fmt::format("context 0x{:x} on device {}", address, v.device.ordinal()));
  }
}

Status ContextTraits::release(value_type& v) noexcept {
  const auto address = std::exchange(v.address, 0);
  const auto& core = *detail::Access::core(v.device);
  if (!core.cleanup_allowed()) return {};
  const CUresult r = DRVSHIM_CU(core, cuCtxDestroy, native(address));
  core.note_result(r);
  if (r != CUDA_SUCCESS) {
    logf(log::Level::warn, "cuCtxDestroy(0x{:x}) failed with {} ({})", address, result_name(static_cast<int>(r)),
         static_cast<int>(r));
  } else {
    core.forget_poison(address);  // the driver may hand the address out again
    trace::mark("destroy-context", fmt::format("device {}, context 0x{:x}", v.device.ordinal(), address));
  }
  return Status("cuCtxDestroy", static_cast<int>(r));
}

}  // namespace detail

// ---- views of contexts drvshim did not make ----------------------------------------------

namespace {

// The Device whose driver handle is `handle` (the ordinal, on every driver seen so far).
Device device_with_handle(const Driver& driver, CUdevice handle) {
  const int count = driver.device_count();
  if (handle >= 0 && handle < count) {
    Device d = driver.device(handle);
    if (d.native() == handle) return d;
  }
  for (Device& d : driver.devices()) {
    if (d.native() == handle) return d;
  }
  throw InvalidArgumentError("current_context",
                             fmt::format("the driver names device handle {}, which no ordinal has", handle));
}

}  // namespace

std::optional<ContextRef> current_context(const Driver& driver) {
  const auto& core = *detail::Access::core(driver);
  core.require_init("current_context");
  CUcontext ctx = nullptr;
  DRVSHIM_TRY(core, cuCtxGetCurrent, std::string(), &ctx);
  if (ctx == nullptr) return std::nullopt;
  CUdevice device = 0;
  DRVSHIM_TRY(core, cuCtxGetDevice, fmt::format("current context 0x{:x}", reinterpret_cast<std::uintptr_t>(ctx)),
              &device);
  return ContextRef(device_with_handle(driver, device), reinterpret_cast<std::uintptr_t>(ctx), false);
}

ContextRef context_of_stream(const Driver& driver, std::uintptr_t stream) {
  const auto& core = *detail::Access::core(driver);
  core.require_init("context_of_stream");
  if (stream <= 0x2) {
    throw InvalidArgumentError(
        "context_of_stream",
        fmt::format("stream 0x{:x} is a default stream, which belongs to the current context", stream),
        "ask current_context() for the default streams");
  }
  core.require_function(detail::Api::k_cuStreamGetCtx, "context_of_stream");
  CUcontext ctx = nullptr;
  DRVSHIM_TRY(core, cuStreamGetCtx, fmt::format("stream 0x{:x}", stream), reinterpret_cast<CUstream>(stream), &ctx);
  CUdevice device = 0;
  {
    detail::ContextScope scope(core, reinterpret_cast<std::uintptr_t>(ctx), "context_of_stream");
    DRVSHIM_TRY(core, cuCtxGetDevice,
                fmt::format("context 0x{:x} of stream 0x{:x}", reinterpret_cast<std::uintptr_t>(ctx), stream), &device);
  }
  return ContextRef(device_with_handle(driver, device), reinterpret_cast<std::uintptr_t>(ctx), false);
}

}  // namespace drvshim
