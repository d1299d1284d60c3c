// SPDX-License-Identifier: Apache-2.0
#pragma once
// What nvcc's generated code registers (fatbins, kernels, variables) and how
// the rest of the runtime reaches it: a kernel handle for a host stub, bound
// to a context on demand; a variable's address in a context.
#include "runtime.hpp"

namespace drvshim::rt::impl {

struct Fatbin;

// The handle __cudaGetKernel gives nvcc's launch stub, which keeps it in a
// function-local static for the life of the process: it is made without
// loading anything, never freed, and survives cudaDeviceReset, shutdown()
// and a failed load (the load is retried, and its cause reported, at each
// launch that needs it).
struct KernelHandle {
  Fatbin* fatbin = nullptr;
  std::string name;
  const void* host_stub = nullptr;
};

// The kernel a cudart function argument names: a host stub (what `kernel`
// means in host code) or a cudaKernel_t from cudaGetKernel. Null when neither.
KernelHandle* kernel_for(const void* func) noexcept;
// The kernel bound to the calling thread's current context `ctx` of
// `device`: loads the fatbin (context-independently) and binds the kernel
// on first use in each context, applying the attributes set with
// cudaFuncSetAttribute. Throws what loading or binding threw.
Kernel bound_kernel(KernelHandle& kernel, const ContextRef& ctx, int device, const char* trigger);
// Records a settable attribute (cudaFuncSetAttribute) for every context the
// kernel is or will be bound to; applies it in `ctx` now.
void set_kernel_attribute(KernelHandle& kernel, const ContextRef& ctx, int device, FunctionAttribute attribute,
                          int value, const char* trigger);
// Records a cache preference (cudaFuncSetCacheConfig) the same way.
void set_kernel_cache_preference(KernelHandle& kernel, const ContextRef& ctx, int device, CachePreference preference,
                                 const char* trigger);

// A __device__ / __constant__ / __managed__ variable, by its host shadow.
struct Variable {
  Fatbin* fatbin = nullptr;
  std::string name;
  std::size_t bytes = 0;
  bool constant = false;
  void** managed = nullptr;  // __managed__: where the host's pointer to it lives
};
// The variable a symbol argument names (the address of the host shadow), or null.
const Variable* variable_for(const void* symbol) noexcept;
// Its address and size in the current context `ctx` (loading its fatbin).
std::pair<DevicePtr, std::size_t> variable_address(const Variable& v, const ContextRef& ctx, const char* trigger);

}  // namespace drvshim::rt::impl
