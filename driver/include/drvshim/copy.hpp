// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file copy.hpp
/// Copies and fills of device memory, synchronous and on a stream: typed
/// (between DeviceSpans and host spans) and 2D (pitched rows).
///
/// Synchronous forms return when the copy is complete (cuMemcpy*).
/// Asynchronous forms queue it on `stream` (cuMemcpy*Async): the host memory
/// must stay valid and unchanged until the stream reaches the copy; it is
/// truly asynchronous only for page-locked host memory. Every operation makes
/// the memory's context current for the call (the context policy, context.hpp).
#include <drvshim/context.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/export.hpp>
#include <drvshim/stream.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>

namespace drvshim {

namespace detail {
// The untyped operations behind the typed templates below. `stream` is null
// for the synchronous forms.
DRVSHIM_API void copy_to_device(const ContextRef& ctx, DevicePtr dst, std::size_t dst_bytes, std::uint64_t dst_id,
                                const void* src, std::size_t bytes, const StreamRef* stream);
DRVSHIM_API void copy_to_host(const ContextRef& ctx, void* dst, std::size_t dst_bytes, DevicePtr src, std::size_t bytes,
                              std::uint64_t src_id, const StreamRef* stream);
DRVSHIM_API void copy_device_to_device(const ContextRef& ctx, DevicePtr dst, std::size_t dst_bytes,
                                       std::uint64_t dst_id, DevicePtr src, std::size_t bytes, std::uint64_t src_id,
                                       const StreamRef* stream);
// Device to device between two contexts (usually two devices) through
// unified addressing; the peer copies' counterpart (copy_peer, peer.hpp).
DRVSHIM_API void copy_across_contexts(const ContextRef& dst_ctx, DevicePtr dst, std::size_t dst_bytes,
                                      std::uint64_t dst_id, const ContextRef& src_ctx, DevicePtr src, std::size_t bytes,
                                      std::uint64_t src_id, const StreamRef* stream);
DRVSHIM_API void fill_device(const ContextRef& ctx, DevicePtr dst, std::size_t count, std::size_t element_size,
                             std::uint32_t pattern, std::uint64_t id, const StreamRef* stream);
}  // namespace detail

// ---- typed copies and fills -------------------------------------------------------------
// Each copies src.size() elements and throws InvalidArgumentError, before
// calling the driver, when dst is smaller. The element type comes from the
// destination; the source may be a view of const or mutable elements: a
// DeviceSpan<T> or DeviceSpan<const T>, and on the host any contiguous range
// of T (std::span of either constness, std::vector, std::array, a C array, a
// PinnedBuffer's as<T>()). A host destination is any contiguous range of
// mutable elements that is not a temporary container; a queued copy takes
// no temporary container as its source either.

namespace detail {
// A host range a copy can read or write: contiguous and sized (a DeviceSpan is neither).
template <class R>
concept HostRange = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;
template <class R>
using host_element_t = std::remove_reference_t<std::ranges::range_reference_t<R>>;
// A host range a copy writes: its elements are not const, and it is no
// temporary owning its elements (a copy into one would be lost, or for a
// queued copy written into freed memory); a span or an lvalue is fine.
template <class R>
concept HostDestination = HostRange<R> && std::ranges::borrowed_range<R> && !std::is_const_v<host_element_t<R>>;
// A temporary container that owns its elements: what a queued copy must not read.
template <class R>
concept TemporaryHostRange = HostRange<R> && !std::ranges::borrowed_range<R>;
template <class R>
std::span<host_element_t<R>> host_span(R&& r) noexcept {
  return {std::ranges::data(r), std::ranges::size(r)};
}
template <class R>
using host_value_t = std::remove_const_t<host_element_t<R>>;
// An owner of device memory (DeviceBuffer, AsyncDeviceBuffer, ManagedBuffer),
// untyped: a copy views it with the element type of its other side.
template <class B>
concept DeviceOwner = requires(const B& b) {
  { b.template as<std::byte>() } -> std::same_as<DeviceSpan<std::byte>>;
};
// An owner of page-locked host memory (PinnedBuffer), likewise.
template <class B>
concept PinnedOwner = requires(const B& b) {
  { b.template as<std::byte>() } -> std::same_as<std::span<std::byte>>;
};
}  // namespace detail

/// Host to device, synchronous.
template <class T>
requires(!std::is_const_v<T>) void copy(DeviceSpan<T> dst, std::type_identity_t<std::span<const T>> src) {
  detail::copy_to_device(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.data(), src.size_bytes(),
                         nullptr);
}
/// Device to host, synchronous.
template <detail::HostDestination R>
void copy(R&& dst, DeviceSpan<const detail::host_element_t<R>> src) {
  const auto host = detail::host_span(dst);
  detail::copy_to_host(src.context(), host.data(), host.size_bytes(), src.address(), src.size_bytes(), src.owner_id(),
                       nullptr);
}
/// Device to device, synchronous (with respect to the host for the copy's completion).
/// Between two contexts (two devices: a unified-address copy) both devices
/// must have unified addressing (InvalidArgumentError otherwise, naming
/// copy_peer, which needs none); dst's context is made current.
template <class T>
requires(!std::is_const_v<T>) void copy(DeviceSpan<T> dst, std::type_identity_t<DeviceSpan<const T>> src) {
  if (dst.context().address() != src.context().address()) {
    return detail::copy_across_contexts(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.context(),
                                        src.address(), src.size_bytes(), src.owner_id(), nullptr);
  }
  detail::copy_device_to_device(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.address(),
                                src.size_bytes(), src.owner_id(), nullptr);
}
/// Host to device on a stream.
template <class T>
requires(!std::is_const_v<T>) void copy_async(const StreamRef& stream, DeviceSpan<T> dst,
                                              std::type_identity_t<std::span<const T>> src) {
  detail::copy_to_device(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.data(), src.size_bytes(),
                         &stream);
}
/// A queued copy from a temporary container is refused at compile time: the
/// container is gone before the stream reads it.
template <class T, detail::TemporaryHostRange R>
void copy_async(const StreamRef& stream, DeviceSpan<T> dst, R&& src) = delete;
/// Device to host on a stream.
template <detail::HostDestination R>
void copy_async(const StreamRef& stream, R&& dst, DeviceSpan<const detail::host_element_t<R>> src) {
  const auto host = detail::host_span(dst);
  detail::copy_to_host(src.context(), host.data(), host.size_bytes(), src.address(), src.size_bytes(), src.owner_id(),
                       &stream);
}
/// Device to device on a stream. Between two contexts (see copy() above) the
/// stream may be of either or of a third context of the same Driver.
template <class T>
requires(!std::is_const_v<T>) void copy_async(const StreamRef& stream, DeviceSpan<T> dst,
                                              std::type_identity_t<DeviceSpan<const T>> src) {
  if (dst.context().address() != src.context().address()) {
    return detail::copy_across_contexts(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.context(),
                                        src.address(), src.size_bytes(), src.owner_id(), &stream);
  }
  detail::copy_device_to_device(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.address(),
                                src.size_bytes(), src.owner_id(), &stream);
}

// ---- copies with owners ---------------------------------------------------------------------
// An owner (DeviceBuffer, AsyncDeviceBuffer, ManagedBuffer, PinnedBuffer) is
// untyped memory: a copy views it as elements of its other side's type, as
// owner.as<T>() would (its size must be a multiple of sizeof(T)), and then
// copies as above. Between two owners the element type is unknown: view one.

/// Host range to a device owner.
template <detail::DeviceOwner B, detail::HostRange R>
void copy(const B& dst, R&& src) {
  copy(dst.template as<detail::host_value_t<R>>(), std::forward<R>(src));
}
/// A device owner to a host range.
template <detail::HostDestination R, detail::DeviceOwner B>
void copy(R&& dst, const B& src) {
  copy(std::forward<R>(dst), src.template as<const detail::host_element_t<R>>());
}
/// A device owner to a device span, and a device span to a device owner.
template <class T, detail::DeviceOwner B>
requires(!std::is_const_v<T>) void copy(DeviceSpan<T> dst, const B& src) { copy(dst, src.template as<const T>()); }
template <detail::DeviceOwner B, class U>
void copy(const B& dst, DeviceSpan<U> src) {
  copy(dst.template as<std::remove_const_t<U>>(), src);
}
/// A pinned owner to a device span, and a device span to a pinned owner.
template <class T, detail::PinnedOwner P>
requires(!std::is_const_v<T>) void copy(DeviceSpan<T> dst, const P& src) { copy(dst, src.template as<const T>()); }
template <detail::PinnedOwner P, class U>
void copy(const P& dst, DeviceSpan<U> src) {
  copy(dst.template as<std::remove_const_t<U>>(), src);
}
/// The same on a stream: a host range to a device owner (no temporary
/// container, as above), a device owner to a host range, and pinned owners
/// with device spans.
template <detail::DeviceOwner B, detail::HostRange R>
requires std::ranges::borrowed_range<R>
void copy_async(const StreamRef& stream, const B& dst, R&& src) {
  copy_async(stream, dst.template as<detail::host_value_t<R>>(), std::forward<R>(src));
}
template <detail::DeviceOwner B, detail::TemporaryHostRange R>
void copy_async(const StreamRef& stream, const B& dst, R&& src) = delete;
template <detail::HostDestination R, detail::DeviceOwner B>
void copy_async(const StreamRef& stream, R&& dst, const B& src) {
  copy_async(stream, std::forward<R>(dst), src.template as<const detail::host_element_t<R>>());
}
template <class T, detail::DeviceOwner B>
requires(!std::is_const_v<T>) void copy_async(const StreamRef& stream, DeviceSpan<T> dst, const B& src) {
  copy_async(stream, dst, src.template as<const T>());
}
template <detail::DeviceOwner B, class U>
void copy_async(const StreamRef& stream, const B& dst, DeviceSpan<U> src) {
  copy_async(stream, dst.template as<std::remove_const_t<U>>(), src);
}
template <class T, detail::PinnedOwner P>
requires(!std::is_const_v<T>) void copy_async(const StreamRef& stream, DeviceSpan<T> dst, const P& src) {
  copy_async(stream, dst, src.template as<const T>());
}
template <detail::PinnedOwner P, class U>
void copy_async(const StreamRef& stream, const P& dst, DeviceSpan<U> src) {
  copy_async(stream, dst.template as<std::remove_const_t<U>>(), src);
}

// A temporary owner frees its memory when the call's full expression ends:
// a copy into one is lost, and a queued copy would touch freed memory.
template <class B, class S>
requires(!std::is_reference_v<B> && (detail::DeviceOwner<B> || detail::PinnedOwner<B>)) void copy(B&& dst,
                                                                                                  S&& src) = delete;
template <class B, class S>
requires(!std::is_reference_v<B> &&
         (detail::DeviceOwner<B> || detail::PinnedOwner<B>)) void copy_async(const StreamRef& stream, B&& dst,
                                                                             S&& src) = delete;
template <class D, class B>
requires(!std::is_reference_v<B> &&
         (detail::DeviceOwner<B> || detail::PinnedOwner<B>)) void copy_async(const StreamRef& stream, D&& dst,
                                                                             B&& src) = delete;

/// Sets every element to `value` (converted to the element type, so
/// fill(span_of_uint32, 0) works) with cuMemsetD8/D16/D32 (by sizeof(T): 1, 2 or 4).
template <class T>
requires(!std::is_const_v<T>) void fill(DeviceSpan<T> dst, std::type_identity_t<T> value) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4, "fill works on 8-, 16- and 32-bit elements");
  std::uint32_t pattern = 0;
  __builtin_memcpy(&pattern, &value, sizeof(T));
  detail::fill_device(dst.context(), dst.address(), dst.size(), sizeof(T), pattern, dst.owner_id(), nullptr);
}
/// fill() on a stream (cuMemsetD*Async).
template <class T>
requires(!std::is_const_v<T>) void fill_async(const StreamRef& stream, DeviceSpan<T> dst,
                                              std::type_identity_t<T> value) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4, "fill works on 8-, 16- and 32-bit elements");
  std::uint32_t pattern = 0;
  __builtin_memcpy(&pattern, &value, sizeof(T));
  detail::fill_device(dst.context(), dst.address(), dst.size(), sizeof(T), pattern, dst.owner_id(), &stream);
}

