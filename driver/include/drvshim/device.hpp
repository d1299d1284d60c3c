// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file device.hpp
/// Devices: identity, attributes as tri-state values, the host-mapping
/// capability summary, and the primary context's state and flags.
#include <drvshim/export.hpp>
#include <drvshim/flags.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace drvshim {

namespace detail {
struct DriverCore;
struct Access;  // the library's own door to private members (internal, not part of the API)
}  // namespace detail

class PrimaryContext;
class Context;

/// Device attributes drvshim reads by name. The values are the driver's
/// CUdevice_attribute numbers (checked against cuda.h when drvshim is built).
enum class DeviceAttribute : int {
  max_threads_per_block = 1,
  max_shared_memory_per_block = 8,
  warp_size = 10,
  max_registers_per_block = 12,
  clock_rate_khz = 13,
  multiprocessor_count = 16,
  integrated = 18,
  can_map_host_memory = 19,
  compute_mode = 20,
  concurrent_kernels = 31,
  ecc_enabled = 32,
  pci_bus_id = 33,
  pci_device_id = 34,
  tcc_driver = 35,
  memory_clock_rate_khz = 36,
  global_memory_bus_width = 37,
  l2_cache_size = 38,
  max_threads_per_multiprocessor = 39,
  async_engine_count = 40,
  unified_addressing = 41,
  pci_domain_id = 50,
  compute_capability_major = 75,
  compute_capability_minor = 76,
  stream_priorities_supported = 78,
  max_shared_memory_per_multiprocessor = 81,
  managed_memory = 83,
  multi_gpu_board = 84,
  host_native_atomic_supported = 86,
  pageable_memory_access = 88,
  concurrent_managed_access = 89,
  can_use_host_pointer_for_registered_mem = 91,
  cooperative_launch = 95,
  host_register_supported = 99,
  pageable_memory_access_uses_host_page_tables = 100,
  direct_managed_mem_access_from_host = 101,
  read_only_host_register_supported = 113,
  memory_pools_supported = 115,
  cluster_launch = 120,
};

/// The snake_case name of an attribute ("host_register_supported").
DRVSHIM_API const char* attribute_name(DeviceAttribute attribute) noexcept;

/// An attribute read as a tri-state: a value, unsupported by this device
/// (the driver answered CUDA_ERROR_NOT_SUPPORTED), or unknown to this driver
/// (older than the attribute, or it answered CUDA_ERROR_INVALID_VALUE).
class DRVSHIM_API AttributeValue {
 public:
  enum class State { value, unsupported, unknown };

  static AttributeValue of(int v) noexcept { return AttributeValue(State::value, v); }
  static AttributeValue unsupported() noexcept { return AttributeValue(State::unsupported, 0); }
  static AttributeValue unknown() noexcept { return AttributeValue(State::unknown, 0); }

  State state() const noexcept { return state_; }
  bool has_value() const noexcept { return state_ == State::value; }
  /// The value; 0 unless has_value().
  int value() const noexcept { return value_; }
  /// True only for a known, non-zero value.
  bool is_true() const noexcept { return has_value() && value_ != 0; }
  /// "1", "unsupported" or "unknown".
  std::string to_string() const;
  friend bool operator==(const AttributeValue&, const AttributeValue&) = default;

 private:
  AttributeValue(State s, int v) noexcept : state_(s), value_(v) {}
  State state_;
  int value_;
};

/// The attributes that decide which host-memory mappings work on a device
/// (docs/getting-started.md, "Zero-copy memory", shows the choice they
/// decide), and a plain-words verdict.
struct DRVSHIM_API HostMappingSummary {
  AttributeValue can_map_host_memory = AttributeValue::unknown();
  AttributeValue unified_addressing = AttributeValue::unknown();
  AttributeValue integrated = AttributeValue::unknown();
  AttributeValue host_register_supported = AttributeValue::unknown();
  AttributeValue read_only_host_register_supported = AttributeValue::unknown();
  AttributeValue can_use_host_pointer_for_registered_mem = AttributeValue::unknown();
  AttributeValue pageable_memory_access = AttributeValue::unknown();
  AttributeValue pageable_memory_access_uses_host_page_tables = AttributeValue::unknown();
  AttributeValue managed_memory = AttributeValue::unknown();
  AttributeValue concurrent_managed_access = AttributeValue::unknown();
  AttributeValue memory_pools_supported = AttributeValue::unknown();
  AttributeValue host_native_atomic_supported = AttributeValue::unknown();

  /// Whether mapped (zero-copy) pinned allocations work: can_map_host_memory.
  bool zero_copy() const noexcept { return can_map_host_memory.is_true(); }
  /// Whether cuMemHostRegister can be tried: host_register_supported.
  bool host_register() const noexcept { return host_register_supported.is_true(); }
  /// One sentence, e.g. "zero-copy available; host registration unsupported:
  /// use mapped pinned allocations".
  std::string verdict() const;
};

/// Compute capability.
struct ComputeCapability {
  int major = 0;
  int minor = 0;
  friend bool operator==(const ComputeCapability&, const ComputeCapability&) = default;
};

/// Flags of a context (CU_CTX_*): scheduling policy and options.
enum class ContextFlags : unsigned {
  sched_auto = 0x00,
  sched_spin = 0x01,
  sched_yield = 0x02,
  sched_blocking_sync = 0x04,
  map_host = 0x08,
  lmem_resize_to_max = 0x10,
  coredump_enable = 0x20,
  user_coredump_enable = 0x40,
  sync_memops = 0x80,
};
/// to_string() names the scheduling field even when it is empty:
/// "sched_auto|map_host", "sched_blocking_sync", "sched_auto".
template <>
struct FlagTraits<ContextFlags> {
  static constexpr FlagName names[] = {
      {0x01, "sched_spin"},         {0x02, "sched_yield"},     {0x04, "sched_blocking_sync"},  {0x08, "map_host"},
      {0x10, "lmem_resize_to_max"}, {0x20, "coredump_enable"}, {0x40, "user_coredump_enable"}, {0x80, "sync_memops"}};
  static constexpr unsigned zero_mask = 0x07;  // the scheduling policy
  static constexpr const char* zero_name = "sched_auto";
};

