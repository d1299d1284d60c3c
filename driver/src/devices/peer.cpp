// SPDX-License-Identifier: Apache-2.0
// Several GPUs: the link between two devices, peer access as an owned step,
// and copies between the memory of two contexts (docs/DESIGN.md, "Several GPUs").
#include <drvshim/copy.hpp>
#include <drvshim/peer.hpp>

#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "seam/access.hpp"
#include "seam/core.hpp"
#include "support/fork_guarded.hpp"
#include "support/test_hooks.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace {

struct PeerAttributeInfo {
  PeerAttribute attribute;
  CUdevice_P2PAttribute native;
  const char* name;
  int since;  // first driver version that knows the attribute
};

#define DRVSHIM_P2P_ATTR(ours, theirs, since) {PeerAttribute::ours, CU_DEVICE_P2P_ATTRIBUTE_##theirs, #ours, since},
constexpr PeerAttributeInfo kPeerAttributes[] = {
    DRVSHIM_P2P_ATTR(performance_rank, PERFORMANCE_RANK, 8000)
        DRVSHIM_P2P_ATTR(access_supported, ACCESS_SUPPORTED, 8000)
            DRVSHIM_P2P_ATTR(native_atomic_supported, NATIVE_ATOMIC_SUPPORTED, 8000)
                DRVSHIM_P2P_ATTR(cuda_array_access_supported, CUDA_ARRAY_ACCESS_SUPPORTED, 9020) DRVSHIM_P2P_ATTR(
                    only_partial_native_atomic_supported, ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED, 13000)};
#undef DRVSHIM_P2P_ATTR

constexpr bool peer_attributes_match_cuda_h() {
  for (const auto& a : kPeerAttributes) {
    if (static_cast<int>(a.attribute) != static_cast<int>(a.native)) return false;
  }
  return true;
}
static_assert(peer_attributes_match_cuda_h(), "PeerAttribute values must equal cuda.h's CUdevice_P2PAttribute values");

// Null for a number no enumerator names (a cast from the Runtime API's enum).
const PeerAttributeInfo* info_of(PeerAttribute a) noexcept {
  for (const auto& info : kPeerAttributes) {
    if (info.attribute == a) return &info;
  }
  return nullptr;
}

CUcontext native(const ContextRef& c) noexcept { return reinterpret_cast<CUcontext>(c.address()); }

std::string ctx_text(const ContextRef& c) {
  return fmt::format("{}context 0x{:x} on device {}", c.is_primary() ? "primary " : "", c.address(),
                     c.device().ordinal());
}

std::string bytes_text(std::size_t n) {
  if (n >= (std::size_t{1} << 20)) return fmt::format("{} bytes ({:.2f} MiB)", n, static_cast<double>(n) / (1u << 20));
  return fmt::format("{} bytes", n);
}

// Both objects must come from one Driver: a context of one loaded library
// means nothing to another (tests load the fake twice; users may too).
void require_same_driver(const char* api, const Device& a, const Device& b) {
  if (detail::Access::core(a) != detail::Access::core(b)) {
    throw InvalidArgumentError(api,
                               fmt::format("device {} and device {} belong to different Driver objects (different "
                                           "loaded driver libraries)",
                                           a.ordinal(), b.ordinal()),
                               "take both from the same drvshim::Driver");
  }
}

// ---- the registry of drvshim's own peer-access enablements --------------------------------
//
// cuCtxEnablePeerAccess is not counted by the driver: one enable, and the
// first disable ends it for everyone. So drvshim counts its own owners of
// each direction; the driver is asked once per enablement and told to
// disable it when the last owner goes. Each enablement gets a generation: a
// context destroyed and recreated at the same address (the H200 hands back
// the same primary-context handle after a release and a re-retain) starts a
// new generation, and an owner left over from the old one never disables it.

struct PeerKey {
  const detail::DriverCore* core;
  std::uintptr_t from;
  std::uintptr_t to;
  friend bool operator<(const PeerKey& a, const PeerKey& b) noexcept {
    return std::tie(a.core, a.from, a.to) < std::tie(b.core, b.from, b.to);
  }
};

struct PeerEntry {
  std::uint64_t generation = 0;
  std::uint64_t owners = 0;
};

