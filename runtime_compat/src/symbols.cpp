// SPDX-License-Identifier: Apache-2.0
// Symbols: __device__, __constant__ and __managed__ variables by their host
// shadow (what `symbol` means in host code), bound to the calling thread's
// context (cuLibraryGetGlobal); copies to and from them.
#include "registration.hpp"

using namespace drvshim;
using namespace drvshim::rt::impl;

namespace {

constexpr DefaultStream kLegacy = DefaultStream::legacy;
constexpr DefaultStream kPerThread = DefaultStream::per_thread;

// The variable's device address (plus `offset`) in the current context, after
// checking that [offset, offset + bytes) lies inside it.
cudaError_t resolve(const char* api, const void* symbol, std::size_t offset, std::size_t bytes, DevicePtr* address,
                    ContextRef* ctx_out) {
  const Variable* v = variable_for(symbol);
  if (v == nullptr) {
    return fail(
        cudaErrorInvalidSymbol,
        fmt::format("{}: {} is not the address of a __device__, __constant__ or __managed__ variable", api, symbol));
  }
  const ContextRef ctx = context(api);
  std::pair<DevicePtr, std::size_t> where;
  try {
    where = variable_address(*v, ctx, api);
  } catch (const InvalidArgumentError& e) {
    // Registered on the host, absent from the loaded image.
    return fail(cudaErrorInvalidSymbol, std::string(api) + ": " + e.what());
  }
  const auto [base, size] = where;
  if (offset > size || bytes > size - offset) {
    return fail(cudaErrorInvalidValue, fmt::format("{}: {} bytes at offset {} do not fit in {} ({} bytes)", api, bytes,
                                                   offset, v->name, size));
  }
  *address = base + offset;
  *ctx_out = ctx;
  return cudaSuccess;
}

cudaError_t copy_symbol(const char* api, bool to_symbol, const void* symbol, void* other, std::size_t bytes,
                        std::size_t offset, cudaMemcpyKind kind, std::optional<cudaStream_t> stream,
                        DefaultStream zero) {
  // cudart's order: nothing to copy is success (before its prologue), the
  // symbol, the sticky error, the direction, the other pointer.
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (variable_for(symbol) == nullptr) {
    return fail(
        cudaErrorInvalidSymbol,
        fmt::format("{}: {} is not the address of a __device__, __constant__ or __managed__ variable", api, symbol));
  }
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  // To a symbol: from host or device; from a symbol: to host or device.
  const bool host_side = to_symbol ? kind == cudaMemcpyHostToDevice : kind == cudaMemcpyDeviceToHost;
  if (!host_side && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault) {
    return fail(cudaErrorInvalidMemcpyDirection, fmt::format("{}: kind {}", api, static_cast<int>(kind)));
  }
  if (other == nullptr && bytes != 0) return null_argument(api, to_symbol ? "src" : "dst");
  return guarded(api, [&] {
    DevicePtr address = 0;
    ContextRef ctx = context(api);
    if (const cudaError_t e = resolve(api, symbol, offset, bytes, &address, &ctx); e != cudaSuccess) return e;
    void* device = reinterpret_cast<void*>(address);
    void* dst = to_symbol ? device : other;
    const void* src = to_symbol ? other : device;
    const cudaMemcpyKind resolved = kind == cudaMemcpyDefault ? cudaMemcpyDefault
                                    : host_side ? (to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost)
                                                : cudaMemcpyDeviceToDevice;
    // The copy itself is cudaMemcpy's (or cudaMemcpyAsync's), so it follows the same stream rules.
    if (stream.has_value()) {
      return zero == kPerThread ? cudaMemcpyAsync_ptsz(dst, src, bytes, resolved, *stream)
                                : cudaMemcpyAsync(dst, src, bytes, resolved, *stream);
    }
    return zero == kPerThread ? cudaMemcpy_ptds(dst, src, bytes, resolved) : cudaMemcpy(dst, src, bytes, resolved);
  });
}

}  // namespace

