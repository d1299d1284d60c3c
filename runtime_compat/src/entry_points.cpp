// SPDX-License-Identifier: Apache-2.0
// The driver's own functions by name (cudaGetDriverEntryPoint and
// cudaGetDriverEntryPointByVersion): libraries that call the driver directly
// (PyTorch, CCCL, CUTLASS) ask the runtime for them. The pointers are
// libcuda's, as drvshim loaded it; what a program does through them bypasses
// drvshim.
#include "runtime.hpp"

using namespace drvshim;
using namespace drvshim::rt::impl;

namespace {

cudaError_t entry_point(const char* api, const char* symbol, void** function, unsigned version,
                        unsigned long long flags, cudaDriverEntryPointQueryResult* status, DefaultStream caller) {
  if (const cudaError_t e = enter(api, Prologue::driver); e != cudaSuccess) return e;
  if (symbol == nullptr) return null_argument(api, "symbol");
  if (function == nullptr) return null_argument(api, "funcPtr");
  if (flags > cudaEnablePerThreadDefaultStream) {
    return fail(cudaErrorInvalidValue, fmt::format("{}: flags 0x{:x}: cudaEnableDefault (0), cudaEnableLegacyStream "
                                                   "(1) or cudaEnablePerThreadDefaultStream (2)",
                                                   api, flags));
  }
  // The default: the stream semantics the caller was built with (a program
  // built with --default-stream per-thread calls the _ptsz entry point).
  if (flags == cudaEnableDefault) {
    flags = caller == DefaultStream::per_thread ? cudaEnablePerThreadDefaultStream : cudaEnableLegacyStream;
  }
  return guarded(api, [&] {
    const EntryPoint found = driver(api).entry_point(symbol, static_cast<int>(version), flags);
    *function = found.function;
    if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(found.status);
    return cudaSuccess;
  });
}

}  // namespace

// The deprecated form asks at the runtime's own version.
DRVSHIM_CUDART cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** function, unsigned long long flags,
                                                   cudaDriverEntryPointQueryResult* status) {
  if (const cudaError_t failed = initialise("cudaGetDriverEntryPoint")) return failed;
  return entry_point("cudaGetDriverEntryPoint", symbol, function, CUDART_VERSION, flags, status, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** function, unsigned long long flags,
                                                        cudaDriverEntryPointQueryResult* status) {
  if (const cudaError_t failed = initialise("cudaGetDriverEntryPoint_ptsz")) return failed;
  return entry_point("cudaGetDriverEntryPoint", symbol, function, CUDART_VERSION, flags, status,
                     DefaultStream::per_thread);
}
DRVSHIM_CUDART cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned version,
                                                            unsigned long long flags,
                                                            cudaDriverEntryPointQueryResult* status) {
  if (const cudaError_t failed = initialise("cudaGetDriverEntryPointByVersion")) return failed;
  return entry_point("cudaGetDriverEntryPointByVersion", symbol, function, version, flags, status,
                     DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** function, unsigned version,
                                                                 unsigned long long flags,
                                                                 cudaDriverEntryPointQueryResult* status) {
  if (const cudaError_t failed = initialise("cudaGetDriverEntryPointByVersion_ptsz")) return failed;
  return entry_point("cudaGetDriverEntryPointByVersion", symbol, function, version, flags, status,
                     DefaultStream::per_thread);
}