// ---- 2D copies and fills ------------------------------------------------------------------

/// Where one side of a 2D copy lives.
enum class MemorySide {
  host,     ///< host memory (pageable or page-locked)
  device,   ///< device memory
  unified,  ///< either: the driver decides from the address (unified addressing)
};

/// A 2D copy (cuMemcpy2D): `height` rows of `width_bytes`, rows `src_pitch`
/// and `dst_pitch` bytes apart.
struct Copy2D {
  const void* src = nullptr;
  std::size_t src_pitch = 0;
  MemorySide src_side = MemorySide::unified;
  void* dst = nullptr;
  std::size_t dst_pitch = 0;
  MemorySide dst_side = MemorySide::unified;
  std::size_t width_bytes = 0;
  std::size_t height = 0;
};

/// cuMemCpy2D in `context`, or cuMemcpy2DAsync on `stream`. Throws
/// InvalidArgumentError, before calling the driver, when a pitch is smaller
/// than the width or a pointer is null; CudaError for what the driver refuses.
DRVSHIM_API void copy_2d(const ContextRef& context, const Copy2D& copy, const StreamRef* stream = nullptr);

/// cuMemsetD2D8 (or its Async form on `stream`): sets `height` rows of
/// `width_bytes` bytes, `pitch` bytes apart, to `value`.
DRVSHIM_API void fill_2d(const ContextRef& context, DevicePtr dst, std::size_t pitch, std::uint8_t value,
                         std::size_t width_bytes, std::size_t height, const StreamRef* stream = nullptr);

}  // namespace drvshim
