// SPDX-License-Identifier: Apache-2.0
#pragma once
// The context policy in one place (docs/DESIGN.md, "context policy").
#include <drvshim/error.hpp>

#include <cstdint>

#include "log_internal.hpp"
#include "seam/core.hpp"

namespace drvshim::detail {

inline CUcontext native_context(std::uintptr_t address) noexcept { return reinterpret_cast<CUcontext>(address); }

// The context policy in one place: make `ctx` current for one drvshim call
// (push only when it is not current already) and restore the stack after.
// A failed get, push or pop is tried once more before it counts: a cleanup
// path (a destructor, a no-throw release) would otherwise leak what it was
// releasing, or leave the caller's stack changed, on one transient failure.
// A second failure is an error (or, for the pop, logged).
class ContextScope {
 public:
  ContextScope(const DriverCore& core, std::uintptr_t ctx, const char* api)
      : core_(core), ctx_(ctx), outer_(t_scoped_context) {
    core.require_init(api);
    core.check_not_poisoned(ctx, api);
    CUcontext current = nullptr;
    if (DRVSHIM_CU(core, cuCtxGetCurrent, &current) != CUDA_SUCCESS) {
      DRVSHIM_TRY(core, cuCtxGetCurrent, std::string(api), &current);
    }
    if (current != native_context(ctx)) {
      if (DRVSHIM_CU(core, cuCtxPushCurrent, native_context(ctx)) != CUDA_SUCCESS) {
        DRVSHIM_TRY(core, cuCtxPushCurrent, fmt::format("{}: context 0x{:x}", api, ctx), native_context(ctx));
      }
      pushed_ = true;
    }
    t_scoped_context = ctx;
  }
  ~ContextScope() {
    t_scoped_context = outer_;
    if (!pushed_) return;
    CUcontext popped = nullptr;
    CUresult r = DRVSHIM_CU(core_, cuCtxPopCurrent, &popped);
    if (r != CUDA_SUCCESS) r = DRVSHIM_CU(core_, cuCtxPopCurrent, &popped);
    if (r != CUDA_SUCCESS || popped != native_context(ctx_)) {
      logf(log::Level::error,
           "restoring the context stack failed: cuCtxPopCurrent gave {} and context {}, expected 0x{:x}",
           result_name(static_cast<int>(r)), static_cast<const void*>(popped), ctx_);
    }
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const DriverCore& core_;
  std::uintptr_t ctx_;
  std::uintptr_t outer_;  // the enclosing scope's context (restored on exit)
  bool pushed_ = false;
};

}  // namespace drvshim::detail
