#pragma once
/// @file device_buffer.hpp
/// Device memory from cuMemAlloc (DeviceBuffer) and pitched allocations
/// (cuMemAllocPitch).
#include <drvshim/context.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>

#include <cstddef>
#include <cstdint>
#include <new>

namespace drvshim {

struct PitchedAllocation;

/// Device memory from cuMemAlloc (move-only owner).
class DRVSHIM_API DeviceBuffer {
 public:
  /// cuMemAlloc_v2 in `context`. Throws InvalidArgumentError for 0 bytes,
  /// OutOfMemoryError (with the device's free and total memory) when it does not fit.
  static DeviceBuffer allocate(const ContextRef& context, std::size_t bytes);

  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  explicit operator bool() const noexcept { return address_ != 0; }
  DevicePtr address() const noexcept { return address_; }
  std::size_t size() const noexcept { return bytes_; }
  const ContextRef& context() const noexcept { return context_; }
  /// A typed view of the whole buffer. Throws InvalidArgumentError when the
  /// size is not a multiple of sizeof(T) or the owner is empty.
  template <class T>
  DeviceSpan<T> as() const {
    check_view_of(sizeof(T));
    return DeviceSpan<T>(context_, address_, bytes_ / sizeof(T), id_);
  }

  /// cuMemFree_v2; the owner becomes empty.
  void free();
  /// The no-throw twin.
  Status free(std::nothrow_t) noexcept;

 private:
  DeviceBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept;
  friend DRVSHIM_API PitchedAllocation allocate_pitched(const ContextRef&, std::size_t, std::size_t, unsigned);
  void check_view_of(std::size_t element_size) const;
  ContextRef context_;
  DevicePtr address_;
  std::size_t bytes_;
  std::uint64_t id_;
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
DRVSHIM_API PitchedAllocation allocate_pitched(const ContextRef& context, std::size_t width_bytes, std::size_t height,
                                               unsigned element_bytes = 4);

}  // namespace drvshim
