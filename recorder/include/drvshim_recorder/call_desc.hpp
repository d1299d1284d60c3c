// SPDX-License-Identifier: Apache-2.0
#pragma once
// How a call recorded as raw argument words is rendered later, off the
// caller's thread: what each parameter is (from the C++ type, at compile
// time) and what it is called (from the toolkit's headers, at build time).
#include <cstdint>
#include <type_traits>

namespace drvshim::recorder {

enum class ArgKind : std::uint8_t {
  sint,       // signed integer or enum: one word, sign-extended
  uint,       // unsigned integer: one word
  real,       // float or double: one word holding a double
  ptr,        // a pointer or handle passed in: its address
  str,        // const char*: the text is copied into the record
  out_sint,   // T* with T a signed integer: the value written (after a successful call)
  out_uint,   // T* with T unsigned
  out_ptr,    // T* with T a pointer or handle (CUcontext*, void**)
  out_real,   // float* / double*
  aggregate,  // a struct passed by value: not captured
};

constexpr bool is_out(ArgKind k) noexcept {
  return k == ArgKind::out_sint || k == ArgKind::out_uint || k == ArgKind::out_ptr || k == ArgKind::out_real;
}

// The kind of a parameter of C++ type T. Non-const pointers to scalars are
// taken as out parameters; char* is a buffer, never dereferenced.
template <class T>
constexpr ArgKind arg_kind() noexcept {
  if constexpr (std::is_same_v<T, const char*>) {
    return ArgKind::str;
  } else if constexpr (std::is_pointer_v<T>) {
    using P = std::remove_pointer_t<T>;
    if constexpr (std::is_const_v<P> || std::is_same_v<P, char> || std::is_void_v<P> || std::is_function_v<P>) {
      return ArgKind::ptr;
    } else if constexpr (std::is_floating_point_v<P>) {
      return ArgKind::out_real;
    } else if constexpr (std::is_pointer_v<P>) {
      return ArgKind::out_ptr;
    } else if constexpr (std::is_enum_v<P> || std::is_signed_v<P>) {
      return ArgKind::out_sint;
    } else if constexpr (std::is_integral_v<P>) {
      return ArgKind::out_uint;
    } else {
      return ArgKind::ptr;
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    return ArgKind::real;
  } else if constexpr (std::is_enum_v<T> || std::is_signed_v<T>) {
    return ArgKind::sint;
  } else if constexpr (std::is_integral_v<T>) {
    return ArgKind::uint;
  } else {
    return ArgKind::aggregate;
  }
}

// One entry point as the build saw it.
struct CallDesc {
  const char* symbol;       // exported name ("cuMemAlloc_v2")
  const char* api;          // base name ("cuMemAlloc")
  const char* param_names;  // "dptr,bytesize"
  const char* hex;          // per parameter '1' when its value reads best in hex, 'a' for an input
                            // array behind a non-const pointer (rendered as its address, not read)
  std::uint16_t nparams;
};

// Words a call of these kinds records: one per parameter, one per out
// parameter (the value written), and one bitmask saying which out values are valid.
constexpr std::size_t words_for(const ArgKind* kinds, std::size_t n) noexcept {
  std::size_t w = n + 1;
  for (std::size_t i = 0; i < n; ++i) w += is_out(kinds[i]) ? std::size_t{1} : std::size_t{0};
  return w;
}

}  // namespace drvshim::recorder