struct PeerRegistry {
  std::mutex mutex;
  std::map<PeerKey, PeerEntry> entries;
  std::uint64_t next_generation = 1;
};

// Owners may be destroyed during exit and in a forked child (which may load a Driver of its own).
PeerRegistry& registry() { return detail::fork_guarded<PeerRegistry>(); }

std::string peer_text(const ContextRef& from, const ContextRef& to) {
  return fmt::format("from {} to {}", ctx_text(from), ctx_text(to));
}

}  // namespace

const char* peer_attribute_name(PeerAttribute attribute) noexcept {
  const PeerAttributeInfo* info = info_of(attribute);
  return info != nullptr ? info->name : "unknown";
}

AttributeValue peer_attribute(const Device& from, const Device& to, PeerAttribute attribute) {
  const auto& core = *detail::Access::core(from);
  core.require_init("peer_attribute");
  require_same_driver("peer_attribute", from, to);
  const PeerAttributeInfo* known = info_of(attribute);
  if (known == nullptr) {
    throw InvalidArgumentError(
        "peer_attribute",
        fmt::format("the link attribute number {} is none of PeerAttribute's", static_cast<int>(attribute)),
        "performance_rank (1), access_supported (2), native_atomic_supported (3), cuda_array_access_supported (4), "
        "only_partial_native_atomic_supported (5)");
  }
  const PeerAttributeInfo& info = *known;
  if (from.ordinal() == to.ordinal()) {
    throw InvalidArgumentError(
        "peer_attribute",
        fmt::format("the link attribute {} was asked of device {} and itself", info.name, from.ordinal()),
        "a link joins two different devices (the driver answers CUDA_ERROR_INVALID_DEVICE for one device)");
  }
  if (core.version < info.since) return AttributeValue::unknown();
  int value = 0;
  const CUresult r = DRVSHIM_CU(core, cuDeviceGetP2PAttribute, &value, info.native, from.native(), to.native());
  if (r == CUDA_SUCCESS) return AttributeValue::of(value);
  if (r == CUDA_ERROR_NOT_SUPPORTED) return AttributeValue::unsupported();
  if (r == CUDA_ERROR_INVALID_VALUE) return AttributeValue::unknown();
  detail::raise(core, static_cast<int>(r), "cuDeviceGetP2PAttribute",
                fmt::format("link from device {} to device {}, attribute {} ({})", from.ordinal(), to.ordinal(),
                            info.name, static_cast<int>(info.native)));
}

std::string PeerLink::to_string() const {
  return fmt::format(
      "device {} -> {}: peer access {}, performance rank {}, native atomics {}, partial native atomics {}, CUDA "
      "array access {}",
      from, to, can_access ? "yes" : "no", performance_rank.to_string(), native_atomic_supported.to_string(),
      only_partial_native_atomic_supported.to_string(), cuda_array_access_supported.to_string());
}

PeerLink peer_link(const Device& from, const Device& to) {
  PeerLink link;
  link.from = from.ordinal();
  link.to = to.ordinal();
  link.performance_rank = peer_attribute(from, to, PeerAttribute::performance_rank);  // checks first
  link.can_access = from.can_access_peer(to);
  link.access_supported = peer_attribute(from, to, PeerAttribute::access_supported);
  link.native_atomic_supported = peer_attribute(from, to, PeerAttribute::native_atomic_supported);
  link.cuda_array_access_supported = peer_attribute(from, to, PeerAttribute::cuda_array_access_supported);
  link.only_partial_native_atomic_supported =
      peer_attribute(from, to, PeerAttribute::only_partial_native_atomic_supported);
  return link;
}

// ---- PeerAccess ------------------------------------------------------------------------------

PeerAccess::PeerAccess(ContextRef from, ContextRef to, bool adopted, bool shared, std::uint64_t generation) noexcept
    : handle_({std::move(from), std::move(to), true, adopted, shared, generation}) {}

