// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file async_device_buffer.hpp
/// Stream-ordered device memory from the device's default pool
/// (cuMemAllocAsync / cuMemFreeAsync).
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
/// AsyncDeviceBuffer's ownership traits (owning_handle.hpp).
struct AsyncDeviceBufferTraits {
  struct value_type {
    StreamRef stream;
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
  /// cuMemFreeAsync on `on`.
  static void release_on(value_type& v, const StreamRef& on);
};
}  // namespace detail

/// Stream-ordered device memory from the device's default pool
/// (cuMemAllocAsync / cuMemFreeAsync; move-only owner). Destruction frees it on
/// the stream it was allocated on, ordered after the work queued there.
class DRVSHIM_API AsyncDeviceBuffer {
 public:
  /// cuMemAllocAsync on `stream`. Throws UnsupportedError when the device's
  /// memory_pools_supported is not 1 or the driver lacks the function.
  [[nodiscard]] static AsyncDeviceBuffer allocate(const StreamRef& stream, std::size_t bytes);

  AsyncDeviceBuffer(AsyncDeviceBuffer&& other) noexcept;
  AsyncDeviceBuffer& operator=(AsyncDeviceBuffer&& other) noexcept;
  AsyncDeviceBuffer(const AsyncDeviceBuffer&) = delete;
  AsyncDeviceBuffer& operator=(const AsyncDeviceBuffer&) = delete;
  ~AsyncDeviceBuffer();

  explicit operator bool() const noexcept { return handle_.held(); }
  DevicePtr address() const noexcept { return handle_.get().address; }
  std::size_t size() const noexcept { return handle_.get().bytes; }
  const StreamRef& stream() const noexcept { return handle_.get().stream; }
  /// A typed view of the whole buffer. Throws InvalidArgumentError when the
  /// size is not a multiple of sizeof(T) or the owner is empty.
  template <class T>
  DeviceSpan<T> as() const {
    check_view_of(sizeof(T));
    const auto& v = handle_.get();
    return DeviceSpan<T>(v.stream.context(), v.address, v.bytes / sizeof(T), v.id);
  }
  /// cuMemFreeAsync on `on` (by default the allocating stream).
  /// Gives the memory up without freeing it and returns its address: the
  /// owner becomes empty, its views dangle, and the memory is the caller's to
  /// free (free_device_memory(), or the driver directly). For memory handed
  /// to code that frees it itself, as the CUDA Runtime's cudaFree does.
  [[nodiscard]] DevicePtr detach() noexcept;
  void free();
  void free(const StreamRef& on);
  [[nodiscard]] Status free(std::nothrow_t) noexcept;

 private:
  AsyncDeviceBuffer(StreamRef stream, DevicePtr address, std::size_t bytes) noexcept;
  void check_view_of(std::size_t element_size) const;
  detail::OwningHandle<detail::AsyncDeviceBufferTraits> handle_;
};

}  // namespace drvshim
