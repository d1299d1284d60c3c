// SPDX-License-Identifier: Apache-2.0
// Rendering a call's raw words as the args text, on the consumer's side.
#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <string>

#include "entry.hpp"

namespace drvshim::recorder::detail {
namespace {

template <class T>
void append_int(std::string& out, T v, int base = 10) {
  char buf[24];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, base);
  out.append(buf, static_cast<std::size_t>(res.ptr - buf));
}

void append_uint(std::string& out, std::uint64_t v, bool hex) {
  if (hex) {
    out += "0x";
    append_int(out, v, 16);
  } else {
    append_int(out, v);
  }
}

void append_pointer(std::string& out, std::uint64_t v) {
  if (v == 0) {
    out += "null";
  } else {
    out += "0x";
    append_int(out, v, 16);
  }
}

void append_real(std::string& out, std::uint64_t bits) {
  double d = 0;
  std::memcpy(&d, &bits, sizeof(d));
  fmt::format_to(std::back_inserter(out), "{}", d);
}

void append_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
}

}  // namespace

void render_words(const CallDesc& desc, const ArgKind* kinds, const std::uint64_t* words, std::size_t nwords,
                  std::string_view strings, std::string& out) {
  const std::size_t n = desc.nparams;
  if (nwords < n + 1) return;  // not produced by call_words' contract; render nothing rather than guess
  const std::uint64_t valid = words[nwords - 1];
  std::size_t out_index = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    const std::uint64_t w = words[i];
    const bool hex = desc.hex != nullptr && desc.hex[i] == '1';
    if (is_out(kinds[i]) && desc.hex != nullptr && desc.hex[i] == 'a') {
      // An input array behind a non-const pointer (kernelParams, options): its address.
      ++out_index;
      append_pointer(out, w);
      continue;
    }
    switch (kinds[i]) {
      case ArgKind::sint: append_int(out, static_cast<std::int64_t>(w)); break;
      case ArgKind::uint: append_uint(out, w, hex); break;
      case ArgKind::real: append_real(out, w); break;
      case ArgKind::ptr: append_pointer(out, w); break;
      case ArgKind::aggregate: out += "{...}"; break;
      case ArgKind::str: {
        if (w == 0) {
          out += "null";
          break;
        }
        const std::size_t end = strings.find('\0');
        append_quoted(out, strings.substr(0, end));
        strings.remove_prefix(end == std::string_view::npos ? strings.size() : end + 1);
        break;
      }
      case ArgKind::out_sint:
      case ArgKind::out_uint:
      case ArgKind::out_ptr:
      case ArgKind::out_real: {
        const std::uint64_t value = out_index < nwords - 1 ? words[out_index] : 0;
        ++out_index;
        if (w == 0) {
          out += "null";
        } else if (i >= 64 || (valid & (std::uint64_t{1} << i)) == 0) {
          out += "->?";
        } else {
          out += "->";
          if (kinds[i] == ArgKind::out_sint) {
            append_int(out, static_cast<std::int64_t>(value));
          } else if (kinds[i] == ArgKind::out_uint) {
            append_uint(out, value, hex);
          } else if (kinds[i] == ArgKind::out_ptr) {
            append_pointer(out, value);
          } else {
            append_real(out, value);
          }
        }
        break;
      }
    }
  }
}

}  // namespace drvshim::recorder::detail
