// SPDX-License-Identifier: Apache-2.0
// Peer access between devices: capability, enabling and disabling, the P2P
// attributes, peer copies — over the driver layer's peer API (peer.hpp), with
// cudart's error codes. Access enabled through the Runtime is held by one
// PeerAccess owner per direction, dropped by cudaDeviceReset of either device.
#include <drvshim/peer.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "runtime.hpp"

using namespace drvshim;
using namespace drvshim::rt::impl;

namespace {

// An access cudaDeviceEnablePeerAccess made, with the reset generations its
// two contexts belong to: cudaDeviceReset drops the owners of its device
// before it releases the context, so an enable racing it may record an owner
// after the drop, for a context the release then ends. Such an owner is
// stale (a generation moved on): it is abandoned where it is next met (an
// enable, a disable, a reset, the shutdown), without a driver call, and
// never answers "already enabled".
struct PeerOwner {
  PeerAccess access;
  std::uint64_t device_generation = 0;
  std::uint64_t peer_generation = 0;
  bool current(int device, int peer) const noexcept {
    return device_generation == generation(device) && peer_generation == generation(peer);
  }
};

// The accesses cudaDeviceEnablePeerAccess made: (device, peer) -> owner.
struct PeerRegistry {
  std::mutex mutex;
  std::map<std::pair<int, int>, PeerOwner> owners;
};
PeerRegistry& peers() {
  static auto* r = new PeerRegistry;  // never destroyed: no driver calls at exit
  return *r;
}

// Drops a stale owner (under the registry's lock) without a driver call: its
// context may be destroyed (the reset's release ended it, and the access with
// it), and a call naming it is not allowed.
void drop_stale(PeerRegistry& r, std::map<std::pair<int, int>, PeerOwner>::iterator it) {
  logf(log::Level::info,
       "runtime_compat: peer access from device {} to {} was recorded across a cudaDeviceReset of one of them: "
       "dropped",
       it->first.first, it->first.second);
  it->second.access.abandon();
  r.owners.erase(it);
}

// PeerAttribute numbers its attributes as cudaDeviceP2PAttr and CUdevice_P2PAttribute do.
PeerAttribute attribute_of(cudaDeviceP2PAttr a) { return static_cast<PeerAttribute>(static_cast<int>(a)); }

}  // namespace

namespace drvshim::rt::impl {

void drop_peer_access(std::optional<int> device) {
  std::map<std::pair<int, int>, PeerOwner> doomed;
  {
    auto& r = peers();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto it = r.owners.begin(); it != r.owners.end();) {
      if (!device || it->first.first == *device || it->first.second == *device) {
        // A stale owner's context may be destroyed: the driver is not told.
        if (!it->second.current(it->first.first, it->first.second)) it->second.access.abandon();
        doomed.insert(r.owners.extract(it++));
      } else {
        ++it;
      }
    }
  }
  // Destroyed outside the lock: disabling calls the driver.
}

}  // namespace drvshim::rt::impl

