// SPDX-License-Identifier: Apache-2.0
#include <drvshim/context.hpp>
#include <drvshim/device.hpp>
#include <drvshim/driver.hpp>

#include "background/background_wait.hpp"
#include "log_internal.hpp"
#include "seam/core.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace {

struct AttributeInfo {
  DeviceAttribute attribute;
  CUdevice_attribute native;
  const char* name;
  int since;  // first driver version that knows the attribute
};

// The public enum mirrors cuda.h; the static_asserts keep them in step.
// One attribute per line, as the toolkit lists them:
// clang-format off
#define DRVSHIM_ATTR(ours, theirs, since) \
  {DeviceAttribute::ours, CU_DEVICE_ATTRIBUTE_##theirs, #ours, since},
constexpr AttributeInfo kAttributes[] = {
    DRVSHIM_ATTR(max_threads_per_block, MAX_THREADS_PER_BLOCK, 2000)
    DRVSHIM_ATTR(max_shared_memory_per_block, MAX_SHARED_MEMORY_PER_BLOCK, 2000)
    DRVSHIM_ATTR(warp_size, WARP_SIZE, 2000)
    DRVSHIM_ATTR(max_registers_per_block, MAX_REGISTERS_PER_BLOCK, 2000)
    DRVSHIM_ATTR(clock_rate_khz, CLOCK_RATE, 2000)
    DRVSHIM_ATTR(multiprocessor_count, MULTIPROCESSOR_COUNT, 2000)
    DRVSHIM_ATTR(integrated, INTEGRATED, 2000)
    DRVSHIM_ATTR(can_map_host_memory, CAN_MAP_HOST_MEMORY, 2020)
    DRVSHIM_ATTR(compute_mode, COMPUTE_MODE, 2020)
    DRVSHIM_ATTR(concurrent_kernels, CONCURRENT_KERNELS, 3000)
    DRVSHIM_ATTR(ecc_enabled, ECC_ENABLED, 3000)
    DRVSHIM_ATTR(pci_bus_id, PCI_BUS_ID, 3000)
    DRVSHIM_ATTR(pci_device_id, PCI_DEVICE_ID, 3000)
    DRVSHIM_ATTR(tcc_driver, TCC_DRIVER, 3000)
    DRVSHIM_ATTR(memory_clock_rate_khz, MEMORY_CLOCK_RATE, 4000)
    DRVSHIM_ATTR(global_memory_bus_width, GLOBAL_MEMORY_BUS_WIDTH, 4000)
    DRVSHIM_ATTR(l2_cache_size, L2_CACHE_SIZE, 4000)
    DRVSHIM_ATTR(max_threads_per_multiprocessor, MAX_THREADS_PER_MULTIPROCESSOR, 4000)
    DRVSHIM_ATTR(async_engine_count, ASYNC_ENGINE_COUNT, 4000)
    DRVSHIM_ATTR(unified_addressing, UNIFIED_ADDRESSING, 4000)
    DRVSHIM_ATTR(pci_domain_id, PCI_DOMAIN_ID, 4000)
    DRVSHIM_ATTR(compute_capability_major, COMPUTE_CAPABILITY_MAJOR, 5000)
    DRVSHIM_ATTR(compute_capability_minor, COMPUTE_CAPABILITY_MINOR, 5000)
    DRVSHIM_ATTR(stream_priorities_supported, STREAM_PRIORITIES_SUPPORTED, 5050)
    DRVSHIM_ATTR(max_shared_memory_per_multiprocessor, MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 6000)
    DRVSHIM_ATTR(managed_memory, MANAGED_MEMORY, 6000)
    DRVSHIM_ATTR(multi_gpu_board, MULTI_GPU_BOARD, 6000)
    DRVSHIM_ATTR(host_native_atomic_supported, HOST_NATIVE_ATOMIC_SUPPORTED, 8000)
    DRVSHIM_ATTR(pageable_memory_access, PAGEABLE_MEMORY_ACCESS, 8000)
    DRVSHIM_ATTR(concurrent_managed_access, CONCURRENT_MANAGED_ACCESS, 8000)
    DRVSHIM_ATTR(can_use_host_pointer_for_registered_mem, CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 9000)
    DRVSHIM_ATTR(cooperative_launch, COOPERATIVE_LAUNCH, 9000)
    DRVSHIM_ATTR(host_register_supported, HOST_REGISTER_SUPPORTED, 9020)
    DRVSHIM_ATTR(pageable_memory_access_uses_host_page_tables, PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 9020)
    DRVSHIM_ATTR(direct_managed_mem_access_from_host, DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 9020)
    DRVSHIM_ATTR(read_only_host_register_supported, READ_ONLY_HOST_REGISTER_SUPPORTED, 11010)
    DRVSHIM_ATTR(memory_pools_supported, MEMORY_POOLS_SUPPORTED, 11020)
    DRVSHIM_ATTR(cluster_launch, CLUSTER_LAUNCH, 11080)
};
// clang-format on
#undef DRVSHIM_ATTR

constexpr bool attributes_match_cuda_h() {
  for (const auto& a : kAttributes) {
    if (static_cast<int>(a.attribute) != static_cast<int>(a.native)) return false;
  }
  return true;
}
static_assert(attributes_match_cuda_h(), "DeviceAttribute values must equal cuda.h's CUdevice_attribute values");

const AttributeInfo& info_of(DeviceAttribute a) noexcept {
  for (const auto& info : kAttributes) {
    if (info.attribute == a) return info;
  }
  return kAttributes[0];  // unreachable: every enumerator is in the table
}

std::string device_objects(const Device& d) { return fmt::format("device {}", d.ordinal()); }

}  // namespace

