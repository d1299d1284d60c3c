// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file owning_handle.hpp
/// The one ownership mechanism behind drvshim's move-only owners
/// (DeviceBuffer, Stream, Event, Module, ...): move construction, move
/// assignment, destruction and the two release calls are written once, here;
/// each owner supplies only its traits (OwnershipTraits, below).
#include <drvshim/error.hpp>

#include <concepts>
#include <new>
#include <type_traits>
#include <utility>

namespace drvshim::detail {

/// What an owner supplies to OwningHandle:
///
///     struct Traits {
///       using value_type = ...;  // the handle plus what releasing it needs (context, size, id)
///       static bool held(const value_type&) noexcept;   // whether there is something to release
///       static void clear(value_type&) noexcept;        // what a move leaves in the source
///       static Status release(value_type&) noexcept;    // the no-throw twin: frees, leaves the value not held
///       static void release_or_throw(value_type&);      // the throwing twin: frees; not held after, also when
///                                                        // the driver fails; a refusal before any driver call
///                                                        // (a forked child, a host function) may keep it held
///     };
///
/// Both twins are called only on a held value. Destruction and move
/// assignment use the no-throw twin, so an owner never throws from either.
template <class Traits>
concept OwnershipTraits = requires(typename Traits::value_type& v, const typename Traits::value_type& cv) {
  { Traits::held(cv) }
  noexcept->std::same_as<bool>;
  { Traits::clear(v) }
  noexcept;
  { Traits::release(v) }
  noexcept->std::same_as<Status>;
  Traits::release_or_throw(v);
};

/// A move-only owner of one driver resource, described by `Traits`
/// (OwnershipTraits). A moved-from or released OwningHandle holds nothing;
/// releasing it again is a no-op.
template <class Traits>
requires OwnershipTraits<Traits>
class OwningHandle {
 public:
  using value_type = typename Traits::value_type;
  static_assert(std::is_nothrow_copy_constructible_v<value_type> && std::is_nothrow_copy_assignable_v<value_type>,
                "a move copies the value, then clears the source");

  explicit OwningHandle(value_type value) noexcept(std::is_nothrow_move_constructible_v<value_type>)
      : value_(std::move(value)) {}
  // The source keeps what Traits::clear leaves (an owner's context, say): its
  // accessors still answer after a move. So the value is copied, not moved.
  // NOLINTNEXTLINE(performance-move-constructor-init)
  OwningHandle(OwningHandle&& other) noexcept : value_(other.value_) { Traits::clear(other.value_); }
  OwningHandle& operator=(OwningHandle&& other) noexcept {
    if (this != &other) {
      (void)release(std::nothrow);
      value_ = other.value_;
      Traits::clear(other.value_);
    }
    return *this;
  }
  OwningHandle(const OwningHandle&) = delete;
  OwningHandle& operator=(const OwningHandle&) = delete;
  ~OwningHandle() { (void)release(std::nothrow); }

  /// Whether there is something to release.
  bool held() const noexcept { return Traits::held(value_); }
  const value_type& get() const noexcept { return value_; }
  value_type& get() noexcept { return value_; }

  /// The throwing twin; a no-op when nothing is held.
  void release() {
    if (Traits::held(value_)) Traits::release_or_throw(value_);
  }
  /// Gives the resource up without releasing it: returns the value and holds
  /// nothing (its new owner, or the driver's own calls, release it).
  value_type forget() noexcept {
    value_type v = value_;
    Traits::clear(value_);
    return v;
  }
  /// The no-throw twin; success when nothing is held.
  [[nodiscard]] Status release(std::nothrow_t) noexcept {
    if (!Traits::held(value_)) return {};
    return Traits::release(value_);
  }

 private:
  value_type value_;
};

}  // namespace drvshim::detail