DRVSHIM_CUDART cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (const cudaError_t failed = initialise("cudaDeviceCanAccessPeer")) return failed;
  return guarded("cudaDeviceCanAccessPeer", [&] {
    // cudart's order: the devices, its prologue, the output pointer.
    if (const cudaError_t e = check_device("cudaDeviceCanAccessPeer", device); e != cudaSuccess) return e;
    if (const cudaError_t e = check_device("cudaDeviceCanAccessPeer", peer); e != cudaSuccess) return e;
    if (const cudaError_t e = enter("cudaDeviceCanAccessPeer", Prologue::driver); e != cudaSuccess) return e;
    if (can == nullptr) return null_argument("cudaDeviceCanAccessPeer", "canAccessPeer");
    const Driver& drv = driver("cudaDeviceCanAccessPeer");
    *can = device != peer && drv.device(device).can_access_peer(drv.device(peer)) ? 1 : 0;
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attribute, int src, int dst) {
  if (const cudaError_t failed = initialise("cudaDeviceGetP2PAttribute")) return failed;
  if (const cudaError_t e = enter("cudaDeviceGetP2PAttribute", Prologue::driver); e != cudaSuccess) return e;
  if (value == nullptr) return null_argument("cudaDeviceGetP2PAttribute", "value");
  return guarded("cudaDeviceGetP2PAttribute", [&] {
    if (const cudaError_t e = check_device("cudaDeviceGetP2PAttribute", src); e != cudaSuccess) return e;
    if (const cudaError_t e = check_device("cudaDeviceGetP2PAttribute", dst); e != cudaSuccess) return e;
    if (src == dst) {
      return fail(cudaErrorInvalidDevice, fmt::format("cudaDeviceGetP2PAttribute: device {} paired with itself", src));
    }
    const Driver& drv = driver("cudaDeviceGetP2PAttribute");
    const AttributeValue v = peer_attribute(drv.device(src), drv.device(dst), attribute_of(attribute));
    if (!v.has_value()) {
      return fail(cudaErrorInvalidValue,
                  fmt::format("cudaDeviceGetP2PAttribute: attribute {} is {} for devices {} to {}",
                              static_cast<int>(attribute), v.to_string(), src, dst));
    }
    *value = v.value();
    return cudaSuccess;
  });
}

// Lets the calling thread's device's context access `peer`'s memory (its
// primary context is retained, as cudart does).
DRVSHIM_CUDART cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaDeviceEnablePeerAccess")) return failed;
  if (const cudaError_t e = enter("cudaDeviceEnablePeerAccess", Prologue::context); e != cudaSuccess) return e;
  return guarded("cudaDeviceEnablePeerAccess", [&] {
    if (foreign_context_current("cudaDeviceEnablePeerAccess")) {
      // cudart 13.0's answer with a cuCtxCreate context current, before it
      // looks at the peer (H100, tests/runtime_api/conformance, 2026-12-07).
      return fail(
          cudaErrorIncompatibleDriverContext,
          "cudaDeviceEnablePeerAccess: a context the program created (cuCtxCreate) is current; peer access is between "
          "primary contexts");
    }
    if (const cudaError_t e = check_device("cudaDeviceEnablePeerAccess", peer); e != cudaSuccess) return e;
    if (const cudaError_t e = enter("cudaDeviceEnablePeerAccess", Prologue::sticky); e != cudaSuccess) return e;
    if (flags != 0) return fail(cudaErrorInvalidValue, "cudaDeviceEnablePeerAccess: flags must be 0");
    const int device = current_device();
    if (peer == device) {
      // cudart 13.0's answer (H100, tests/runtime_api/conformance, 2026-12-07).
      return fail(cudaErrorPeerAccessUnsupported,
                  fmt::format("cudaDeviceEnablePeerAccess: device {} is the current device", peer));
    }
    // Peer access is between primary contexts, also with a context the
    // program created current (cudart does not use that one here). Each
    // comes with the reset generation it belongs to (see PeerOwner).
    std::uint64_t device_generation = 0;
    std::uint64_t peer_generation = 0;
    const ContextRef from = primary(device, "cudaDeviceEnablePeerAccess", &device_generation);
    const ContextRef to = primary(peer, "cudaDeviceEnablePeerAccess", &peer_generation);
    auto& r = peers();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (const auto it = r.owners.find({device, peer}); it != r.owners.end()) {
      if (it->second.current(device, peer)) {
        return fail(cudaErrorPeerAccessAlreadyEnabled,
                    fmt::format("cudaDeviceEnablePeerAccess: device {} to {} is enabled already", device, peer));
      }
      drop_stale(r, it);
    }
    std::optional<PeerAccess> access;
    try {
      access.emplace(PeerAccess::enable(from, to));
    } catch (const UnsupportedError& e) {
      return fail(cudaErrorPeerAccessUnsupported, e.what());
    }
    if (access->adopted()) {
      // Another component enabled it: cudart reports that, and drvshim never disables it.
      return fail(
          cudaErrorPeerAccessAlreadyEnabled,
          fmt::format("cudaDeviceEnablePeerAccess: device {} to {} was enabled by another component", device, peer));
    }
    r.owners.emplace(std::make_pair(device, peer), PeerOwner{std::move(*access), device_generation, peer_generation});
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  if (const cudaError_t failed = initialise("cudaDeviceDisablePeerAccess")) return failed;
  if (const cudaError_t e = enter("cudaDeviceDisablePeerAccess", Prologue::context); e != cudaSuccess) return e;
  return guarded("cudaDeviceDisablePeerAccess", [&] {
    if (foreign_context_current("cudaDeviceDisablePeerAccess")) {
      // cudart 13.0's answer with a cuCtxCreate context current, before it
      // looks at the peer (H100, tests/runtime_api/conformance, 2026-12-07).
      return fail(
          cudaErrorIncompatibleDriverContext,
          "cudaDeviceDisablePeerAccess: a context the program created (cuCtxCreate) is current; peer access is between "
          "primary contexts");
    }
    if (const cudaError_t e = check_device("cudaDeviceDisablePeerAccess", peer); e != cudaSuccess) return e;
    if (const cudaError_t e = enter("cudaDeviceDisablePeerAccess", Prologue::sticky); e != cudaSuccess) return e;
    const int device = current_device();
    std::optional<PeerAccess> owner;
    {
      auto& r = peers();
      std::lock_guard<std::mutex> lock(r.mutex);
      auto it = r.owners.find({device, peer});
      if (it != r.owners.end() && !it->second.current(device, peer)) {
        drop_stale(r, it);
        it = r.owners.end();
      }
      if (it == r.owners.end()) {
        return fail(cudaErrorPeerAccessNotEnabled,
                    fmt::format("cudaDeviceDisablePeerAccess: device {} to {} is not enabled", device, peer));
      }
      owner.emplace(std::move(it->second.access));
      r.owners.erase(it);
    }
    owner->disable();
    return cudaSuccess;
  });
}

namespace {

cudaError_t memcpy_peer(const char* api, void* dst, int dst_device, const void* src, int src_device, std::size_t bytes,
                        std::optional<cudaStream_t> stream) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  // cudart's order: the devices, nothing to copy, the sticky error, the pointers.
  return guarded(api, [&] {
    // The calling thread's device's primary context is retained first, also
    // with a context the program created current (cudart 13.0 on the H100,
    // tests/runtime_api/conformance, drvctx scenario, 2026-12-07).
    (void)primary(current_device(), api);
    if (const cudaError_t e = check_device(api, dst_device); e != cudaSuccess) return e;
    if (const cudaError_t e = check_device(api, src_device); e != cudaSuccess) return e;
    if (bytes == 0) return cudaSuccess;
    if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
    if (dst == nullptr || src == nullptr) return null_argument(api, "dst or src");
    // A device's context is the one the program made current where it is that
    // device's (cuCtxCreate: its memory and streams live there), else the
    // device's primary context, as cudart chooses them.
    const ContextRef here = context(api);
    const auto context_of = [&](int device) {
      return foreign(here) && here.device().ordinal() == device ? here : primary(device, api);
    };
    const ContextRef dst_ctx = context_of(dst_device);
    const ContextRef src_ctx = context_of(src_device);
    const auto d = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(dst));
    const auto s = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(src));
    if (!stream.has_value()) {
      detail::copy_peer(dst_ctx, d, bytes, 0, src_ctx, s, bytes, 0, nullptr);
      return cudaSuccess;
    }
    const StreamRef on = stream_of(*stream, DefaultStream::legacy, api);
    detail::copy_peer(dst_ctx, d, bytes, 0, src_ctx, s, bytes, 0, &on);
    return cudaSuccess;
  });
}

}  // namespace

DRVSHIM_CUDART cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  if (const cudaError_t failed = initialise("cudaMemcpyPeer")) return failed;
  return memcpy_peer("cudaMemcpyPeer", dst, dst_device, src, src_device, bytes, std::nullopt);
}

DRVSHIM_CUDART cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                               cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemcpyPeerAsync")) return failed;
  return memcpy_peer("cudaMemcpyPeerAsync", dst, dst_device, src, src_device, bytes, stream);
}
