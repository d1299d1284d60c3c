// SPDX-License-Identifier: Apache-2.0
// The pure parsers of env.hpp (no logging), compiled into the unit tests too.
#include <cctype>
#include <cstdint>
#include <string>

#include "env.hpp"

namespace drvshim::detail::env {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<bool> parse_flag(std::string_view text) noexcept {
  // No allocation: drvshim-trace's preload library parses switches between fork and exec.
  const auto is = [text](std::string_view word) {
    if (text.size() != word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(text[i])) != word[i]) return false;
    }
    return true;
  };
  if (is("1") || is("true") || is("yes") || is("on")) return true;
  if (is("0") || is("false") || is("no") || is("off")) return false;
  return std::nullopt;
}

std::optional<std::uint64_t> parse_bytes(std::string_view text) noexcept {
  std::uint64_t n = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const std::uint64_t digit = static_cast<std::uint64_t>(text[i] - '0');
    if (n > (UINT64_MAX - digit) / 10) return std::nullopt;
    n = n * 10 + digit;
  }
  if (i == 0) return std::nullopt;
  std::string_view unit = text.substr(i);
  unsigned shift = 0;
  if (!unit.empty()) {
    switch (unit[0]) {
      case 'k':
      case 'K': shift = 10; break;
      case 'm':
      case 'M': shift = 20; break;
      case 'g':
      case 'G': shift = 30; break;
      case 't':
      case 'T': shift = 40; break;
      case 'b':
      case 'B': shift = 0; break;
      default: return std::nullopt;
    }
    unit.remove_prefix(1);
    if (shift != 0 && (unit == "iB" || unit == "ib" || unit == "B" || unit == "b")) unit = {};
    if (!unit.empty()) return std::nullopt;
  }
  if (shift != 0 && n > (UINT64_MAX >> shift)) return std::nullopt;
  return n << shift;
}

}  // namespace drvshim::detail::env
