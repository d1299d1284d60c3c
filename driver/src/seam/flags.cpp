// SPDX-License-Identifier: Apache-2.0
#include <drvshim/flags.hpp>

#include "log_internal.hpp"

namespace drvshim::detail {

std::string flags_text(unsigned bits, const FlagName* names, std::size_t count, unsigned zero_mask,
                       const char* zero_name) {
  std::string out;
  if ((bits & zero_mask) == 0) out = zero_name;
  unsigned known = 0;
  for (std::size_t i = 0; i < count; ++i) {
    known |= names[i].bits;
    if ((bits & names[i].bits) != 0) {
      if (!out.empty()) out += '|';
      out += names[i].name;
    }
  }
  if ((bits & ~known) != 0) out += fmt::format("{}0x{:x}", out.empty() ? "" : "|", bits & ~known);
  return out;
}

}  // namespace drvshim::detail