const char* attribute_name(DeviceAttribute attribute) noexcept { return info_of(attribute).name; }

std::string AttributeValue::to_string() const {
  switch (state_) {
    case State::value: return std::to_string(value_);
    case State::unsupported: return "unsupported";
    case State::unknown: return "unknown";
  }
  return "unknown";
}

std::string HostMappingSummary::verdict() const {
  std::string out;
  if (can_map_host_memory.is_true()) {
    out = unified_addressing.is_true() ? "zero-copy available (host and device pointers identical)"
                                       : "zero-copy available (device pointer differs from host pointer)";
  } else {
    out = fmt::format("zero-copy unavailable (can_map_host_memory {})", can_map_host_memory.to_string());
  }
  if (host_register_supported.is_true()) {
    out += read_only_host_register_supported.is_true() ? "; host registration supported (read-only too)"
                                                       : "; host registration supported";
  } else if (can_map_host_memory.is_true()) {
    out += fmt::format("; host registration unsupported (host_register_supported {}): use mapped pinned allocations",
                       host_register_supported.to_string());
  } else {
    out += fmt::format("; host registration unsupported (host_register_supported {}): copy through pinned buffers",
                       host_register_supported.to_string());
  }
  if (integrated.is_true()) out += "; integrated GPU (shares host memory)";
  if (pageable_memory_access.is_true()) out += "; device can access pageable host memory directly";
  return out;
}

Device Driver::device(int ordinal) const {
  core_->require_init("Driver::device");  // the step missing is the user's call, not device_count's
  const int count = device_count();
  if (ordinal < 0 || ordinal >= count) {
    throw InvalidArgumentError(
        "Driver::device",
        fmt::format("device ordinal {} is out of range: the driver reports {} device(s)", ordinal, count),
        "use an ordinal in [0, device_count()); CUDA_VISIBLE_DEVICES may hide devices");
  }
  CUdevice handle = 0;
  DRVSHIM_TRY(*core_, cuDeviceGet, fmt::format("ordinal {}", ordinal), &handle, ordinal);
  return Device(core_, ordinal, handle);
}

std::vector<Device> Driver::devices() const {
  core_->require_init("Driver::devices");
  const int count = device_count();
  std::vector<Device> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(device(i));
  return out;
}

