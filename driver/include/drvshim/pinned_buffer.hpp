// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file pinned_buffer.hpp
/// Page-locked host memory from cuMemHostAlloc (PinnedBuffer), and mapped
/// zero-copy memory allocated with DEVICEMAP that kernels read through its
/// device address (MappedBuffer).
#include <drvshim/context.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>
#include <drvshim/memory_flags.hpp>
#include <drvshim/owning_handle.hpp>

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>

namespace drvshim {

namespace detail {
/// PinnedBuffer's ownership traits (owning_handle.hpp).
struct PinnedBufferTraits {
  struct value_type {
    ContextRef context;
    void* data;
    std::size_t bytes;
    HostAllocFlags flags;
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

/// Page-locked host memory from cuMemHostAlloc (move-only owner).
class DRVSHIM_API PinnedBuffer {
 public:
  /// cuMemHostAlloc. Throws InvalidArgumentError for 0 bytes or unknown flag
  /// bits, OutOfMemoryError when the host cannot pin that much.
  [[nodiscard]] static PinnedBuffer allocate(const ContextRef& context, std::size_t bytes,
                                             HostAllocFlags flags = HostAllocFlags::none);

  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  explicit operator bool() const noexcept { return handle_.held(); }
  void* data() const noexcept { return handle_.get().data; }
  std::size_t size() const noexcept { return handle_.get().bytes; }
  HostAllocFlags flags() const noexcept { return handle_.get().flags; }
  const ContextRef& context() const noexcept { return handle_.get().context; }
  /// The memory as a typed host span (size must be a multiple of sizeof(T)).
  template <class T>
  std::span<T> as() const {
    check_view_of(sizeof(T));
    return std::span<T>(static_cast<T*>(data()), size() / sizeof(T));
  }

  /// cuMemFreeHost; the owner becomes empty.
  /// Gives the memory up without freeing it and returns it: the owner becomes
  /// empty and the memory is the caller's to free (free_host_memory(), or
  /// cuMemFreeHost).
  [[nodiscard]] void* detach() noexcept;
  void free();
  [[nodiscard]] Status free(std::nothrow_t) noexcept;

 protected:
  PinnedBuffer(ContextRef context, void* data, std::size_t bytes, HostAllocFlags flags) noexcept;
  void check_view_of(std::size_t element_size) const;

 private:
  detail::OwningHandle<detail::PinnedBufferTraits> handle_;
};

/// Mapped (zero-copy) host memory: a pinned allocation made with DEVICEMAP,
/// readable by kernels through its device address (move-only owner).
class DRVSHIM_API MappedBuffer : public PinnedBuffer {
 public:
  /// cuMemHostAlloc with DEVICEMAP (plus `extra` flags), then
  /// cuMemHostGetDevicePointer. Throws UnsupportedError, before allocating,
  /// when the device's can_map_host_memory is not 1.
  [[nodiscard]] static MappedBuffer allocate(const ContextRef& context, std::size_t bytes,
                                             HostAllocFlags extra = HostAllocFlags::none);

  /// The device address of the memory; 0 once freed or moved from (the
  /// address died with the allocation).
  DevicePtr device_address() const noexcept { return data() != nullptr ? device_ : DevicePtr{0}; }
  /// Whether host and device addresses are identical (unified addressing).
  bool pointers_identical() const noexcept {
    return data() != nullptr && device_ == reinterpret_cast<std::uintptr_t>(data());
  }
  /// A typed device view, for kernels and copies.
  template <class T>
  DeviceSpan<T> device_as() const {
    check_view_of(sizeof(T));
    return DeviceSpan<T>(context(), device_, size() / sizeof(T), 0);
  }

 private:
  MappedBuffer(PinnedBuffer&& pinned, DevicePtr device) noexcept;
  DevicePtr device_;
};

/// cuMemHostGetFlags: the flags of page-locked memory from cuMemHostAlloc as
/// the driver reports them (on unified-addressing systems it may add
/// device_map / portable to what was asked for). Throws CudaError
/// (CUDA_ERROR_INVALID_VALUE) for other memory.
DRVSHIM_API unsigned host_allocation_flags(const ContextRef& context, const void* host);

/// cuMemFreeHost of page-locked memory drvshim did not allocate
/// (cuMemHostAlloc, another library), with `context` current for the call.
/// Throws CudaError as the driver answers (CUDA_ERROR_INVALID_VALUE for memory
/// that is not such an allocation).
DRVSHIM_API void free_host_memory(const ContextRef& context, void* host);
}  // namespace drvshim
