// Peer access between devices: capability, enabling and disabling, the P2P
// attributes, peer copies. The driver layer has no peer-access wrappers yet,
// so this file (alone in runtime_compat) calls the driver seam directly
// (driver/src/core.hpp); the calls are traced and logged like any other.
#include "core.hpp"  // first: cuda.h as drvshim's seam sees it
#include "state.hpp"

using namespace drvshim;
using namespace drvshim::rt::impl;

namespace {

const detail::DriverCore& seam(const char* api) {
  const detail::DriverCore& core = *driver(api).core();
  return core;
}

// The driver's result as cudart reports it (and the thread's last error).
cudaError_t result(const char* api, CUresult r, const std::string& objects) {
  if (r == CUDA_SUCCESS) return cudaSuccess;
  return fail(from_driver(static_cast<int>(r)),
              fmt::format("{}: {} ({}) [{}]", api, result_name(static_cast<int>(r)), static_cast<int>(r), objects));
}

cudaError_t missing(const char* api, detail::Api id) {
  return fail(cudaErrorCallRequiresNewerDriver,
              fmt::format("{}: the driver lacks {}", api, detail::api_name(id)));
}

CUcontext native(const ContextRef& ctx) { return reinterpret_cast<CUcontext>(ctx.address()); }

}  // namespace