/// The primary context's state, as cuDevicePrimaryCtxGetState reports it;
/// reading it never creates the context.
struct PrimaryContextState {
  ContextFlags flags = ContextFlags::sched_auto;
  bool active = false;
};

/// drvshim's own retains and releases of one device's primary context (other
/// components, such as the CUDA Runtime, are not counted).
struct PrimaryContextLedger {
  std::uint64_t retains = 0;
  std::uint64_t releases = 0;
  std::uint64_t outstanding() const noexcept { return retains - releases; }
};

/// A device: a cheap, copyable view (ordinal and driver handle) that keeps the
/// driver loaded. Obtained from Driver::device() after Driver::init().
class DRVSHIM_API Device {
 public:
  /// The ordinal (0-based).
  int ordinal() const noexcept { return ordinal_; }
  /// The driver's CUdevice handle.
  int native() const noexcept { return handle_; }
  /// The CUDA version of the driver this device was obtained from, as
  /// cuDriverGetVersion reported it when drvshim loaded it (1000*major +
  /// 10*minor; Driver::version() of that driver).
  int driver_version() const noexcept;

  /// cuDeviceGetName.
  std::string name() const;
  /// cuDeviceGetUuid_v2: 16 bytes. Throws DriverTooOldError without the function.
  std::array<std::uint8_t, 16> uuid() const;
  /// The UUID as nvidia-smi prints it: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
  std::string uuid_string() const;
  /// cuDeviceGetPCIBusId: "0000:3b:00.0".
  std::string pci_bus_id() const;
  /// From the compute-capability attributes.
  ComputeCapability compute_capability() const;
  /// cuDeviceTotalMem_v2, in bytes.
  std::size_t total_memory() const;
  /// The multiprocessor count.
  int sm_count() const;

  /// Reads one attribute as a tri-state (never throws for "unsupported" or
  /// "unknown"; throws CudaError for other failures, such as an invalid device).
  AttributeValue attribute(DeviceAttribute attribute) const;
  /// Reads any attribute by its CUdevice_attribute number (the CUDA Runtime's
  /// cudaDeviceAttr uses the same numbers), including those DeviceAttribute
  /// does not name; the same tri-state as attribute().
  AttributeValue attribute_number(int cu_device_attribute) const;
  /// The host-mapping summary (12 attribute reads).
  HostMappingSummary host_mapping() const;
  /// Whether this device can access `peer`'s memory directly (cuDeviceCanAccessPeer).
  bool can_access_peer(const Device& peer) const;

  /// cuDevicePrimaryCtxGetState: flags and whether the primary context is
  /// active, without creating or retaining it.
  PrimaryContextState primary_context_state() const;
  /// Sets the primary context's flags (cuDevicePrimaryCtxSetFlags_v2), only
  /// before it is active. Throws ContextStateError if it is already active
  /// with other flags (another component, such as the CUDA Runtime, activated
  /// it first); setting the flags it already has is a no-op.
  void set_primary_context_flags(ContextFlags flags) const;
  /// Sets the primary context's flags (cuDevicePrimaryCtxSetFlags_v2) whether
  /// it is active or not, as the CUDA Runtime's cudaSetDeviceFlags does (on
  /// the H200 with driver 580 the new scheduling policy shows at once in
  /// cuDevicePrimaryCtxGetState). Every other user of the active context sees
  /// the change: prefer set_primary_context_flags. Throws CudaError when the
  /// driver refuses the flags.
  void change_primary_context_flags(ContextFlags flags) const;
  /// Retains the primary context (cuDevicePrimaryCtxRetain), activating it if
  /// needed. Logs, and marks in the trace, when it was already active:
  /// adopt-primary-context when another component activated it,
  /// retain-primary-context when drvshim already holds a retain of it.
  [[nodiscard]] PrimaryContext retain_primary_context() const;
  /// drvshim's retains and releases of this device's primary context.
  PrimaryContextLedger primary_context_ledger() const;
  /// cuDevicePrimaryCtxReset: destroys the primary context and everything in
  /// it (for every component of the process, the CUDA Runtime included), and
  /// leaves it inactive; retains are not released. Destroy (or leak) every
  /// object made in the context first: their handles die with it, and
  /// destroying one afterwards hands the driver a dead handle (on the H200 a
  /// child that did so crashed). Not a way out of a sticky error: CUDA keeps
  /// that for the process (H200, driver 580: a retain after the reset fails
  /// with the same error). Allowed on a poisoned context; throws CudaError on
  /// failure.
  void reset_primary_context() const;

  /// Creates a new, non-primary context with the driver's current create call
  /// (cuCtxCreate_v4 where present, else cuCtxCreate_v2). It becomes current on
  /// the calling thread as the driver does, and drvshim pops it again so the
  /// caller's context stack is unchanged.
  [[nodiscard]] Context create_context(ContextFlags flags = ContextFlags::sched_auto) const;

  /// The same device of the same Driver.
  friend bool operator==(const Device&, const Device&) = default;

 private:
  friend struct detail::Access;
  friend class Driver;
  Device(std::shared_ptr<detail::DriverCore> core, int ordinal, int handle) noexcept;
  std::shared_ptr<detail::DriverCore> core_;
  int ordinal_;
  int handle_;
};

}  // namespace drvshim