Device::Device(std::shared_ptr<detail::DriverCore> core, int ordinal, int handle) noexcept
    : core_(std::move(core)), ordinal_(ordinal), handle_(handle) {}

int Device::driver_version() const noexcept { return core_->version; }

std::string Device::name() const {
  core_->require_init("Device::name");
  char buf[256] = {};
  DRVSHIM_TRY(*core_, cuDeviceGetName, device_objects(*this), buf, static_cast<int>(sizeof(buf) - 1), handle_);
  return buf;
}

std::array<std::uint8_t, 16> Device::uuid() const {
  core_->require_init("Device::uuid");
  core_->require_function(detail::Api::k_cuDeviceGetUuid, "Device::uuid");
  CUuuid id{};
  DRVSHIM_TRY(*core_, cuDeviceGetUuid, device_objects(*this), &id, handle_);
  std::array<std::uint8_t, 16> out{};
  std::memcpy(out.data(), id.bytes, out.size());
  return out;
}

std::string Device::uuid_string() const {
  const auto b = uuid();
  return fmt::format(
      "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", b[0],
      b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

std::string Device::pci_bus_id() const {
  core_->require_init("Device::pci_bus_id");
  char buf[64] = {};
  DRVSHIM_TRY(*core_, cuDeviceGetPCIBusId, device_objects(*this), buf, static_cast<int>(sizeof(buf) - 1), handle_);
  return buf;
}

ComputeCapability Device::compute_capability() const {
  const auto major = attribute(DeviceAttribute::compute_capability_major);
  const auto minor = attribute(DeviceAttribute::compute_capability_minor);
  return ComputeCapability{major.value(), minor.value()};
}

std::size_t Device::total_memory() const {
  core_->require_init("Device::total_memory");
  std::size_t bytes = 0;
  DRVSHIM_TRY(*core_, cuDeviceTotalMem, device_objects(*this), &bytes, handle_);
  return bytes;
}

int Device::sm_count() const { return attribute(DeviceAttribute::multiprocessor_count).value(); }

AttributeValue Device::attribute(DeviceAttribute attribute) const {
  core_->require_init("Device::attribute");
  const AttributeInfo& info = info_of(attribute);
  if (core_->version < info.since) return AttributeValue::unknown();
  int value = 0;
  const CUresult r = DRVSHIM_CU(*core_, cuDeviceGetAttribute, &value, info.native, handle_);
  if (r == CUDA_SUCCESS) return AttributeValue::of(value);
  if (r == CUDA_ERROR_NOT_SUPPORTED) return AttributeValue::unsupported();
  if (r == CUDA_ERROR_INVALID_VALUE) return AttributeValue::unknown();
  detail::raise(*core_, static_cast<int>(r), "cuDeviceGetAttribute",
                fmt::format("device {}, attribute {} ({})", ordinal_, info.name, static_cast<int>(info.native)));
}

AttributeValue Device::attribute_number(int number) const {
  core_->require_init("Device::attribute_number");
  int value = 0;
  const CUresult r = DRVSHIM_CU(*core_, cuDeviceGetAttribute, &value, static_cast<CUdevice_attribute>(number), handle_);
  if (r == CUDA_SUCCESS) return AttributeValue::of(value);
  if (r == CUDA_ERROR_NOT_SUPPORTED) return AttributeValue::unsupported();
  if (r == CUDA_ERROR_INVALID_VALUE) return AttributeValue::unknown();
  detail::raise(*core_, static_cast<int>(r), "cuDeviceGetAttribute",
                fmt::format("device {}, attribute {}", ordinal_, number));
}

HostMappingSummary Device::host_mapping() const {
  HostMappingSummary s;
  s.can_map_host_memory = attribute(DeviceAttribute::can_map_host_memory);
  s.unified_addressing = attribute(DeviceAttribute::unified_addressing);
  s.integrated = attribute(DeviceAttribute::integrated);
  s.host_register_supported = attribute(DeviceAttribute::host_register_supported);
  s.read_only_host_register_supported = attribute(DeviceAttribute::read_only_host_register_supported);
  s.can_use_host_pointer_for_registered_mem = attribute(DeviceAttribute::can_use_host_pointer_for_registered_mem);
  s.pageable_memory_access = attribute(DeviceAttribute::pageable_memory_access);
  s.pageable_memory_access_uses_host_page_tables =
      attribute(DeviceAttribute::pageable_memory_access_uses_host_page_tables);
  s.managed_memory = attribute(DeviceAttribute::managed_memory);
  s.concurrent_managed_access = attribute(DeviceAttribute::concurrent_managed_access);
  s.memory_pools_supported = attribute(DeviceAttribute::memory_pools_supported);
  s.host_native_atomic_supported = attribute(DeviceAttribute::host_native_atomic_supported);
  return s;
}

bool Device::can_access_peer(const Device& peer) const {
  core_->require_init("Device::can_access_peer");
  int can = 0;
  DRVSHIM_TRY(*core_, cuDeviceCanAccessPeer, fmt::format("device {} to peer {}", ordinal_, peer.ordinal()), &can,
              handle_, peer.native());
  return can != 0;
}

PrimaryContextState Device::primary_context_state() const {
  core_->require_init("Device::primary_context_state");
  unsigned flags = 0;
  int active = 0;
  DRVSHIM_TRY(*core_, cuDevicePrimaryCtxGetState, device_objects(*this), handle_, &flags, &active);
  return PrimaryContextState{static_cast<ContextFlags>(flags), active != 0};
}

void Device::set_primary_context_flags(ContextFlags flags) const {
  const PrimaryContextState state = primary_context_state();
  if (state.active) {
    if (state.flags == flags) return;
    throw ContextStateError(
        "cuDevicePrimaryCtxSetFlags",
        fmt::format("the primary context of device {} is already active with flags {}; drvshim refuses to change "
                    "them to {} after activation",
                    ordinal_, to_string(state.flags), to_string(flags)),
        ErrorDetails{{},
                     0,
                     device_objects(*this),
                     "another component (such as the CUDA Runtime, or an earlier retain) activated it first: set the "
                     "flags before anything retains the primary context, or create a non-primary context "
                     "(Device::create_context) with the flags you need",
                     false});
  }
  DRVSHIM_TRY(*core_, cuDevicePrimaryCtxSetFlags, fmt::format("device {}, flags {}", ordinal_, to_string(flags)),
              handle_, static_cast<unsigned>(flags));
  trace::mark("set-primary-context-flags", fmt::format("device {}: {}", ordinal_, to_string(flags)));
}

void Device::change_primary_context_flags(ContextFlags flags) const {
  const PrimaryContextState state = primary_context_state();
  DRVSHIM_TRY(*core_, cuDevicePrimaryCtxSetFlags, fmt::format("device {}, flags {}", ordinal_, to_string(flags)),
              handle_, static_cast<unsigned>(flags));
  trace::mark("set-primary-context-flags", fmt::format("device {}: {}{}", ordinal_, to_string(flags),
                                                       state.active ? " (the context is active)" : ""));
}

PrimaryContext Device::retain_primary_context() const {
  // A BackgroundInit retaining this context: wait for it (its error is thrown once), then retain again.
  detail::wait_for_background_retain(*core_, ordinal_, "Device::retain_primary_context");
  const PrimaryContextState before = primary_context_state();
  CUcontext ctx = nullptr;
  DRVSHIM_TRY(*core_, cuDevicePrimaryCtxRetain, device_objects(*this), &ctx, handle_);
  // Active before this retain: another component activated it, or drvshim's own
  // earlier retain did (then this is not an adoption, unless that retain was one).
  bool adopted = false;
  std::uint64_t own_outstanding = 0;
  {
    std::lock_guard<std::mutex> lock(core_->ledger_mutex);
    auto& ledger = core_->ledgers[ordinal_];
    own_outstanding = ledger.retains - ledger.releases;
    if (before.active) {
      adopted = own_outstanding == 0 ? true : ledger.activation_adopted;
    }
    if (own_outstanding == 0) ledger.activation_adopted = adopted;
    ++ledger.retains;
  }
  const auto address = reinterpret_cast<std::uintptr_t>(ctx);
  {
    std::lock_guard<std::mutex> lock(core_->ledger_mutex);
    core_->ledgers[ordinal_].address = address;
  }
  // A fresh activation is a fresh context, whatever happened at this address before.
  if (!before.active) core_->forget_poison(address);
  if (before.active && own_outstanding != 0) {
    detail::logf(log::Level::debug, "device {}: primary context 0x{:x} retained again (drvshim holds {} retain(s); {})",
                 ordinal_, address, own_outstanding,
                 adopted ? "another component activated it" : "drvshim activated it");
    trace::mark("retain-primary-context",
                fmt::format("device {}, context 0x{:x}, already retained by drvshim ({} outstanding), {}", ordinal_,
                            address, own_outstanding, adopted ? "adopted" : "activated by drvshim"));
  } else if (before.active) {
    detail::logf(log::Level::info,
                 "device {}: primary context 0x{:x} was already active (flags {}): another component activated it; "
                 "drvshim adopts it",
                 ordinal_, address, to_string(before.flags));
    trace::mark("adopt-primary-context", fmt::format("device {}, context 0x{:x}, flags {}, already active", ordinal_,
                                                     address, to_string(before.flags)));
  } else {
    trace::mark("activate-primary-context",
                fmt::format("device {}, context 0x{:x}, flags {}", ordinal_, address, to_string(before.flags)));
  }
  return PrimaryContext(*this, address, adopted);
}

void Device::reset_primary_context() const {
  core_->require_init("Device::reset_primary_context");  // no poison check: this is the way out of one
  DRVSHIM_TRY(*core_, cuDevicePrimaryCtxReset, device_objects(*this), handle_);
  std::uintptr_t address = 0;
  {
    std::lock_guard<std::mutex> lock(core_->ledger_mutex);
    if (const auto it = core_->ledgers.find(ordinal_); it != core_->ledgers.end()) address = it->second.address;
  }
  if (address != 0) core_->forget_poison(address);
  trace::mark("reset-primary-context", fmt::format("device {}, context 0x{:x}", ordinal_, address));
  detail::logf(log::Level::info, "device {}: primary context reset (cuDevicePrimaryCtxReset)", ordinal_);
}

PrimaryContextLedger Device::primary_context_ledger() const {
  std::lock_guard<std::mutex> lock(core_->ledger_mutex);
  const auto it = core_->ledgers.find(ordinal_);
  if (it == core_->ledgers.end()) return {};
  return PrimaryContextLedger{it->second.retains, it->second.releases};
}

Context Device::create_context(ContextFlags flags) const {
  core_->require_init("Device::create_context");
  CUcontext ctx = nullptr;
  const std::string objects = fmt::format("device {}, flags {}", ordinal_, to_string(flags));
  if (core_->has(detail::Api::k_cuCtxCreate)) {
    DRVSHIM_TRY(*core_, cuCtxCreate, objects, &ctx, nullptr, static_cast<unsigned>(flags), handle_);
  } else {
    DRVSHIM_TRY(*core_, cuCtxCreateLegacy, objects, &ctx, static_cast<unsigned>(flags), handle_);
  }
  Context owner(*this, reinterpret_cast<std::uintptr_t>(ctx));
  // The driver made the new context current; undo that so the caller's stack is unchanged.
  CUcontext popped = nullptr;
  DRVSHIM_TRY(*core_, cuCtxPopCurrent, objects, &popped);
  trace::mark("create-context", fmt::format("device {}, context 0x{:x}, flags {}", ordinal_,
                                            reinterpret_cast<std::uintptr_t>(ctx), to_string(flags)));
  return owner;
}

}  // namespace drvshim
