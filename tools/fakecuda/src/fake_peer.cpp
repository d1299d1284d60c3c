// SPDX-License-Identifier: Apache-2.0
// Several GPUs: peer access, link attributes, peer copies.
//
// Peer access is per direction (from context, to context), as in the driver:
// enabling it twice answers PEER_ACCESS_ALREADY_ENABLED, disabling what is not
// enabled PEER_ACCESS_NOT_ENABLED, a pair without a peer-to-peer path
// (drvshim_fake_set_peer_supported, the trio profile's device 2)
// PEER_ACCESS_UNSUPPORTED; a context going away ends every access from and to
// it. Peer copies run like the other copies; the fake is stricter than the
// driver in one way: each address must lie in an allocation of the device of
// the context it is paired with, so a swapped argument shows up in CI.
#include <tuple>

#include "fake_engine.hpp"

namespace drvshim::fake {

void forget_peer_access(Engine& e, FakeCtx* ctx) {
  for (auto it = e.peer_enabled.begin(); it != e.peer_enabled.end();) {
    it = (it->first == ctx || it->second == ctx) ? e.peer_enabled.erase(it) : std::next(it);
  }
}

bool peer_path(const Engine& e, int dev, int peer) { return dev != peer && e.peer_unsupported.count({dev, peer}) == 0; }

namespace {

CUresult fake_cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  FAKE_ENTER("cuDeviceCanAccessPeer");
  if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev) || !valid_device(e, peer)) return CUDA_ERROR_INVALID_DEVICE;
  // The dual profile's two H200s are peers; a device is not its own peer.
  *can = dev != peer && e.peer_unsupported.count({dev, peer}) == 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst) {
  FAKE_ENTER("cuDeviceGetP2PAttribute");
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, src) || !valid_device(e, dst) || src == dst) return CUDA_ERROR_INVALID_DEVICE;
  const auto key = std::make_tuple(static_cast<int>(src), static_cast<int>(dst), static_cast<int>(attrib));
  if (auto it = e.p2p_attribute_errors.find(key); it != e.p2p_attribute_errors.end()) {
    return static_cast<CUresult>(it->second);
  }
  if (auto it = e.p2p_attributes.find(key); it != e.p2p_attributes.end()) {
    *value = it->second;
    return CUDA_SUCCESS;
  }
  const bool path = peer_path(e, src, dst);
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
      *value = 0;
      break;  // one NVLink hop (what the H200 pair is assumed to report)
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *value = path ? 1 : 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *value = path ? 1 : 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = path ? 1 : 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED:
      if (e.driver_version < 13000) return CUDA_ERROR_INVALID_VALUE;  // unknown to older drivers
      *value = 0;                                                     // full native atomics where there is a path
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxEnablePeerAccess(CUcontext peer_ctx, unsigned flags) {
  FAKE_ENTER("cuCtxEnablePeerAccess");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  FakeCtx* peer = as_ctx(peer_ctx);
  if (!is_live(e, peer)) {
    misuse(e, "cuCtxEnablePeerAccess to a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (peer == ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!peer_path(e, ctx->device, peer->device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  if (!e.peer_enabled.insert({ctx, peer}).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxDisablePeerAccess(CUcontext peer_ctx) {
  FAKE_ENTER("cuCtxDisablePeerAccess");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  FakeCtx* peer = as_ctx(peer_ctx);
  if (!is_live(e, peer)) {
    misuse(e, "cuCtxDisablePeerAccess to a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (e.peer_enabled.erase({ctx, peer}) == 0) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  return CUDA_SUCCESS;
}

// Whether [p, p+n) is memory that device `device` holds (device, managed or
// stream-ordered allocations, module globals); host memory is refused.
bool on_device(const Engine& e, uintptr_t p, size_t n, int device) {
  const auto* a = find_alloc(e, p, n);
  return a != nullptr && a->second.kind != AllocKind::pinned && a->second.ctx->device == device;
}

// The two contexts of a peer copy, checked: live, usable, and each address on its context's device.
CUresult peer_copy_contexts(Engine& e, CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                            FakeCtx** out_dst, FakeCtx** out_src) {
  FakeCtx* d = as_ctx(dst_ctx);
  FakeCtx* s = as_ctx(src_ctx);
  if (!is_live(e, d) || !is_live(e, s)) {
    misuse(e, "peer copy with a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (d->sticky != 0) return static_cast<CUresult>(d->sticky);
  if (s->sticky != 0) return static_cast<CUresult>(s->sticky);
  if (n != 0 && (!on_device(e, static_cast<uintptr_t>(dst), n, d->device) ||
                 !on_device(e, static_cast<uintptr_t>(src), n, s->device))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out_dst = d;
  *out_src = s;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) {
  FAKE_ENTER("cuMemcpyPeer");
  FakeCtx* d = nullptr;
  FakeCtx* s = nullptr;
  if (const CUresult r = peer_copy_contexts(e, dst, dst_ctx, src, src_ctx, n, &d, &s); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  // Serialised with all work queued in both contexts (and the current one), complete on return here.
  FakeCtx* cur = nullptr;
  if (current(e, &cur) == CUDA_SUCCESS && cur != d && cur != s) drain_everything(e, lock, cur);
  drain_everything(e, lock, s);
  drain_everything(e, lock, d);
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                                CUstream stream) {
  FAKE_ENTER("cuMemcpyPeerAsync");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, stream, &ctx); r != CUDA_SUCCESS) return r;
  FakeCtx* d = nullptr;
  FakeCtx* s = nullptr;
  if (const CUresult r = peer_copy_contexts(e, dst, dst_ctx, src, src_ctx, n, &d, &s); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  return submit_work(e, lock, queue_of(e, stream, ctx),
                     [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
}

}  // namespace

std::vector<ProcEntry> peer_procs() {
  return {
      {"cuDeviceCanAccessPeer", 4000, erase_fn(&fake_cuDeviceCanAccessPeer)},
      {"cuCtxEnablePeerAccess", 4000, erase_fn(&fake_cuCtxEnablePeerAccess)},
      {"cuCtxDisablePeerAccess", 4000, erase_fn(&fake_cuCtxDisablePeerAccess)},
      {"cuDeviceGetP2PAttribute", 8000, erase_fn(&fake_cuDeviceGetP2PAttribute)},
      {"cuMemcpyPeer", 4000, erase_fn(&fake_cuMemcpyPeer)},
      {"cuMemcpyPeerAsync", 4000, erase_fn(&fake_cuMemcpyPeerAsync)},
  };
}

}  // namespace drvshim::fake
