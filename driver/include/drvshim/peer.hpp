// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file peer.hpp
/// Several GPUs in one host: the link between two devices (P2P attributes as
/// tri-state values), peer access as an owned step, and copies between the
/// memory of two contexts (usually of two devices).
///
/// Peer access is one-way: PeerAccess::enable(from, to) lets kernels and
/// copies running in `from` reach memory allocated in `to`; the reverse needs
/// a second owner. Copies between two devices do not need it (the driver then
/// stages through the host); with it they go over the direct link (NVLink or
/// PCIe peer-to-peer). Objects stay in their context: a kernel is launched on
/// streams of its module's context only (load the module in each device's
/// context, or use Library::kernel(context, name)); an event is recorded on a
/// stream of its own context only, and StreamRef::wait accepts an event of any
/// device.
#include <drvshim/context.hpp>
#include <drvshim/device.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>
#include <drvshim/owning_handle.hpp>
#include <drvshim/stream.hpp>

#include <cstdint>
#include <new>
#include <string>
#include <type_traits>

namespace drvshim {

/// Attributes of the link from one device to another. The values are the
/// driver's CUdevice_P2PAttribute numbers (checked against cuda.h when drvshim
/// is built).
enum class PeerAttribute : int {
  performance_rank = 1,                      ///< relative performance of the link (lower is better)
  access_supported = 2,                      ///< 1: peer access can be enabled
  native_atomic_supported = 3,               ///< 1: every CUDA atomic works natively over the link
  cuda_array_access_supported = 4,           ///< 1: CUDA arrays can be accessed over the link
  only_partial_native_atomic_supported = 5,  ///< 1: some atomics work natively (CUDA 13.0+)
};

/// The snake_case name of a peer attribute ("native_atomic_supported"); "unknown"
/// for a number no enumerator names.
DRVSHIM_API const char* peer_attribute_name(PeerAttribute attribute) noexcept;

/// Reads one attribute of the link from `from` to `to`
/// (cuDeviceGetP2PAttribute) as a tri-state, like Device::attribute: a value,
/// "unsupported" (CUDA_ERROR_NOT_SUPPORTED) or "unknown" (a driver older than
/// the attribute, or CUDA_ERROR_INVALID_VALUE). Throws InvalidArgumentError,
/// before calling the driver, for a number no enumerator names, when both
/// are the same device (the driver
/// answers CUDA_ERROR_INVALID_DEVICE) or belong to different Driver objects;
/// CudaError for other failures.
DRVSHIM_API AttributeValue peer_attribute(const Device& from, const Device& to, PeerAttribute attribute);

/// Everything the driver says about the link from one device to another.
struct DRVSHIM_API PeerLink {
  int from = 0;             ///< ordinal
  int to = 0;               ///< ordinal
  bool can_access = false;  ///< cuDeviceCanAccessPeer(from, to)
  AttributeValue performance_rank = AttributeValue::unknown();
  AttributeValue access_supported = AttributeValue::unknown();
  AttributeValue native_atomic_supported = AttributeValue::unknown();
  AttributeValue cuda_array_access_supported = AttributeValue::unknown();
  AttributeValue only_partial_native_atomic_supported = AttributeValue::unknown();
  /// One line: "device 0 -> 1: peer access yes, native atomics 1, ...".
  std::string to_string() const;
};

/// The link from `from` to `to`: cuDeviceCanAccessPeer and the five
/// attributes. Throws like peer_attribute().
DRVSHIM_API PeerLink peer_link(const Device& from, const Device& to);

namespace detail {
/// PeerAccess's ownership traits (owning_handle.hpp).
struct PeerAccessTraits {
  struct value_type {
    ContextRef from;
    ContextRef to;
    bool held;
    bool adopted;
    bool shared;
    std::uint64_t generation;
  };
  static bool held(const value_type& v) noexcept { return v.held; }
  static void clear(value_type& v) noexcept { v.held = false; }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};
}  // namespace detail

/// Access from one context to the memory of another (cuCtxEnablePeerAccess),
/// owned: destroying the owner disables it again (cuCtxDisablePeerAccess),
/// unless drvshim adopted it. Move-only.
///
/// Several owners of the same direction share one enablement: the driver is
/// asked to disable it when the last of them goes. Access that another
/// component (the CUDA Runtime, a library) enabled before drvshim is adopted,
/// as an already active primary context is: adopted() says so, the trace
/// shows `adopt-peer-access`, and drvshim never disables it.
///
/// The driver does not say who enabled an access. When another component
/// disables drvshim's enablement and enables the direction again for itself
/// while drvshim owners remain, a new owner made then takes the enablement
/// for drvshim's own and shares it, and the last drvshim owner disables it
/// under that component. Components that manage the same direction must not
/// disable each other's access.
///
/// Both contexts must outlive the owner: destroying a context ends every
/// peer access from and to it in the driver.
class DRVSHIM_API PeerAccess {
 public:
  /// Enables access from `from` to memory allocated in `to`. Checks first,
  /// without calling cuCtxEnablePeerAccess: InvalidArgumentError when the two
  /// are the same context, on the same device, or of different Driver
  /// objects; UnsupportedError naming both devices when the driver says the
  /// link cannot do it (cuDeviceCanAccessPeer 0), with the way out (copies
  /// still work, staged through the host). Then the driver:
  /// CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED is not an error (shared with
  /// another drvshim owner, or adopted); CUDA_ERROR_TOO_MANY_PEERS and the
  /// rest throw CudaError. ContextPoisonedError when either context is poisoned.
  [[nodiscard]] static PeerAccess enable(const ContextRef& from, const ContextRef& to);

