#include <drvshim/context.hpp>

#include <utility>

#include "context_scope.hpp"
#include "core.hpp"
#include "log_internal.hpp"
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
  const auto& core = *device_.core();
  core.require_init("ContextRef::is_current");
  CUcontext current = nullptr;
  DRVSHIM_TRY(core, cuCtxGetCurrent, ctx_objects(*this), &current);
  return current == native(address_);
}

void ContextRef::make_current() const {
  const auto& core = *device_.core();
  core.require_init("ContextRef::make_current");
  core.check_not_poisoned(address_, "ContextRef::make_current");
  DRVSHIM_TRY(core, cuCtxSetCurrent, ctx_objects(*this), native(address_));
}

void ContextRef::synchronize() const {
  const auto& core = *device_.core();
  detail::ContextScope scope(core, address_, "ContextRef::synchronize");
  DRVSHIM_TRY(core, cuCtxSynchronize, ctx_objects(*this));
}

MemoryInfo ContextRef::memory_info() const {
  const auto& core = *device_.core();
  detail::ContextScope scope(core, address_, "ContextRef::memory_info");
  MemoryInfo info;
  DRVSHIM_TRY(core, cuMemGetInfo, ctx_objects(*this), &info.free, &info.total);
  return info;
}

unsigned ContextRef::api_version() const {
  const auto& core = *device_.core();
  core.require_init("ContextRef::api_version");
  unsigned version = 0;
  DRVSHIM_TRY(core, cuCtxGetApiVersion, ctx_objects(*this), native(address_), &version);
  return version;
}

ContextFlags ContextRef::flags() const {
  const auto& core = *device_.core();
  detail::ContextScope scope(core, address_, "ContextRef::flags");
  unsigned flags = 0;
  DRVSHIM_TRY(core, cuCtxGetFlags, ctx_objects(*this), &flags);
  return static_cast<ContextFlags>(flags);
}

// ---- ScopedCurrentContext ---------------------------------------------------------

ScopedCurrentContext::ScopedCurrentContext(const ContextRef& context)
    : core_(context.device().core()), pushed_(context.address()) {
  core_->require_init("ScopedCurrentContext");
  DRVSHIM_TRY(*core_, cuCtxPushCurrent, ctx_objects(context), native(pushed_));
}

ScopedCurrentContext::~ScopedCurrentContext() {
  if (!core_->cleanup_allowed()) return;
  CUcontext popped = nullptr;
  const CUresult r = DRVSHIM_CU(*core_, cuCtxPopCurrent, &popped);
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
    : device_(std::move(device)), address_(address), adopted_(adopted) {}

PrimaryContext::PrimaryContext(PrimaryContext&& other) noexcept
    : device_(other.device_), address_(std::exchange(other.address_, 0)), adopted_(other.adopted_) {}

PrimaryContext& PrimaryContext::operator=(PrimaryContext&& other) noexcept {
  if (this != &other) {
    (void)release(std::nothrow);
    device_ = other.device_;
    address_ = std::exchange(other.address_, 0);
    adopted_ = other.adopted_;
  }
  return *this;
}

PrimaryContext::~PrimaryContext() { (void)release(std::nothrow); }

ContextRef PrimaryContext::ref() const {
  if (address_ == 0) {
    throw InvalidArgumentError("PrimaryContext::ref", "this PrimaryContext is empty (moved from or released)",
                               "retain the primary context again with Device::retain_primary_context()");
  }
  return ContextRef(device_, address_, true);
}

void PrimaryContext::release() {
  const Status s = release(std::nothrow);
  if (!s.ok()) {
    detail::raise(*device_.core(), s.code(), s.api(), fmt::format("primary context of device {}", device_.ordinal()));
  }
}

Status PrimaryContext::release(std::nothrow_t) noexcept {
  if (address_ == 0) return {};
  const auto address = std::exchange(address_, 0);
  const auto& core = *device_.core();
  if (!core.cleanup_allowed()) {
    // Exit, fork or a deinitialised driver: the retain dies with the process.
    detail::logf(log::Level::debug, "device {}: primary context 0x{:x} not released (process exiting, forked or driver deinitialised)",
                device_.ordinal(), address);
    return {};
  }
  const CUresult r = DRVSHIM_CU(core, cuDevicePrimaryCtxRelease, device_.native());
  core.note_result(r);
  if (r == CUDA_SUCCESS) {
    std::uint64_t left = 0;
    {
      std::lock_guard<std::mutex> lock(core.ledger_mutex);
      auto& ledger = device_.core()->ledgers[device_.ordinal()];
      ++ledger.releases;
      left = ledger.retains - ledger.releases;
    }
    // With several devices the trace shows each primary context's whole life:
    // activate (or adopt) at the first retain, this at every release.
    trace::mark("release-primary-context",
                fmt::format("device {}, context 0x{:x}, drvshim's retains left {}", device_.ordinal(), address, left));
  } else {
    detail::logf(log::Level::warn, "device {}: cuDevicePrimaryCtxRelease failed with {} ({})", device_.ordinal(),
                result_name(static_cast<int>(r)), static_cast<int>(r));
  }
  return Status("cuDevicePrimaryCtxRelease", static_cast<int>(r));
}

// ---- Context ----------------------------------------------------------------------

Context::Context(Device device, std::uintptr_t address) noexcept : device_(std::move(device)), address_(address) {}

Context::Context(Context&& other) noexcept : device_(other.device_), address_(std::exchange(other.address_, 0)) {}

Context& Context::operator=(Context&& other) noexcept {
  if (this != &other) {
    (void)destroy(std::nothrow);
    device_ = other.device_;
    address_ = std::exchange(other.address_, 0);
  }
  return *this;
}

Context::~Context() { (void)destroy(std::nothrow); }

ContextRef Context::ref() const {
  if (address_ == 0) {
    throw InvalidArgumentError("Context::ref", "this Context is empty (moved from or destroyed)",
                               "create a new one with Device::create_context()");
  }
  return ContextRef(device_, address_, false);
}

void Context::destroy() {
  const auto address = address_;
  const Status s = destroy(std::nothrow);
  if (!s.ok()) {
    detail::raise(*device_.core(), s.code(), s.api(), fmt::format("context 0x{:x} on device {}", address, device_.ordinal()));
  }
}

Status Context::destroy(std::nothrow_t) noexcept {
  if (address_ == 0) return {};
  const auto address = std::exchange(address_, 0);
  const auto& core = *device_.core();
  if (!core.cleanup_allowed()) return {};
  const CUresult r = DRVSHIM_CU(core, cuCtxDestroy, native(address));
  core.note_result(r);
  if (r != CUDA_SUCCESS) {
    detail::logf(log::Level::warn, "cuCtxDestroy(0x{:x}) failed with {} ({})", address, result_name(static_cast<int>(r)),
                static_cast<int>(r));
  } else {
    trace::mark("destroy-context", fmt::format("device {}, context 0x{:x}", device_.ordinal(), address));
  }
  return Status("cuCtxDestroy", static_cast<int>(r));
}

}  // namespace drvshim