DRVSHIM_CUDART cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr) return null_argument("cudaDeviceCanAccessPeer", "canAccessPeer");
  return guarded("cudaDeviceCanAccessPeer", [&] {
    if (const cudaError_t e = check_device("cudaDeviceCanAccessPeer", device); e != cudaSuccess) return e;
    if (const cudaError_t e = check_device("cudaDeviceCanAccessPeer", peer); e != cudaSuccess) return e;
    const Driver& drv = driver("cudaDeviceCanAccessPeer");
    *can = device != peer && drv.device(device).can_access_peer(drv.device(peer)) ? 1 : 0;
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attribute, int src, int dst) {
  if (value == nullptr) return null_argument("cudaDeviceGetP2PAttribute", "value");
  return guarded("cudaDeviceGetP2PAttribute", [&] {
    if (const cudaError_t e = check_device("cudaDeviceGetP2PAttribute", src); e != cudaSuccess) return e;
    if (const cudaError_t e = check_device("cudaDeviceGetP2PAttribute", dst); e != cudaSuccess) return e;
    const auto& core = seam("cudaDeviceGetP2PAttribute");
    if (!core.has(detail::Api::k_cuDeviceGetP2PAttribute)) {
      return missing("cudaDeviceGetP2PAttribute", detail::Api::k_cuDeviceGetP2PAttribute);
    }
    const Driver& drv = driver("cudaDeviceGetP2PAttribute");
    // cudaDeviceP2PAttr numbers its attributes as CUdevice_P2PAttribute does.
    const CUresult r = DRVSHIM_CU(core, cuDeviceGetP2PAttribute, value, static_cast<CUdevice_P2PAttribute>(attribute),
                                  static_cast<CUdevice>(drv.device(src).native()),
                                  static_cast<CUdevice>(drv.device(dst).native()));
    return result("cudaDeviceGetP2PAttribute", r,
                  fmt::format("attribute {}, device {} to {}", static_cast<int>(attribute), src, dst));
  });
}

// Lets the calling thread's device's context access `peer`'s memory
// (cuCtxEnablePeerAccess with that context current; the peer's primary
// context is retained, as cudart does).
DRVSHIM_CUDART cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  return guarded("cudaDeviceEnablePeerAccess", [&] {
    if (const cudaError_t e = check_device("cudaDeviceEnablePeerAccess", peer); e != cudaSuccess) return e;
    if (flags != 0) return fail(cudaErrorInvalidValue, "cudaDeviceEnablePeerAccess: flags must be 0");
    if (peer == thread().device) {
      return fail(cudaErrorInvalidDevice, fmt::format("cudaDeviceEnablePeerAccess: device {} is the current device", peer));
    }
    const auto& core = seam("cudaDeviceEnablePeerAccess");
    if (!core.has(detail::Api::k_cuCtxEnablePeerAccess)) {
      return missing("cudaDeviceEnablePeerAccess", detail::Api::k_cuCtxEnablePeerAccess);
    }
    (void)context("cudaDeviceEnablePeerAccess");
    const ContextRef peer_ctx = primary(peer, "cudaDeviceEnablePeerAccess");
    const CUresult r = DRVSHIM_CU(core, cuCtxEnablePeerAccess, native(peer_ctx), flags);
    return result("cudaDeviceEnablePeerAccess", r, fmt::format("device {} to peer {}", thread().device, peer));
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  return guarded("cudaDeviceDisablePeerAccess", [&] {
    if (const cudaError_t e = check_device("cudaDeviceDisablePeerAccess", peer); e != cudaSuccess) return e;
    const auto& core = seam("cudaDeviceDisablePeerAccess");
    if (!core.has(detail::Api::k_cuCtxDisablePeerAccess)) {
      return missing("cudaDeviceDisablePeerAccess", detail::Api::k_cuCtxDisablePeerAccess);
    }
    (void)context("cudaDeviceDisablePeerAccess");
    const ContextRef peer_ctx = primary(peer, "cudaDeviceDisablePeerAccess");
    const CUresult r = DRVSHIM_CU(core, cuCtxDisablePeerAccess, native(peer_ctx));
    return result("cudaDeviceDisablePeerAccess", r, fmt::format("device {} to peer {}", thread().device, peer));
  });
}

namespace {

cudaError_t memcpy_peer(const char* api, void* dst, int dst_device, const void* src, int src_device, std::size_t bytes,
                        std::optional<cudaStream_t> stream) {
  if ((dst == nullptr || src == nullptr) && bytes != 0) return null_argument(api, "dst or src");
  return guarded(api, [&] {
    if (const cudaError_t e = check_device(api, dst_device); e != cudaSuccess) return e;
    if (const cudaError_t e = check_device(api, src_device); e != cudaSuccess) return e;
    const auto& core = seam(api);
    const ContextRef dst_ctx = primary(dst_device, api);
    const ContextRef src_ctx = primary(src_device, api);
    const std::string objects = fmt::format("{} bytes from {} (device {}) to {} (device {})", bytes, src, src_device,
                                            dst, dst_device);
    if (!stream.has_value()) {
      (void)context(api);
      if (bytes == 0) return cudaSuccess;
      if (!core.has(detail::Api::k_cuMemcpyPeer)) return missing(api, detail::Api::k_cuMemcpyPeer);
      return result(api,
                    DRVSHIM_CU(core, cuMemcpyPeer, reinterpret_cast<CUdeviceptr>(dst), native(dst_ctx),
                               reinterpret_cast<CUdeviceptr>(src), native(src_ctx), bytes),
                    objects);
    }
    const StreamRef s = stream_of(*stream, DefaultStream::legacy, api);
    if (bytes == 0) return cudaSuccess;
    if (!core.has(detail::Api::k_cuMemcpyPeerAsync)) return missing(api, detail::Api::k_cuMemcpyPeerAsync);
    return result(api,
                  DRVSHIM_CU(core, cuMemcpyPeerAsync, reinterpret_cast<CUdeviceptr>(dst), native(dst_ctx),
                             reinterpret_cast<CUdeviceptr>(src), native(src_ctx), bytes,
                             reinterpret_cast<CUstream>(s.native())),
                  objects + ", " + s.name());
  });
}

}  // namespace

DRVSHIM_CUDART cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  return memcpy_peer("cudaMemcpyPeer", dst, dst_device, src, src_device, bytes, std::nullopt);
}

DRVSHIM_CUDART cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                               cudaStream_t stream) {
  return memcpy_peer("cudaMemcpyPeerAsync", dst, dst_device, src, src_device, bytes, stream);
}
