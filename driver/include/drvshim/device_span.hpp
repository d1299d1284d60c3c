// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file device_span.hpp
/// A typed, non-owning view of device memory (DeviceSpan), the device address
/// type, and whether this build checks views against their owners.
///
/// A view must not outlive its owner: debug builds of libdrvshim refuse such
/// a view before the driver sees it (view_checks_enabled()); in release
/// builds its use is undefined.
#include <drvshim/context.hpp>
#include <drvshim/export.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace drvshim {

/// A device address (CUdeviceptr).
using DevicePtr = std::uint64_t;

/// Whether this build of libdrvshim checks views against their owners
/// (debug builds: CMAKE_BUILD_TYPE=Debug or DRVSHIM_CHECK_VIEWS).
DRVSHIM_API bool view_checks_enabled() noexcept;

namespace detail {
DRVSHIM_API void check_view(std::uint64_t id, const char* api);
[[noreturn]] DRVSHIM_API void throw_subspan(std::size_t offset, std::size_t count, std::size_t size);
}  // namespace detail

/// A typed, non-owning view of device memory: context, address, element
/// count. Cheap to copy; valid while the owner lives.
template <class T>
class DeviceSpan {
  static_assert(std::is_trivially_copyable_v<T>, "device memory holds trivially copyable types");

 public:
  DeviceSpan(ContextRef context, DevicePtr address, std::size_t count, std::uint64_t owner_id) noexcept
      : context_(std::move(context)), address_(address), count_(count), owner_id_(owner_id) {}
  /// A view of const elements. A template constrained to non-const T, so
  /// DeviceSpan<const T> declares no conversion to itself (nvcc warning #554).
  template <class U = T>
  requires(std::is_same_v<U, T> && !std::is_const_v<U>) operator DeviceSpan<const U>() const noexcept {
    return {context_, address_, count_, owner_id_};
  }

  DevicePtr address() const noexcept { return address_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t size_bytes() const noexcept { return count_ * sizeof(T); }
  bool empty() const noexcept { return count_ == 0; }
  const ContextRef& context() const noexcept { return context_; }
  std::uint64_t owner_id() const noexcept { return owner_id_; }

  /// Elements [offset, offset + count). Throws InvalidArgumentError when the
  /// range is not inside this view.
  DeviceSpan subspan(std::size_t offset, std::size_t count) const {
    if (offset > count_ || count > count_ - offset) detail::throw_subspan(offset, count, count_);
    return DeviceSpan(context_, address_ + offset * sizeof(T), count, owner_id_);
  }

  /// The same memory (context, address, element count) of the same owner.
  friend bool operator==(const DeviceSpan&, const DeviceSpan&) = default;

 private:
  ContextRef context_;
  DevicePtr address_;
  std::size_t count_;
  std::uint64_t owner_id_;
};

}  // namespace drvshim