PeerAccess PeerAccess::enable(const ContextRef& from, const ContextRef& to) {
  static constexpr const char* api = "PeerAccess::enable";
  const auto& core = *detail::Access::core(from.device());
  core.require_init(api);
  require_same_driver(api, from.device(), to.device());
  if (from.address() == to.address()) {
    throw InvalidArgumentError(api, fmt::format("peer access from {} to itself was asked for", ctx_text(from)),
                               "a context always reaches its own memory; peer access joins contexts of two devices");
  }
  if (from.device().ordinal() == to.device().ordinal()) {
    throw InvalidArgumentError(api,
                               fmt::format("both contexts are on device {} ({} and {})", from.device().ordinal(),
                                           ctx_text(from), ctx_text(to)),
                               "peer access joins contexts of two different devices (cuDeviceCanAccessPeer is 0 for a "
                               "device and itself); copy between the two contexts with copy_peer instead");
  }
  core.check_not_poisoned(from.address(), api);
  core.check_not_poisoned(to.address(), api);
  if (!from.device().can_access_peer(to.device())) {
    throw UnsupportedError(
        api,
        fmt::format("device {} cannot access the memory of device {} directly", from.device().ordinal(),
                    to.device().ordinal()),
        fmt::format("{}; cuDeviceCanAccessPeer({}, {}) is 0 (link attribute access_supported {})", peer_text(from, to),
                    from.device().ordinal(), to.device().ordinal(),
                    peer_attribute(from.device(), to.device(), PeerAttribute::access_supported).to_string()),
        "the two GPUs have no peer-to-peer path (no NVLink, or PCIe peer-to-peer unavailable between their slots or "
        "in this VM); copies between them still work (copy_peer, or copy between their spans), staged through the "
        "host; kernels cannot read the other device's memory");
  }
  // The registry's lock is held across the driver call: between a driver
  // answer and the registry's update, another thread's enable would see
  // "already enabled" without an owner and take drvshim's own access for
  // another component's (and a disable racing an enable likewise).
  auto& reg = registry();
  const PeerKey key{&core, from.address(), to.address()};
  std::uint64_t generation = 0;
  bool adopted = false;
  bool shared = false;
  {
    std::lock_guard<std::mutex> lock(reg.mutex);
    CUresult r = CUDA_SUCCESS;
    {
      detail::ContextScope scope(core, from.address(), api);
      r = DRVSHIM_CU(core, cuCtxEnablePeerAccess, native(to), 0u);
    }
    detail::test_hooks::at(detail::test_hooks::Point::peer_access_answered);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
      std::string hint;
      if (r == CUDA_ERROR_TOO_MANY_PEERS) {
        hint = "the device's peer-mapping resources are exhausted: disable peer access that is no longer needed";
      } else if (r == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED) {
        hint =
            "the driver refused although cuDeviceCanAccessPeer said yes: check nvidia-smi topo -m and the IOMMU "
            "settings; copies between the devices still work, staged through the host";
      }
      detail::raise(core, static_cast<int>(r), "cuCtxEnablePeerAccess", peer_text(from, to), std::move(hint));
    }
    if (r == CUDA_SUCCESS) {
      // A new enablement (an entry left from a destroyed context of the same
      // address, or from access another component disabled behind drvshim's
      // back, is stale: its owners never disable this one).
      generation = reg.next_generation++;
      reg.entries[key] = PeerEntry{generation, 1};
    } else if (auto it = reg.entries.find(key); it != reg.entries.end()) {
      ++it->second.owners;
      generation = it->second.generation;
      shared = true;
    } else {
      adopted = true;
    }
  }
  // The owner first: should the words below fail (out of memory), it still gives the access up.
  PeerAccess owner(from, to, adopted, shared, generation);
  if (adopted) {
    detail::logf(log::Level::info,
                 "peer access {} was already enabled by another component: drvshim adopts it and never disables it",
                 peer_text(from, to));
    trace::mark("adopt-peer-access", fmt::format("{}, already enabled", peer_text(from, to)));
  } else if (!shared) {
    trace::mark("enable-peer-access", peer_text(from, to));
  }
  return owner;
}

PeerAccess::PeerAccess(PeerAccess&&) noexcept = default;
PeerAccess& PeerAccess::operator=(PeerAccess&&) noexcept = default;
PeerAccess::~PeerAccess() = default;

void PeerAccess::disable() { handle_.release(); }

