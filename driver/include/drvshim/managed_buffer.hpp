// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file managed_buffer.hpp
/// Managed (unified) memory from cuMemAllocManaged (ManagedBuffer) and the
/// hints that place it: advise() and prefetch_async().
#include <drvshim/context.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>
#include <drvshim/owning_handle.hpp>
#include <drvshim/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <new>

namespace drvshim {

namespace detail {
/// ManagedBuffer's ownership traits (owning_handle.hpp).
struct ManagedBufferTraits {
  struct value_type {
    ContextRef context;
    DevicePtr address;
    std::size_t bytes;
    std::uint64_t id;  // views carry it (checked in debug builds)
  };
  static bool held(const value_type& v) noexcept { return v.address != 0; }
  static void clear(value_type& v) noexcept {
    v.address = 0;
    v.bytes = 0;
  }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};
}  // namespace detail

/// Managed (unified) memory from cuMemAllocManaged (move-only owner),
/// accessible from host and device.
class DRVSHIM_API ManagedBuffer {
 public:
  /// cuMemAllocManaged with `attach` (global: every stream and device; host:
  /// not accessible from devices until attached to a stream). Throws
  /// UnsupportedError when the device's managed_memory attribute is not 1,
  /// InvalidArgumentError for MemoryAttach::single (only streams take it).
  [[nodiscard]] static ManagedBuffer allocate(const ContextRef& context, std::size_t bytes,
                                              MemoryAttach attach = MemoryAttach::global);

  ManagedBuffer(ManagedBuffer&& other) noexcept;
  ManagedBuffer& operator=(ManagedBuffer&& other) noexcept;
  ManagedBuffer(const ManagedBuffer&) = delete;
  ManagedBuffer& operator=(const ManagedBuffer&) = delete;
  ~ManagedBuffer();

  explicit operator bool() const noexcept { return handle_.held(); }
  DevicePtr address() const noexcept { return handle_.get().address; }
  void* data() const noexcept { return reinterpret_cast<void*>(handle_.get().address); }
  std::size_t size() const noexcept { return handle_.get().bytes; }
  const ContextRef& context() const noexcept { return handle_.get().context; }
  /// A typed view of the whole buffer. Throws InvalidArgumentError when the
  /// size is not a multiple of sizeof(T) or the owner is empty.
  template <class T>
  DeviceSpan<T> as() const {
    check_view_of(sizeof(T));
    const auto& v = handle_.get();
    return DeviceSpan<T>(v.context, v.address, v.bytes / sizeof(T), v.id);
  }
  /// Gives the memory up without freeing it and returns its address: the
  /// owner becomes empty, its views dangle, and the memory is the caller's to
  /// free (free_device_memory(), or the driver directly). For memory handed
  /// to code that frees it itself, as the CUDA Runtime's cudaFree does.
  [[nodiscard]] DevicePtr detach() noexcept;
  void free();
  [[nodiscard]] Status free(std::nothrow_t) noexcept;

 private:
  ManagedBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept;
  void check_view_of(std::size_t element_size) const;
  detail::OwningHandle<detail::ManagedBufferTraits> handle_;
};

/// A place memory can live or be accessed from (CUmemLocation).
struct MemoryLocation {
  enum class Type : int { device = 1, host = 2, host_numa = 3, host_numa_current = 4 };
  Type type = Type::device;
  int id = 0;  ///< the device ordinal (or NUMA node) for device / host_numa
};

/// Advice about managed memory (CUmem_advise).
enum class MemoryAdvice : int {
  set_read_mostly = 1,
  unset_read_mostly = 2,
  set_preferred_location = 3,
  unset_preferred_location = 4,
  set_accessed_by = 5,
  unset_accessed_by = 6,
};

/// cuMemAdvise (the CUDA 12.2 form with a location) on managed memory
/// [address, address + bytes). Throws DriverTooOldError without it.
DRVSHIM_API void advise(const ContextRef& context, DevicePtr address, std::size_t bytes, MemoryAdvice advice,
                        MemoryLocation location);

/// cuMemPrefetchAsync (the CUDA 12.2 form) of managed memory to `location`,
/// ordered on `stream`. Throws DriverTooOldError without it.
DRVSHIM_API void prefetch_async(const StreamRef& stream, DevicePtr address, std::size_t bytes, MemoryLocation location);

}  // namespace drvshim