  PeerAccess(PeerAccess&& other) noexcept;
  PeerAccess& operator=(PeerAccess&& other) noexcept;
  PeerAccess(const PeerAccess&) = delete;
  PeerAccess& operator=(const PeerAccess&) = delete;
  ~PeerAccess();

  /// Whether this object still holds the access.
  explicit operator bool() const noexcept { return handle_.held(); }
  /// The context that may access `to`'s memory.
  const ContextRef& from() const noexcept { return handle_.get().from; }
  /// The context whose memory is accessed.
  const ContextRef& to() const noexcept { return handle_.get().to; }
  /// Whether the access was already enabled by another component when
  /// drvshim asked (drvshim then never disables it).
  bool adopted() const noexcept { return handle_.get().adopted; }
  /// Whether another drvshim owner of the same direction already held it
  /// (the driver is asked to disable it only when the last owner goes).
  bool shared() const noexcept { return handle_.get().shared; }

  /// Gives the access up: cuCtxDisablePeerAccess (with `from` made current)
  /// when this is the last drvshim owner and the access was not adopted. The
  /// owner becomes empty. Throws CudaError on failure (empty either way).
  void disable();
  /// The no-throw twin, for cleanup paths. After exit started, in a forked
  /// child, after the driver deinitialised, or for a poisoned context it makes
  /// no driver call.
  [[nodiscard]] Status disable(std::nothrow_t) noexcept;
  /// Gives the access up without a driver call, for an owner whose context
  /// may have ended (a reset destroyed it): the driver ended the access with
  /// it, and a call naming a destroyed context is not allowed. The owner
  /// becomes empty and its share leaves drvshim's books, so the next enable
  /// of the direction is a fresh one. Should both contexts in fact still
  /// live, the access stays enabled until one of them ends (a later enable
  /// then adopts it).
  void abandon() noexcept;

 private:
  PeerAccess(ContextRef from, ContextRef to, bool adopted, bool shared, std::uint64_t generation) noexcept;
  detail::OwningHandle<detail::PeerAccessTraits> handle_;
};

namespace detail {
// The untyped operation behind copy_peer / copy_peer_async (`stream` null:
// the synchronous form).
DRVSHIM_API void copy_peer(const ContextRef& dst_ctx, DevicePtr dst, std::size_t dst_bytes, std::uint64_t dst_id,
                           const ContextRef& src_ctx, DevicePtr src, std::size_t bytes, std::uint64_t src_id,
                           const StreamRef* stream);
}  // namespace detail

/// Copies src.size() elements from memory of one context to memory of another
/// (cuMemcpyPeer), usually on two devices; peer access is not needed (without
/// it the driver stages through the host). A context the caller has current
/// stays current (with none, dst's is made current for the call). The driver
/// orders the copy after all work already queued in both contexts and in the
/// current one; like every device-to-device copy it may return before the copy has finished (CUDA's API
/// synchronisation rules): a later synchronous copy to the host, or a synchronize() of either context, sees the result.
/// A sticky error it reports poisons the context the driver answers it for
/// (the source's fault leaves a healthy destination usable).
/// Throws InvalidArgumentError, before the driver, when dst is smaller than
/// src or the contexts belong to different Driver objects;
/// ContextPoisonedError when either context is poisoned; CudaError for what
/// the driver refuses.
template <class T>
void copy_peer(DeviceSpan<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  detail::copy_peer(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.context(), src.address(),
                    src.size_bytes(), src.owner_id(), nullptr);
}

/// copy_peer() queued on `stream` (cuMemcpyPeerAsync): a stream of the
/// destination's context, the source's or a third one (of the same Driver:
/// InvalidArgumentError otherwise, before the driver), as the driver allows.
/// Ordered after the stream's earlier work only: to order it after work on
/// the other device, make the stream wait for an event recorded there
/// (StreamRef::wait accepts an event of any device).
template <class T>
void copy_peer_async(const StreamRef& stream, DeviceSpan<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  detail::copy_peer(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.context(), src.address(),
                    src.size_bytes(), src.owner_id(), &stream);
}

}  // namespace drvshim