DRVSHIM_CUDART cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t bytes, size_t offset,
                                              cudaMemcpyKind kind) {
  if (const cudaError_t failed = initialise("cudaMemcpyToSymbol")) return failed;
  return copy_symbol("cudaMemcpyToSymbol", true, symbol, const_cast<void*>(src), bytes, offset, kind, std::nullopt,
                     kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t bytes, size_t offset,
                                                   cudaMemcpyKind kind) {
  if (const cudaError_t failed = initialise("cudaMemcpyToSymbol_ptds")) return failed;
  return copy_symbol("cudaMemcpyToSymbol", true, symbol, const_cast<void*>(src), bytes, offset, kind, std::nullopt,
                     kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t bytes, size_t offset,
                                                cudaMemcpyKind kind) {
  if (const cudaError_t failed = initialise("cudaMemcpyFromSymbol")) return failed;
  return copy_symbol("cudaMemcpyFromSymbol", false, symbol, dst, bytes, offset, kind, std::nullopt, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t bytes, size_t offset,
                                                     cudaMemcpyKind kind) {
  if (const cudaError_t failed = initialise("cudaMemcpyFromSymbol_ptds")) return failed;
  return copy_symbol("cudaMemcpyFromSymbol", false, symbol, dst, bytes, offset, kind, std::nullopt, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t bytes, size_t offset,
                                                   cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemcpyToSymbolAsync")) return failed;
  return copy_symbol("cudaMemcpyToSymbolAsync", true, symbol, const_cast<void*>(src), bytes, offset, kind, stream,
                     kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t bytes,
                                                        size_t offset, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemcpyToSymbolAsync_ptsz")) return failed;
  return copy_symbol("cudaMemcpyToSymbolAsync", true, symbol, const_cast<void*>(src), bytes, offset, kind, stream,
                     kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t bytes, size_t offset,
                                                     cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemcpyFromSymbolAsync")) return failed;
  return copy_symbol("cudaMemcpyFromSymbolAsync", false, symbol, dst, bytes, offset, kind, stream, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t bytes, size_t offset,
                                                          cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemcpyFromSymbolAsync_ptsz")) return failed;
  return copy_symbol("cudaMemcpyFromSymbolAsync", false, symbol, dst, bytes, offset, kind, stream, kPerThread);
}

DRVSHIM_CUDART cudaError_t cudaGetSymbolAddress(void** address, const void* symbol) {
  if (const cudaError_t failed = initialise("cudaGetSymbolAddress")) return failed;
  if (const cudaError_t e = enter("cudaGetSymbolAddress", Prologue::context); e != cudaSuccess) return e;
  if (variable_for(symbol) == nullptr) {
    return fail(cudaErrorInvalidSymbol,
                fmt::format("cudaGetSymbolAddress: {} is not the address of a variable", symbol));
  }
  if (const cudaError_t e = enter("cudaGetSymbolAddress", Prologue::sticky); e != cudaSuccess) return e;
  if (address == nullptr) return null_argument("cudaGetSymbolAddress", "devPtr");
  return guarded("cudaGetSymbolAddress", [&] {
    DevicePtr a = 0;
    ContextRef ctx = context("cudaGetSymbolAddress");
    if (const cudaError_t e = resolve("cudaGetSymbolAddress", symbol, 0, 0, &a, &ctx); e != cudaSuccess) return e;
    *address = reinterpret_cast<void*>(a);
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  if (const cudaError_t failed = initialise("cudaGetSymbolSize")) return failed;
  if (const cudaError_t e = enter("cudaGetSymbolSize", Prologue::context); e != cudaSuccess) return e;
  const Variable* v = variable_for(symbol);
  if (v == nullptr) {
    return fail(cudaErrorInvalidSymbol, fmt::format("cudaGetSymbolSize: {} is not the address of a variable", symbol));
  }
  if (const cudaError_t e = enter("cudaGetSymbolSize", Prologue::sticky); e != cudaSuccess) return e;
  if (size == nullptr) return null_argument("cudaGetSymbolSize", "size");
  return guarded("cudaGetSymbolSize", [&] {
    *size = variable_address(*v, context("cudaGetSymbolSize"), "cudaGetSymbolSize").second;
    return cudaSuccess;
  });
}