Status PeerAccess::disable(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

void PeerAccess::abandon() noexcept {
  const detail::PeerAccessTraits::value_type v = handle_.forget();
  if (!v.held || v.adopted) return;
  const auto& core = *detail::Access::core(v.from.device());
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  const auto it = reg.entries.find(PeerKey{&core, v.from.address(), v.to.address()});
  if (it == reg.entries.end() || it->second.generation != v.generation) return;  // that enablement ended already
  if (--it->second.owners == 0) reg.entries.erase(it);
}

namespace detail {

void PeerAccessTraits::release_or_throw(value_type& v) {
  const Status s = release(v);
  if (!s.ok()) raise(*detail::Access::core(v.from.device()), s.code(), s.api(), peer_text(v.from, v.to));
}

Status PeerAccessTraits::release(value_type& v) noexcept {
  v.held = false;
  if (v.adopted) return {};  // another component's: it stays enabled
  const auto& core = *detail::Access::core(v.from.device());
  // Exit, a forked child, a deinitialised driver, a poisoned context: the access dies with them.
  if (!core.cleanup_allowed_in(v.from.address())) return {};
  auto& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);  // held across the driver call, as in enable()
  const auto it = reg.entries.find(PeerKey{&core, v.from.address(), v.to.address()});
  if (it == reg.entries.end() || it->second.generation != v.generation) {
    // The enablement this owner had ended without it (its context is gone, or
    // another component disabled it), and a later one is not its to end.
    return {};
  }
  if (--it->second.owners > 0) return {};
  reg.entries.erase(it);
  if (core.any_poisoned.load() && core.is_poisoned(v.to.address())) return {};
  try {
    ContextScope scope(core, v.from.address(), "PeerAccess::disable");
    const CUresult r = DRVSHIM_CU(core, cuCtxDisablePeerAccess, native(v.to));
    core.note_result(r);
    if (r != CUDA_SUCCESS) {
      logf(log::Level::warn, "cuCtxDisablePeerAccess {} failed with {} ({})", peer_text(v.from, v.to),
           result_name(static_cast<int>(r)), static_cast<int>(r));
    } else {
      trace::mark("disable-peer-access", peer_text(v.from, v.to));
    }
    return Status("cuCtxDisablePeerAccess", static_cast<int>(r));
  } catch (const Error& e) {
    logf(log::Level::warn, "PeerAccess::disable {}: {}", peer_text(v.from, v.to), e.what());
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  }
}

}  // namespace detail

// ---- copies between two contexts -----------------------------------------------------------------

namespace {

void check_pair(const char* api, const ContextRef& dst_ctx, std::size_t dst_bytes, std::uint64_t dst_id,
                const ContextRef& src_ctx, std::size_t bytes, std::uint64_t src_id, const StreamRef* stream) {
  if (bytes > dst_bytes) {
    throw InvalidArgumentError(api,
                               fmt::format("copying {} into a destination of {}: the source is longer",
                                           bytes_text(bytes), bytes_text(dst_bytes)),
                               "copy a subspan of the source, or allocate a larger destination");
  }
  require_same_driver(api, dst_ctx.device(), src_ctx.device());
  // The stream may be of a third context: the driver names both contexts
  // (or tells them by address) and queues the copy on any stream.
  if (stream != nullptr) require_same_driver(api, dst_ctx.device(), stream->context().device());
  detail::check_view(dst_id, api);
  detail::check_view(src_id, api);
  const auto& core = *detail::Access::core(dst_ctx.device());
  core.check_not_poisoned(src_ctx.address(), api);
  core.check_not_poisoned(dst_ctx.address(), api);
}

CUstream native_stream(const StreamRef* s) noexcept { return reinterpret_cast<CUstream>(s->native()); }

}  // namespace

