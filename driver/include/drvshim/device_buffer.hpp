// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file device_buffer.hpp
/// Device memory from cuMemAlloc (DeviceBuffer) and pitched allocations
/// (cuMemAllocPitch).
#include <drvshim/context.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>
#include <drvshim/owning_handle.hpp>

#include <cstddef>
#include <cstdint>
#include <new>

namespace drvshim {

class StreamRef;

struct PitchedAllocation;

namespace detail {
/// DeviceBuffer's ownership traits (owning_handle.hpp).
struct DeviceBufferTraits {
  struct value_type {
    ContextRef context;
    DevicePtr address;
    std::size_t bytes;
    std::uint64_t id;
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

/// Device memory from cuMemAlloc (move-only owner).
class DRVSHIM_API DeviceBuffer {
 public:
  /// cuMemAlloc_v2 in `context`. Throws InvalidArgumentError for 0 bytes,
  /// OutOfMemoryError (with the device's free and total memory) when it does not fit.
  [[nodiscard]] static DeviceBuffer allocate(const ContextRef& context, std::size_t bytes);

  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  explicit operator bool() const noexcept { return handle_.held(); }
  DevicePtr address() const noexcept { return handle_.get().address; }
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

  /// cuMemFree_v2; the owner becomes empty.
  /// Gives the memory up without freeing it and returns its address: the
  /// owner becomes empty, its views dangle, and the memory is the caller's to
  /// free (free_device_memory(), or the driver directly). For memory handed
  /// to code that frees it itself, as the CUDA Runtime's cudaFree does.
  [[nodiscard]] DevicePtr detach() noexcept;
  void free();
  /// The no-throw twin.
  [[nodiscard]] Status free(std::nothrow_t) noexcept;

 private:
  DeviceBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept;
  friend DRVSHIM_API PitchedAllocation allocate_pitched(const ContextRef&, std::size_t, std::size_t, unsigned);
  void check_view_of(std::size_t element_size) const;
  detail::OwningHandle<detail::DeviceBufferTraits> handle_;
};

/// A pitched allocation: `height` rows of `pitch` bytes, each row starting
/// aligned for the device's 2D copies and textures.
struct PitchedAllocation {
  DeviceBuffer buffer;
  std::size_t pitch = 0;
};

/// cuMemAllocPitch: rows of at least `width_bytes`, padded to the pitch the
/// device prefers for elements of `element_bytes` (4, 8 or 16). Throws
/// InvalidArgumentError for a zero width or height or another element size,
/// OutOfMemoryError when it does not fit.
[[nodiscard]] DRVSHIM_API PitchedAllocation allocate_pitched(const ContextRef& context, std::size_t width_bytes,
                                                             std::size_t height, unsigned element_bytes = 4);

/// cuMemFree of device memory drvshim did not allocate (cuMemAlloc, the CUDA
/// Runtime, another library), with `context` current for the call. Throws
/// CudaError as the driver answers (CUDA_ERROR_INVALID_VALUE for an address
/// that is not the start of an allocation).
DRVSHIM_API void free_device_memory(const ContextRef& context, std::uint64_t address);
/// cuMemFreeAsync of device memory drvshim did not allocate, ordered on
/// `stream` (in the stream's context). DriverTooOldError before CUDA 11.2.
DRVSHIM_API void free_device_memory(const StreamRef& stream, std::uint64_t address);

}  // namespace drvshim
