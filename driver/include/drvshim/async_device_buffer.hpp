#pragma once
/// @file async_device_buffer.hpp
/// Stream-ordered device memory from the device's default pool
/// (cuMemAllocAsync / cuMemFreeAsync).
#include <drvshim/device_span.hpp>
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>
#include <drvshim/stream.hpp>

#include <cstddef>
#include <new>

namespace drvshim {

/// Stream-ordered device memory from the device's default pool
/// (cuMemAllocAsync / cuMemFreeAsync; move-only owner). Destruction frees it on
/// the stream it was allocated on, ordered after the work queued there.
class DRVSHIM_API AsyncDeviceBuffer {
 public:
  /// cuMemAllocAsync on `stream`. Throws UnsupportedError when the device's
  /// memory_pools_supported is not 1 or the driver lacks the function.
  static AsyncDeviceBuffer allocate(const StreamRef& stream, std::size_t bytes);

  AsyncDeviceBuffer(AsyncDeviceBuffer&& other) noexcept;
  AsyncDeviceBuffer& operator=(AsyncDeviceBuffer&& other) noexcept;
  AsyncDeviceBuffer(const AsyncDeviceBuffer&) = delete;
  AsyncDeviceBuffer& operator=(const AsyncDeviceBuffer&) = delete;
  ~AsyncDeviceBuffer();

  explicit operator bool() const noexcept { return address_ != 0; }
  DevicePtr address() const noexcept { return address_; }
  std::size_t size() const noexcept { return bytes_; }
  const StreamRef& stream() const noexcept { return stream_; }
  template <class T>
  DeviceSpan<T> as() const {
    return DeviceSpan<T>(stream_.context(), address_, bytes_ / sizeof(T), 0);
  }
  /// cuMemFreeAsync on `on` (by default the allocating stream).
  void free();
  void free(const StreamRef& on);
  Status free(std::nothrow_t) noexcept;

 private:
  AsyncDeviceBuffer(StreamRef stream, DevicePtr address, std::size_t bytes) noexcept;
  StreamRef stream_;
  DevicePtr address_;
  std::size_t bytes_;
};

}  // namespace drvshim
