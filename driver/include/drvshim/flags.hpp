// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file flags.hpp
/// One helper for every typed flag enum of drvshim (HostAllocFlags,
/// HostRegisterFlags, StreamFlags, EventFlags, ContextFlags): `a | b`,
/// `a & b`, has(set, flag) and to_string(flags), from the table of names each
/// enum declares once (a FlagTraits specialisation next to the enum).
///
///     auto flags = drvshim::HostAllocFlags::portable | drvshim::HostAllocFlags::device_map;
///     has(flags, drvshim::HostAllocFlags::device_map);   // true
///     to_string(flags);                                   // "portable|device_map"
#include <drvshim/export.hpp>

#include <cstddef>
#include <iterator>
#include <string>
#include <type_traits>

namespace drvshim {

/// One named bit (or bit pattern) of a flag enum, as to_string() prints it.
struct FlagName {
  unsigned bits;
  const char* name;
};

/// What makes an enum a flag enum: specialise with
///   names       the named bits, in the order to_string() prints them;
///   zero_mask   the bits whose absence has a name of its own ...
///   zero_name   ... and that name: "none" for a set without any bit (zero_mask
///               all ones); ContextFlags names an empty scheduling field
///               (mask 0x7) "sched_auto", whatever the other bits are.
template <class E>
struct FlagTraits;

/// An enum with a FlagTraits specialisation.
template <class E>
concept FlagEnum = std::is_enum_v<E> && requires {
  { FlagTraits<E>::names[0].bits } -> std::convertible_to<unsigned>;
  { FlagTraits<E>::zero_mask } -> std::convertible_to<unsigned>;
  { FlagTraits<E>::zero_name } -> std::convertible_to<const char*>;
};

namespace detail {
// Renders `bits`: the zero name (when the zero mask's bits are all clear),
// then each named bit set, joined with '|', then any unknown bits in hex.
DRVSHIM_API std::string flags_text(unsigned bits, const FlagName* names, std::size_t count, unsigned zero_mask,
                                   const char* zero_name);

template <FlagEnum E>
constexpr unsigned bits_of(E flags) noexcept {
  return static_cast<unsigned>(static_cast<std::underlying_type_t<E>>(flags));
}
}  // namespace detail

/// The union of two flag sets.
template <FlagEnum E>
constexpr E operator|(E a, E b) noexcept {
  return static_cast<E>(detail::bits_of(a) | detail::bits_of(b));
}
/// The flags present in both sets.
template <FlagEnum E>
constexpr E operator&(E a, E b) noexcept {
  return static_cast<E>(detail::bits_of(a) & detail::bits_of(b));
}
/// Whether `set` has any bit of `flag`.
template <FlagEnum E>
constexpr bool has(E set, E flag) noexcept {
  return (detail::bits_of(set) & detail::bits_of(flag)) != 0;
}
/// Every bit that has a name in the enum's table.
template <FlagEnum E>
constexpr unsigned known_flag_bits() noexcept {
  unsigned known = 0;
  for (const FlagName& n : FlagTraits<E>::names) known |= n.bits;
  return known;
}
/// The flags in symbolic form: "portable|device_map"; "none" for an empty
/// set (ContextFlags: "sched_auto"); bits without a name in hex ("portable|0x40").
template <FlagEnum E>
std::string to_string(E flags) {
  return detail::flags_text(detail::bits_of(flags), FlagTraits<E>::names, std::size(FlagTraits<E>::names),
                            FlagTraits<E>::zero_mask, FlagTraits<E>::zero_name);
}

}  // namespace drvshim
