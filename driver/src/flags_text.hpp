#pragma once
// Renders a flag set in symbolic form ("portable|device_map"), unknown bits in
// hex, and `none` for an empty set: one helper for every typed flag enum.
#include <fmt/format.h>

#include <initializer_list>
#include <string>
#include <utility>

namespace drvshim::detail {

inline std::string flags_text(unsigned bits, std::initializer_list<std::pair<unsigned, const char*>> names,
                              const char* none = "none") {
  if (bits == 0) return none;
  std::string out;
  unsigned known = 0;
  for (const auto& [bit, name] : names) {
    known |= bit;
    if ((bits & bit) != 0) {
      if (!out.empty()) out += '|';
      out += name;
    }
  }
  if ((bits & ~known) != 0) out += fmt::format("{}0x{:x}", out.empty() ? "" : "|", bits & ~known);
  return out;
}

}  // namespace drvshim::detail
