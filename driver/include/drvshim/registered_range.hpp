// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file registered_range.hpp
/// Existing host memory page-locked with cuMemHostRegister (RegisteredRange),
/// with the device's capability checked first.
#include <drvshim/context.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>
#include <drvshim/memory_flags.hpp>
#include <drvshim/owning_handle.hpp>

#include <cstddef>
#include <cstdint>
#include <new>

namespace drvshim {

namespace detail {
/// RegisteredRange's ownership traits (owning_handle.hpp).
struct RegisteredRangeTraits {
  struct value_type {
    ContextRef context;
    void* data;
    std::size_t bytes;
    HostRegisterFlags flags;
    std::uint64_t id;  // for the view checks: views of an unregistered range are refused
  };
  static bool held(const value_type& v) noexcept { return v.data != nullptr; }
  static void clear(value_type& v) noexcept {
    v.data = nullptr;
    v.bytes = 0;
  }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};
}  // namespace detail

/// Existing host memory page-locked with cuMemHostRegister (move-only owner;
/// unregisters on destruction). The memory itself stays the caller's.
class DRVSHIM_API RegisteredRange {
 public:
  /// Checks host_register_supported (and read_only_host_register_supported for
  /// READ_ONLY) on the context's device, then cuMemHostRegister_v2. Where
  /// registration is unsupported (a Jetson TX1, for one) throws
  /// UnsupportedError naming the device, the attribute and the way out (a
  /// mapped pinned allocation, MappedBuffer). Throws InvalidArgumentError for a
  /// null pointer or 0 bytes; CudaError for what the driver refuses
  /// (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED for overlapping ranges).
  [[nodiscard]] static RegisteredRange register_range(const ContextRef& context, void* data, std::size_t bytes,
                                                      HostRegisterFlags flags = HostRegisterFlags::none);

  RegisteredRange(RegisteredRange&& other) noexcept;
  RegisteredRange& operator=(RegisteredRange&& other) noexcept;
  RegisteredRange(const RegisteredRange&) = delete;
  RegisteredRange& operator=(const RegisteredRange&) = delete;
  ~RegisteredRange();

  explicit operator bool() const noexcept { return handle_.held(); }
  void* data() const noexcept { return handle_.get().data; }
  std::size_t size() const noexcept { return handle_.get().bytes; }
  HostRegisterFlags flags() const noexcept { return handle_.get().flags; }
  /// The device address (cuMemHostGetDevicePointer). Throws InvalidArgumentError
  /// unless registered with DEVICEMAP or on a device with unified addressing.
  DevicePtr device_address() const;
  /// The context the range was registered in (still named once the range is
  /// empty, as the other owners' contexts are).
  const ContextRef& context() const noexcept { return handle_.get().context; }
  /// A typed device view of the range (at device_address()), for kernels and
  /// copies. Throws InvalidArgumentError when the range is empty, its size is
  /// not a multiple of sizeof(T) or its start is not aligned for T, and as
  /// device_address() does. The view does not keep the registration: views
  /// used after it ended are refused where view checks are on (Debug builds,
  /// DRVSHIM_CHECK_VIEWS), as views of a freed buffer are.
  template <class T>
  DeviceSpan<T> device_as() const {
    const DevicePtr address = device_view_address(sizeof(T), alignof(T));
    return DeviceSpan<T>(context(), address, size() / sizeof(T), handle_.get().id);
  }

  /// cuMemHostUnregister; the owner becomes empty.
  /// Gives the registration up without undoing it and returns the range's
  /// start: the owner becomes empty and the range is the caller's to
  /// unregister (unregister_host_memory(), or cuMemHostUnregister).
  [[nodiscard]] void* detach() noexcept;
  void unregister();
  [[nodiscard]] Status unregister(std::nothrow_t) noexcept;

 private:
  RegisteredRange(ContextRef context, void* data, std::size_t bytes, HostRegisterFlags flags) noexcept;
  DevicePtr device_view_address(std::size_t element_size, std::size_t alignment) const;
  detail::OwningHandle<detail::RegisteredRangeTraits> handle_;
};

/// cuMemHostUnregister of memory registered elsewhere (by another library,
/// say). Returns the driver's result: CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
/// (713) for memory that is not registered.
[[nodiscard]] DRVSHIM_API Status unregister_host_range(const ContextRef& context, void* data) noexcept;

/// cuMemHostUnregister of a range drvshim did not register (cuMemHostRegister,
/// another library), with `context` current for the call. Throws CudaError as
/// the driver answers (CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED).
DRVSHIM_API void unregister_host_memory(const ContextRef& context, void* host);

}  // namespace drvshim