namespace detail {

namespace {

// The objects of a copy between two contexts, for its error message.
std::string pair_text(std::size_t bytes, DevicePtr src, const ContextRef& src_ctx, DevicePtr dst,
                      const ContextRef& dst_ctx) {
  return fmt::format("{} from 0x{:x} in {} to 0x{:x} in {}", bytes_text(bytes), src, ctx_text(src_ctx), dst,
                     ctx_text(dst_ctx));
}

}  // namespace

void copy_peer(const ContextRef& dst_ctx, DevicePtr dst, std::size_t dst_bytes, std::uint64_t dst_id,
               const ContextRef& src_ctx, DevicePtr src, std::size_t bytes, std::uint64_t src_id,
               const StreamRef* stream) {
  const char* api = stream != nullptr ? "copy_peer_async" : "copy_peer";
  check_pair(api, dst_ctx, dst_bytes, dst_id, src_ctx, bytes, src_id, stream);
  if (bytes == 0) return;
  const auto& core = *detail::Access::core(dst_ctx.device());
  const auto objects = [&] { return pair_text(bytes, src, src_ctx, dst, dst_ctx); };
  if (stream == nullptr) {
    // cuMemcpyPeer is ordered after the work of the current context too
    // (cudaMemcpyPeer documents it for the current device): a context the
    // caller has current stays current; with none, dst's is made current.
    core.require_init(api);
    CUcontext current = nullptr;
    (void)DRVSHIM_CU(core, cuCtxGetCurrent, &current);
    // A current context drvshim saw fault would fail the copy for nothing:
    // dst's is made current instead, as with none.
    std::optional<ContextScope> scope;
    if (current == nullptr || core.is_poisoned(reinterpret_cast<std::uintptr_t>(current))) {
      scope.emplace(core, dst_ctx.address(), api);
    }
    const CUresult r = DRVSHIM_CU(core, cuMemcpyPeer, dst, native(dst_ctx), src, native(src_ctx), bytes);
    if (r != CUDA_SUCCESS) {
      raise_across(core, static_cast<int>(r), "cuMemcpyPeer", objects(), dst_ctx.address(), src_ctx.address());
    }
  } else {
    ContextScope scope(core, stream->context().address(), api);
    const CUresult r =
        DRVSHIM_CU(core, cuMemcpyPeerAsync, dst, native(dst_ctx), src, native(src_ctx), bytes, native_stream(stream));
    if (r != CUDA_SUCCESS) {
      raise_across(core, static_cast<int>(r), "cuMemcpyPeerAsync", objects() + ", " + stream->name(), dst_ctx.address(),
                   src_ctx.address());
    }
    after_submit(core, native_stream(stream), "cuMemcpyPeerAsync", objects);
  }
}

void copy_across_contexts(const ContextRef& dst_ctx, DevicePtr dst, std::size_t dst_bytes, std::uint64_t dst_id,
                          const ContextRef& src_ctx, DevicePtr src, std::size_t bytes, std::uint64_t src_id,
                          const StreamRef* stream) {
  const char* api =
      stream != nullptr ? "copy_async (device to device, two contexts)" : "copy (device to device, two contexts)";
  check_pair(api, dst_ctx, dst_bytes, dst_id, src_ctx, bytes, src_id, stream);
  if (bytes == 0) return;
  // The driver tells the devices apart by address only with unified
  // addressing; without it, an address of one device means nothing in another.
  for (const ContextRef* c : {&dst_ctx, &src_ctx}) {
    const AttributeValue uva = c->device().attribute(DeviceAttribute::unified_addressing);
    if (!uva.is_true()) {
      throw InvalidArgumentError(
          api,
          fmt::format("the copy joins {} and {}, and device {} has no unified addressing (unified_addressing {})",
                      ctx_text(src_ctx), ctx_text(dst_ctx), c->device().ordinal(), uva.to_string()),
          "copy between two contexts with copy_peer / copy_peer_async, which name both contexts");
    }
  }
  const auto& core = *detail::Access::core(dst_ctx.device());
  const auto objects = [&] { return pair_text(bytes, src, src_ctx, dst, dst_ctx); };
  if (stream == nullptr) {
    ContextScope scope(core, dst_ctx.address(), api);
    if (const CUresult r = DRVSHIM_CU(core, cuMemcpyDtoD, dst, src, bytes); r != CUDA_SUCCESS) {
      raise_across(core, static_cast<int>(r), "cuMemcpyDtoD", objects(), dst_ctx.address(), src_ctx.address());
    }
  } else {
    ContextScope scope(core, stream->context().address(), api);
    if (const CUresult r = DRVSHIM_CU(core, cuMemcpyDtoDAsync, dst, src, bytes, native_stream(stream));
        r != CUDA_SUCCESS) {
      raise_across(core, static_cast<int>(r), "cuMemcpyDtoDAsync", objects() + ", " + stream->name(), dst_ctx.address(),
                   src_ctx.address());
    }
    after_submit(core, native_stream(stream), "cuMemcpyDtoDAsync", objects);
  }
}

}  // namespace detail

}  // namespace drvshim
